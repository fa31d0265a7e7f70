//! How much memory the host's own tensor work may take (the reference
//! interpreter, the scheduled-program evaluator, tensor files, `host run`'s
//! buffers), and the refusal of work that would take more.
//!
//! Each layer that allocates tensors says beforehand how many bytes a piece of
//! work needs (`interp::memory_needed`, `schedule::eval::memory_needed`, ...);
//! the command checks the sum against a [`Budget`] before allocating anything,
//! so a graph too large for the machine is refused with the figures instead of
//! aborting on a failed allocation. A size that does not fit in 64 bits counts
//! as too large.

use std::fmt;

/// The environment variable that sets the budget when no flag does.
pub const MEMORY_VAR: &str = "KILN_MAX_MEMORY";

/// Where a budget came from, for the refusal's wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `--max-memory`.
    Flag,
    /// `KILN_MAX_MEMORY`.
    Env,
    /// The memory the operating system says is available now.
    Available,
    /// Neither given nor known: a fixed default.
    Default,
}

/// The bytes a piece of work may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The limit.
    pub bytes: u64,
    /// Where it came from.
    pub source: Source,
}

/// Work refused because it needs more than the budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} needs {}{}, more than the {} {}; {}",
    show(*needed),
    breakdown(parts),
    Bytes(budget.bytes),
    match budget.source {
        Source::Flag => "that --max-memory allows",
        Source::Env => "that KILN_MAX_MEMORY allows",
        Source::Available => "this machine has available",
        Source::Default => "allowed by default",
    },
    if needed.is_some() {
        "use smaller inputs, or raise the limit with --max-memory SIZE (e.g. 64G)"
    } else {
        "no machine can hold it"
    }
)]
pub struct Refused {
    /// What would have needed the memory.
    pub what: String,
    /// Bytes needed; `None` when the figure does not fit in 64 bits.
    pub needed: Option<u64>,
    /// What the figure is made of, when it has more than one part.
    pub parts: Vec<(String, Option<u64>)>,
    /// The budget it was checked against.
    pub budget: Budget,
}

fn show(bytes: Option<u64>) -> String {
    bytes.map_or("more than 2^64 bytes".to_string(), |n| Bytes(n).to_string())
}

fn breakdown(parts: &[(String, Option<u64>)]) -> String {
    if parts.len() < 2 {
        return String::new();
    }
    let each: Vec<String> = parts
        .iter()
        .map(|(name, bytes)| format!("{name} {}", show(*bytes)))
        .collect();
    format!(" ({})", each.join(", "))
}

/// The fixed budget when neither a flag nor the operating system says.
const DEFAULT_BYTES: u64 = 16 << 30;

impl Budget {
    /// The budget for this run: `flag`, else `KILN_MAX_MEMORY`, else the
    /// memory available now (Linux's `MemAvailable`), else 16 GiB. A malformed
    /// `KILN_MAX_MEMORY` is an error naming it.
    pub fn new(flag: Option<u64>) -> Result<Budget, String> {
        if let Some(bytes) = flag {
            return Ok(Budget {
                bytes,
                source: Source::Flag,
            });
        }
        if let Ok(text) = std::env::var(MEMORY_VAR) {
            let bytes = parse_size(&text).map_err(|e| format!("{MEMORY_VAR}={text:?}: {e}"))?;
            return Ok(Budget {
                bytes,
                source: Source::Env,
            });
        }
        Ok(match available() {
            Some(bytes) => Budget {
                bytes,
                source: Source::Available,
            },
            None => Budget {
                bytes: DEFAULT_BYTES,
                source: Source::Default,
            },
        })
    }

    /// Ok when `needed` bytes (`None`: beyond 64 bits) fit; else the refusal.
    pub fn allow(&self, what: &str, needed: Option<u64>) -> Result<(), Refused> {
        self.allow_parts(what, &[(what, needed)])
    }

    /// Ok when the named parts (`None`: beyond 64 bits) fit together; else
    /// the refusal, which gives each part's figure.
    pub fn allow_parts(&self, what: &str, parts: &[(&str, Option<u64>)]) -> Result<(), Refused> {
        let needed = total(parts.iter().map(|(_, bytes)| *bytes));
        match needed {
            Some(n) if n <= self.bytes => Ok(()),
            _ => Err(Refused {
                what: what.to_string(),
                needed,
                parts: parts
                    .iter()
                    .map(|(name, bytes)| (name.to_string(), *bytes))
                    .collect(),
                budget: *self,
            }),
        }
    }
}

/// The sum of byte counts, `None` past 64 bits (or when one is `None`).
pub fn total(parts: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
    parts
        .into_iter()
        .try_fold(0u64, |acc, part| acc.checked_add(part?))
}

/// `count` elements of `bytes` each, `None` past 64 bits.
pub fn elements(count: i64, bytes: u64) -> Option<u64> {
    u64::try_from(count.max(0)).ok()?.checked_mul(bytes)
}

/// The memory available now, from Linux's `/proc/meminfo`.
fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A size such as `64G`, `512M`, `1.5GiB`, `2T` or a plain byte count
/// (binary units: K is 1024 bytes).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| {
        format!("`{text}` is not a size: write bytes, or a number with K, M, G or T")
    })?;
    let scale: f64 = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1.0,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        "T" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("`{text}`: the unit must be K, M, G or T")),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
        return Err(format!("`{text}` is out of range"));
    }
    Ok(bytes as u64)
}

/// A byte count for people: `6.4 GB`.
#[derive(Clone, Copy, Debug)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        match self.0 {
            n if n >= 1 << 40 => write!(f, "{:.1} TiB", b / (1u64 << 40) as f64),
            n if n >= 1 << 30 => write!(f, "{:.1} GiB", b / (1u64 << 30) as f64),
            n if n >= 1 << 20 => write!(f, "{:.1} MiB", b / (1u64 << 20) as f64),
            n if n >= 1 << 10 => write!(f, "{:.1} KiB", b / 1024.0),
            n => write!(f, "{n} bytes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("64G"), Ok(64 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3X").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn refusals_give_the_figures() {
        let budget = Budget {
            bytes: 1 << 30,
            source: Source::Flag,
        };
        assert!(budget.allow("x", Some(1 << 30)).is_ok());
        let refused = budget
            .allow("evaluating `g`", Some(6_400_000_000))
            .unwrap_err()
            .to_string();
        assert_eq!(
            refused,
            "evaluating `g` needs 6.0 GiB, more than the 1.0 GiB that --max-memory allows; \
             use smaller inputs, or raise the limit with --max-memory SIZE (e.g. 64G)"
        );
        let parts = budget
            .allow_parts(
                "evaluating `g`",
                &[
                    ("inputs", Some(3 << 30)),
                    ("the interpreter", Some(1 << 29)),
                ],
            )
            .unwrap_err()
            .to_string();
        assert!(
            parts.starts_with("evaluating `g` needs 3.5 GiB (inputs 3.0 GiB, the interpreter 512.0 MiB), more than"),
            "{parts}"
        );
        assert!(budget
            .allow("x", None)
            .unwrap_err()
            .to_string()
            .contains("more than 2^64 bytes"));
        assert_eq!(total([Some(1), Some(2)]), Some(3));
        assert_eq!(total([Some(u64::MAX), Some(1)]), None);
        assert_eq!(elements(i64::MAX, 8), None);
    }
}
