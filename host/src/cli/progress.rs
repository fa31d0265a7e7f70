//! Progress on stderr for work that may take more than a moment: nothing is
//! drawn for the first second, and nothing ever when stderr is not a terminal
//! (pipes and CI logs stay clean).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before its progress appears.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// One piece of long work, shown as a bar (counted steps) or a spinner.
pub(crate) struct Activity {
    bar: ProgressBar,
}

impl Activity {
    /// Work of `total` steps (a spinner when `None`) described by `what`.
    pub fn start(what: &str, total: Option<u64>) -> Activity {
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        let template = match total {
            Some(_) => "{spinner} {prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})",
            None => "{spinner} {prefix} {msg} ({elapsed})",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(what.to_string());
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            let shown = bar.clone();
            std::thread::spawn(move || {
                std::thread::sleep(QUIET_FOR);
                if !shown.is_finished() {
                    shown.set_draw_target(ProgressDrawTarget::stderr());
                    shown.enable_steady_tick(Duration::from_millis(120));
                }
            });
        }
        Activity { bar }
    }

    /// `done` of `total` steps are finished; `message` says what runs now.
    pub fn update(&self, done: u64, total: u64, message: &str) {
        self.bar.set_length(total);
        self.bar.set_position(done);
        self.bar.set_message(message.to_string());
    }

    /// The work is over: the line disappears.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

/// The reference interpreter's evaluation of `graph`, with progress.
pub(crate) fn evaluate(
    what: &str,
    graph: &crate::graph::Graph,
    inputs: &[crate::tensor::Tensor],
) -> Result<Vec<crate::tensor::Tensor>, crate::interp::Error> {
    let activity = Activity::start(what, Some(graph.node_count() as u64));
    let outs = crate::interp::evaluate_with(graph, inputs, &mut |p| {
        activity.update(
            p.done as u64,
            p.total as u64,
            &format!("{} ({})", p.node, p.op),
        );
    });
    activity.finish();
    outs
}
