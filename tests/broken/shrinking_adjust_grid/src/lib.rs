//! Has an `adjust_grid` that halves the grid.
//!
//! Device `shrinkgrid`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

use kiln_plugin_api::Grid;

#[derive(Default)]
struct ShrinkGrid;

impl baseline::Device for ShrinkGrid {
    const NAME: &'static str = "shrinkgrid";

    // Deliberate fault: a grid that covers only half of the work.
    fn adjust_grid(&self, grid: Grid) -> Grid {
        let wanted = baseline::adjust_grid(grid);
        Grid::new((wanted.x / 2).max(1), wanted.y, wanted.z)
    }
}

baseline::export_device!(ShrinkGrid);
