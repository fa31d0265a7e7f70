//! How much memory the host's own tensor work may take (the reference
//! interpreter, the scheduled-program evaluator, tensor files, `host run`'s
//! buffers), and the refusal of work that would take more.
//!
//! Each layer that allocates tensors says beforehand how many bytes a piece of
//! work needs (`interp::memory_needed`, `schedule::eval::memory_needed`, ...);
//! the command checks the sum against a [`Budget`] before allocating anything,
//! so a graph too large for the machine is refused with the figures instead of
//! aborting on a failed allocation. A size that does not fit in 64 bits counts
//! as too large. What no estimate foresees is allocated fallibly ([`try_vec`]:
//! tensor files, the interpreter's and the scheduled program's intermediates),
//! or, for a `.pt2` archive, checked against the budget member by member as it
//! is read, before anything is allocated; a failure is the same refusal.

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
    /// What is left under the address-space limit (`ulimit -v`, `RLIMIT_AS`).
    AddressSpace,
    /// What is left under the data-segment limit (`ulimit -d`, `RLIMIT_DATA`).
    DataSegment,
    /// What is left under the memory limit of the process's cgroup.
    Cgroup(CgroupVersion),
    /// Neither given nor known: a fixed default.
    Default,
}

/// Which cgroup interface a limit was read from: it names the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1: `memory.limit_in_bytes` less `memory.usage_in_bytes`.
    V1,
    /// cgroup v2: `memory.max` less `memory.current`.
    V2,
}

impl Source {
    /// Where the limit comes from, after "more than the N".
    fn phrase(self) -> &'static str {
        match self {
            Source::Flag => "that --max-memory allows",
            Source::Env => "that KILN_MAX_MEMORY allows",
            Source::Available => "this machine has available",
            Source::AddressSpace => "left under the address-space limit (ulimit -v)",
            Source::DataSegment => "left under the data-segment limit (ulimit -d)",
            Source::Cgroup(CgroupVersion::V1) => {
                "left under this process's cgroup memory limit (memory.limit_in_bytes)"
            }
            Source::Cgroup(CgroupVersion::V2) => {
                "left under this process's cgroup memory limit (memory.max)"
            }
            Source::Default => "allowed by default",
        }
    }

    /// What the user can do about a refusal against this limit.
    fn advice(self) -> &'static str {
        match self {
            Source::Flag | Source::Env | Source::Default | Source::Available => {
                "use smaller inputs, or raise the limit with --max-memory SIZE (e.g. 64G)"
            }
            Source::AddressSpace => "use smaller inputs, or raise `ulimit -v`",
            Source::DataSegment => "use smaller inputs, or raise `ulimit -d`",
            Source::Cgroup(_) => "use smaller inputs, or give the container more memory",
        }
    }
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
    budget.source.phrase(),
    if needed.is_some() {
        budget.source.advice()
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
    /// least of what the operating system leaves this process (see
    /// [`system_limits`]), else 16 GiB. A malformed `KILN_MAX_MEMORY` is an
    /// error naming it.
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
        Ok(least(system_limits()).unwrap_or(Budget {
            bytes: DEFAULT_BYTES,
            source: Source::Default,
        }))
    }

    /// Ok when `needed` bytes (`None`: beyond 64 bits) fit; else the refusal.
    pub fn allow(&self, what: &str, needed: Option<u64>) -> Result<(), Refused> {
        self.allow_parts(what, &[(what, needed)])
    }

    /// Ok when the named parts (`None`: beyond 64 bits) fit together; else
    /// the refusal, which gives each part's figure.
    pub fn allow_parts(&self, what: &str, parts: &[(&str, Option<u64>)]) -> Result<(), Refused> {
        match total(parts.iter().map(|(_, bytes)| *bytes)) {
            Some(n) if n <= self.bytes => Ok(()),
            _ => Err(self.refusal(what, parts)),
        }
    }

    /// The refusal of `what`, made of the named parts, against this budget:
    /// for a caller that has already found that they do not fit.
    pub fn refusal(&self, what: &str, parts: &[(&str, Option<u64>)]) -> Refused {
        Refused {
            what: what.to_string(),
            needed: total(parts.iter().map(|(_, bytes)| *bytes)),
            parts: parts
                .iter()
                .map(|(name, bytes)| (name.to_string(), *bytes))
                .collect(),
            budget: *self,
        }
    }
}

/// An allocation the estimate did not cover that failed: the process has
/// less memory left than the work needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} needs {} more, which this process could not allocate{}; use smaller inputs, or \
     raise the limit (`ulimit -v`, the container's memory)",
    Bytes(*bytes),
    limit.map_or(String::new(), |b| format!(" (it has {} {})", Bytes(b.bytes), b.source.phrase()))
)]
pub struct OutOfMemory {
    /// What needed the memory.
    pub what: String,
    /// Bytes asked for.
    pub bytes: u64,
    /// The tightest limit the operating system puts on the process now.
    pub limit: Option<Budget>,
}

/// An empty vector with room for `len` elements, or the refusal naming
/// `what` when the allocation fails (never an abort).
pub fn try_vec<T>(what: impl FnOnce() -> String, len: usize) -> Result<Vec<T>, OutOfMemory> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| OutOfMemory {
        what: what(),
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        limit: least(system_limits()),
    })?;
    Ok(v)
}

/// Ok when `bytes` more can be allocated now, else the refusal naming
/// `what`: the bytes are reserved and given back at once, for an allocation
/// that has no fallible form itself (a shared slice, `Arc<[u8]>`, made right
/// after the probe, when the memory it was shown is free again).
pub fn probe(what: impl FnOnce() -> String, bytes: usize) -> Result<(), OutOfMemory> {
    try_vec::<u8>(what, bytes).map(drop)
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

/// The environment variable that moves the cgroup file system's root (by
/// default `/sys/fs/cgroup`): a test hook, so tests can give a fake cgroup.
pub const CGROUP_ROOT_VAR: &str = "KILN_CGROUP_ROOT";

/// The smallest of `limits`; `None` when there is none.
pub fn least(limits: impl IntoIterator<Item = Budget>) -> Option<Budget> {
    limits.into_iter().min_by_key(|b| b.bytes)
}

/// Every limit the operating system puts on this process's memory, as the
/// bytes still left under it: Linux's `MemAvailable`, the address-space and
/// data-segment limits (less what the process already maps), and the memory
/// limit of its cgroup (v1 or v2, less what the cgroup already uses). Limits
/// that are not set or cannot be read are left out.
pub fn system_limits() -> Vec<Budget> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut limits = Vec::new();
    if let Some(bytes) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| meminfo_field(&t, "MemAvailable:"))
    {
        limits.push(Budget {
            bytes,
            source: Source::Available,
        });
    }
    for (resource, field, source) in [
        (libc::RLIMIT_AS, "VmSize:", Source::AddressSpace),
        (libc::RLIMIT_DATA, "VmData:", Source::DataSegment),
    ] {
        if let Some(limit) = rlimit(resource) {
            let used = meminfo_field(&status, field).unwrap_or(0);
            limits.push(Budget {
                bytes: limit.saturating_sub(used),
                source,
            });
        }
    }
    let root = std::env::var_os(CGROUP_ROOT_VAR)
        .map_or_else(|| std::path::PathBuf::from("/sys/fs/cgroup"), Into::into);
    if let Ok(membership) = std::fs::read_to_string("/proc/self/cgroup") {
        limits.extend(cgroup_limit(&root, &membership));
    }
    limits
}

/// The soft limit on `resource`, `None` when unlimited or unknown.
fn rlimit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable `rlimit` for the call's duration.
    let status = unsafe { libc::getrlimit(resource, &mut limit) };
    (status == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// A `Name:   123 kB` field of `/proc/meminfo` or `/proc/self/status`, in bytes.
fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A cgroup limit at or above this is "no limit" (cgroup v1 writes
/// `9223372036854771712`).
const NO_CGROUP_LIMIT: u64 = 1 << 62;

/// The bytes left under the tightest memory limit of the cgroup that
/// `membership` (the text of `/proc/self/cgroup`) names and of each cgroup
/// above it, under the cgroup file system at `root`: cgroup v2
/// (`<root>/<path>/memory.max` less `memory.current`), else v1
/// (`<root>/memory/<path>/memory.limit_in_bytes` less `memory.usage_in_bytes`).
/// `None` when no limit is set or none can be read.
pub fn cgroup_limit(root: &std::path::Path, membership: &str) -> Option<Budget> {
    let mut found = Vec::new();
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        let (base, version) = if controllers.is_empty() {
            (root.to_path_buf(), CgroupVersion::V2)
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), CgroupVersion::V1)
        } else {
            continue;
        };
        let mut dir = base.join(relative);
        loop {
            if let Some(left) = cgroup_left(&dir, version) {
                found.push(Budget {
                    bytes: left,
                    source: Source::Cgroup(version),
                });
            }
            if dir == base || !dir.pop() {
                break;
            }
        }
    }
    least(found)
}

/// `limit_file` less `usage_file` in `dir`, `None` without a limit. The
/// usage counts the page cache, which the kernel reclaims before it refuses
/// memory, so the cache not recently used (`inactive_file` in v2's
/// `memory.stat`, `total_inactive_file` in v1's) does not count as used.
fn cgroup_left(dir: &std::path::Path, version: CgroupVersion) -> Option<u64> {
    let (limit_file, usage_file, inactive) = match version {
        CgroupVersion::V1 => (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
        CgroupVersion::V2 => ("memory.max", "memory.current", "inactive_file"),
    };
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let limit = read(limit_file).filter(|&l| l < NO_CGROUP_LIMIT)?;
    let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    let reclaimable = stat
        .lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(key, _)| *key == inactive)
        .and_then(|(_, value)| value.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let used = read(usage_file).unwrap_or(0).saturating_sub(reclaimable);
    Some(limit.saturating_sub(used))
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

    fn write(path: &std::path::Path, text: &str) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn cgroup_v2_limits_are_read_up_the_tree() {
        let root = tempfile::tempdir().unwrap();
        let membership = "0::/kiln/job\n";
        assert_eq!(cgroup_limit(root.path(), membership), None);
        write(&root.path().join("kiln/job/memory.max"), "max\n");
        write(&root.path().join("kiln/job/memory.current"), "100\n");
        assert_eq!(cgroup_limit(root.path(), membership), None);
        write(&root.path().join("kiln/memory.max"), "4294967296\n");
        write(&root.path().join("kiln/memory.current"), "1073741824\n");
        assert_eq!(
            cgroup_limit(root.path(), membership),
            Some(Budget {
                bytes: 3 << 30,
                source: Source::Cgroup(CgroupVersion::V2),
            })
        );
        write(&root.path().join("kiln/job/memory.max"), "2147483648\n");
        assert_eq!(
            cgroup_limit(root.path(), membership).map(|b| b.bytes),
            Some((2 << 30) - 100)
        );
        // Page cache not recently used is not counted as used.
        write(
            &root.path().join("kiln/memory.stat"),
            "anon 5\ninactive_file 1073741824\n",
        );
        assert_eq!(
            cgroup_limit(root.path(), "0::/kiln\n").map(|b| b.bytes),
            Some(4 << 30)
        );
    }

    #[test]
    fn cgroup_v1_limits_use_the_memory_controller() {
        let root = tempfile::tempdir().unwrap();
        let membership = "5:cpu,cpuacct:/other\n4:memory:/docker/abc\n0::/\n";
        let dir = root.path().join("memory/docker/abc");
        write(&dir.join("memory.limit_in_bytes"), "9223372036854771712\n");
        assert_eq!(cgroup_limit(root.path(), membership), None);
        write(&dir.join("memory.limit_in_bytes"), "4000000000\n");
        write(&dir.join("memory.usage_in_bytes"), "1500000000\n");
        write(
            &dir.join("memory.stat"),
            "cache 600000000\ninactive_file 1\ntotal_inactive_file 500000000\n",
        );
        assert_eq!(
            cgroup_limit(root.path(), membership),
            Some(Budget {
                bytes: 3_000_000_000,
                source: Source::Cgroup(CgroupVersion::V1),
            })
        );
        // Another controller's hierarchy is not read.
        write(
            &root.path().join("cpu,cpuacct/other/memory.limit_in_bytes"),
            "1\n",
        );
        assert_eq!(
            cgroup_limit(root.path(), membership).map(|b| b.bytes),
            Some(3_000_000_000)
        );
    }

    #[test]
    fn proc_fields_parse_in_bytes() {
        let status = "Name:\thost\nVmPeak:\t  20000 kB\nVmSize:\t   12345 kB\nVmData:\t 4 kB\n";
        assert_eq!(meminfo_field(status, "VmSize:"), Some(12345 * 1024));
        assert_eq!(meminfo_field(status, "VmData:"), Some(4096));
        assert_eq!(meminfo_field(status, "VmSwap:"), None);
        assert_eq!(
            meminfo_field("MemAvailable:   8000000 kB\n", "MemAvailable:"),
            Some(8_192_000_000)
        );
    }

    #[test]
    fn the_least_limit_wins_and_is_named() {
        let limits = [
            Budget {
                bytes: 20 << 30,
                source: Source::Available,
            },
            Budget {
                bytes: 3 << 30,
                source: Source::AddressSpace,
            },
            Budget {
                bytes: 5 << 30,
                source: Source::Cgroup(CgroupVersion::V2),
            },
        ];
        let budget = least(limits).unwrap();
        assert_eq!(budget.source, Source::AddressSpace);
        assert_eq!(least(Vec::new()), None);
        let refused = budget.allow("evaluating `g`", Some(6 << 30)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "evaluating `g` needs 6.0 GiB, more than the 3.0 GiB left under the \
             address-space limit (ulimit -v); use smaller inputs, or raise `ulimit -v`"
        );
        let cgroup = least(limits[..1].iter().copied().chain([limits[2]])).unwrap();
        assert!(cgroup
            .allow("x", Some(6 << 30))
            .unwrap_err()
            .to_string()
            .contains("5.0 GiB left under this process's cgroup memory limit (memory.max)"));
    }

    #[test]
    fn an_allocation_too_large_is_a_refusal() {
        let refused = try_vec::<f64>(|| "reading `x.bin`".to_string(), usize::MAX / 2).unwrap_err();
        assert_eq!(refused.what, "reading `x.bin`");
        let text = refused.to_string();
        assert!(text.starts_with("reading `x.bin` needs "), "{text}");
        assert!(text.contains("could not allocate"), "{text}");
        assert_eq!(try_vec::<f64>(String::new, 3).unwrap().capacity(), 3);
    }
}
