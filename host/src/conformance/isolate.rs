//! Running one check in a child process and turning whatever happened to it
//! into an [`Outcome`].
//!
//! The child is the host itself (`host conformance --child-check CHECK PATH`):
//! it loads the plugin, runs the check and prints one line of JSON. The parent
//! enforces the timeout and maps every way a child can end: a signal
//! (SIGSEGV, SIGABRT, ...), a non-zero exit, a timeout, or output that is not
//! the expected JSON. Nothing here may panic on what a child does.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Outcome;

/// The hidden flag of `host conformance` that runs one check in-process.
pub const CHILD_FLAG: &str = "--child-check";

/// How much of a child's stdout and stderr is kept; the rest is drained and dropped.
const KEEP_BYTES: usize = 64 * 1024;
/// How much of stderr a failure quotes.
const STDERR_TAIL: usize = 600;
/// How much of garbage on stdout a failure quotes.
const STDOUT_HEAD: usize = 80;

/// Runs `check` on `plugin` in a child of `exe`, killing it after `timeout`.
/// `include` reaches the child as [`super::INCLUDE_ENV`] (the driver-text
/// checks' header folders; the variable is left as it is when empty).
pub fn run_isolated(
    exe: &Path,
    plugin: &Path,
    check: &str,
    timeout: Duration,
    include: &[std::path::PathBuf],
) -> Outcome {
    let mut command = Command::new(exe);
    if !include.is_empty() {
        match std::env::join_paths(include) {
            Ok(joined) => {
                command.env(super::INCLUDE_ENV, joined);
            }
            Err(e) => {
                return Outcome::fail(format!("an --include folder cannot be passed on: {e}"))
            }
        }
    }
    command
        .arg("conformance")
        .arg(CHILD_FLAG)
        .arg(check)
        .arg(plugin)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that a timeout kills whatever the plugin
        // may have started too, and the pipes close.
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return Outcome::fail(format!(
                "could not start the check's child process {}: {e}",
                exe.display()
            ))
        }
    };
    let stdout = reader(child.stdout.take());
    let stderr = reader(child.stderr.take());
    let status = wait_with_timeout(&mut child, timeout);
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Ok(Some(status)) => interpret(status, &stdout, &stderr),
        Ok(None) => Outcome::fail(format!(
            "timed out after {} s (the child process was killed)",
            timeout.as_secs_f64()
        )),
        Err(e) => Outcome::fail(format!("lost track of the check's child process: {e}")),
    }
}

fn reader(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let Some(mut pipe) = pipe else {
            return kept;
        };
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = KEEP_BYTES.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        kept
    })
}

/// Polls the child until it exits or `timeout` passes; `Ok(None)` when it was
/// killed for running too long.
fn wait_with_timeout(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if start.elapsed() >= timeout {
            kill_group(child);
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: `kill` has no memory-safety preconditions; the negative pid
        // names the process group this child leads (see `process_group(0)`).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
}

/// What a finished child's status and output mean.
fn interpret(status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> Outcome {
    let tail = stderr_tail(stderr);
    let with_tail = |text: String| {
        if tail.is_empty() {
            text
        } else {
            format!("{text}; stderr: {tail}")
        }
    };
    if let Some(signal) = status.signal() {
        return Outcome::fail(with_tail(format!(
            "the plugin crashed: killed by {} (signal {signal})",
            signal_name(signal)
        )));
    }
    match status.code() {
        Some(0) => {}
        Some(code) => {
            return Outcome::fail(with_tail(format!("the check exited with status {code}")))
        }
        None => return Outcome::fail(with_tail("the check ended without a status".to_string())),
    }
    let text = String::from_utf8_lossy(stdout);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Outcome::fail(with_tail(
            "the check exited without printing a result".to_string(),
        ));
    }
    match serde_json::from_str::<Outcome>(trimmed) {
        Ok(outcome) if !trimmed.contains('\n') => outcome,
        _ => Outcome::fail(format!(
            "wrote unparseable output on stdout (a plugin must never write to stdout); it begins with {:?}",
            head(trimmed, STDOUT_HEAD)
        )),
    }
}

fn head(text: &str, max_chars: usize) -> String {
    text.chars().take(max_chars).collect()
}

fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let joined = lines.join(" / ");
    let count = joined.chars().count();
    if count <= STDERR_TAIL {
        joined
    } else {
        let tail: String = joined.chars().skip(count - STDERR_TAIL).collect();
        format!("...{tail}")
    }
}

/// The conventional name of a signal (`SIGSEGV`), or `signal N`.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGSYS => "SIGSYS",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGHUP => "SIGHUP",
        libc::SIGALRM => "SIGALRM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// Turns off core dumps for this process: a child that crashes on purpose
/// (a broken plugin) must not leave a core file or wait for one to be written.
pub fn limit_core_dumps() {
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `setrlimit` reads the struct we pass and touches nothing else.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &zero);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::Status;

    fn exit(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn signals_are_named() {
        let outcome = interpret(ExitStatus::from_raw(libc::SIGSEGV), b"", b"");
        assert_eq!(outcome.status, Status::Fail);
        assert!(outcome.reason.contains("SIGSEGV"), "{}", outcome.reason);
        assert_eq!(signal_name(libc::SIGABRT), "SIGABRT");
        assert_eq!(signal_name(77), "signal 77");
    }

    #[test]
    fn nonzero_exit_quotes_stderr() {
        let outcome = interpret(exit(3), b"", b"first\n\nboom\n");
        assert_eq!(
            outcome.reason,
            "the check exited with status 3; stderr: first / boom"
        );
    }

    #[test]
    fn stdout_must_be_exactly_one_json_line() {
        let ok = interpret(exit(0), b"{\"status\":\"pass\",\"reason\":\"\"}\n", b"");
        assert_eq!(ok.status, Status::Pass);
        let garbage = interpret(
            exit(0),
            b"hello from the plugin\n{\"status\":\"pass\"}",
            b"",
        );
        assert_eq!(garbage.status, Status::Fail);
        assert!(
            garbage.reason.contains("\"hello from"),
            "{}",
            garbage.reason
        );
        let nothing = interpret(exit(0), b"", b"");
        assert!(nothing.reason.contains("without printing"));
    }
}
