pub mod plugins;
