//! `graphgen`: Kiln's graph fuzzer from the command line.
//!
//! ```text
//! graphgen show SEED                      print generated graph SEED
//! graphgen check --from N --count C       generate and check graphs here (passes,
//!     [--devices cpu,cuda,gxu,xpu]        schedule evaluator per device, the cpu
//!     [--no-cpu-build] [--triton DIR]     library; --triton writes each Triton
//!     [--findings DIR]                    device's output_code.py under DIR for
//!                                         tools/check_triton.py); a failing graph
//!                                         is minimised into --findings DIR
//! graphgen emit --from N --count C        write graphs/gSEED.toml and
//!     --out DIR [--devices cuda,gxu]      DEVICE/gSEED/output_code.py for the GPU
//!                                         runner (bench/gpu/differential.py)
//! ```
//!
//! Plugins are read from `--plugins DIR` (default: the folder this binary is in).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kiln_tests::graphgen::{self, Checker, Config};

#[derive(Parser)]
#[command(about = "Generate random Kiln graphs and check them against the reference interpreter")]
struct Cli {
    /// Folder with the device plugins (default: this binary's folder).
    #[arg(long, global = true)]
    plugins: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print one generated graph.
    Show {
        /// Its seed.
        seed: u64,
    },
    /// Generate graphs and check each on every device here.
    Check {
        /// First seed.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// How many graphs.
        #[arg(long, default_value_t = 100)]
        count: u64,
        /// Devices, comma-separated.
        #[arg(long, default_value = "cpu,cuda,gxu,xpu", value_delimiter = ',')]
        devices: Vec<String>,
        /// Skip building and running the cpu device's C++ library.
        #[arg(long)]
        no_cpu_build: bool,
        /// Write each Triton device's output_code.py under this folder.
        #[arg(long)]
        triton: Option<PathBuf>,
        /// Write minimised failing graphs here.
        #[arg(long, default_value = "graphgen-findings")]
        findings: PathBuf,
    },
    /// Write graphs and their Triton devices' code for the GPU runner.
    Emit {
        /// First seed.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// How many graphs.
        #[arg(long, default_value_t = 100)]
        count: u64,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
        /// Devices, comma-separated.
        #[arg(long, default_value = "cuda,gxu", value_delimiter = ',')]
        devices: Vec<String>,
    },
}

fn plugin_dir(flag: &Option<PathBuf>) -> PathBuf {
    flag.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("."))
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Panics inside Kiln are findings, reported once each with the graph.
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        eprintln!("panic{at}");
    }));
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn run(cli: &Cli) -> Result<ExitCode, String> {
    let cfg = Config::default();
    match &cli.command {
        Command::Show { seed } => {
            print!("{}", graphgen::generate(*seed, &cfg).spec.to_toml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            from,
            count,
            devices,
            no_cpu_build,
            triton,
            findings,
        } => {
            let devs: Vec<&str> = devices.iter().map(String::as_str).collect();
            let checker = Checker::new(&plugin_dir(&cli.plugins), &devs, !no_cpu_build)?;
            let (mut failed, mut rejected, mut unsupported) = (0, 0, 0);
            for seed in *from..from + count {
                let g = graphgen::generate(seed, &cfg);
                for (what, why) in &g.rejected {
                    rejected += 1;
                    eprintln!("graph {seed}: Kiln refused a `{what}` step: {why}");
                }
                match checker.check(&g.spec, seed) {
                    Ok(passed) => {
                        for why in &passed.unsupported {
                            unsupported += 1;
                            eprintln!("graph {seed}: not supported on {why}");
                        }
                        if let Some(dir) = triton {
                            for (device, code) in passed.triton_code {
                                let path =
                                    dir.join(&device).join(&g.spec.name).join("output_code.py");
                                write(&path, &code)?;
                            }
                        }
                    }
                    Err(f) => {
                        failed += 1;
                        let stage = f.stage.clone();
                        let small = graphgen::minimize(
                            &g.spec,
                            |c| matches!(checker.check(c, seed), Err(e) if e.stage == stage),
                        );
                        let why = checker.check(&small, seed).err().unwrap_or(f);
                        let path = findings.join(format!("{}.toml", g.spec.name));
                        let header: String = format!("{why}")
                            .lines()
                            .map(|l| format!("# {l}\n"))
                            .collect();
                        write(&path, &format!("{header}{}", small.to_toml()))?;
                        eprintln!("graph {seed}: {why}\n  minimised: {}", path.display());
                    }
                }
            }
            println!(
                "{count} graph(s) from seed {from} on {}: {failed} failed, {rejected} step(s) refused, \
                 {unsupported} compile(s) not supported by a device",
                devices.join(", ")
            );
            Ok(if failed == 0 && rejected == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Emit {
            from,
            count,
            out,
            devices,
        } => {
            let devs: Vec<&str> = devices.iter().map(String::as_str).collect();
            let registry =
                kiln::plugins::discover(&kiln::plugins::search_path(&[plugin_dir(&cli.plugins)]));
            let mut refused = 0;
            for seed in *from..from + count {
                let g = graphgen::generate(seed, &cfg);
                let text = g.spec.to_toml();
                write(
                    &out.join("graphs").join(format!("{}.toml", g.spec.name)),
                    &text,
                )?;
                for d in &devs {
                    let plugin = registry.get(d).ok_or_else(|| format!("no `{d}` plugin"))?;
                    let graph = kiln::graph::parse_toml(&text).map_err(|e| e.to_string())?;
                    match kiln::driver::compile(graph, plugin, &Default::default()) {
                        Ok(a) => {
                            a.write_to(&out.join(d).join(&g.spec.name))
                                .map_err(|e| e.to_string())?;
                        }
                        Err(e) => {
                            refused += 1;
                            eprintln!("graph {seed} on {d}: {e}");
                        }
                    }
                }
            }
            println!(
                "wrote {count} graph(s) to {}; {refused} compile(s) refused",
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
