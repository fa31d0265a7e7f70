//! The zip container of a `.pt2` archive: opens it, checks every member name before
//! anything is read, and reads members by name under caps on the member count and on
//! the total decompressed size.
//!
//! Member names come from an untrusted file: a name with a `..` component, an absolute
//! path or a drive letter makes the whole archive invalid, even though Kiln never writes
//! members to disk. This module must never interpret a member's content.

use super::Pt2Error;
use crate::memory::{Budget, Source};
use std::io::{Read, Seek};
use std::sync::Arc;
use zip::ZipArchive;

/// The most a member's read reserves before any of its bytes arrive.
const INITIAL_READ_BYTES: usize = 1 << 20;

/// Limits on what reading one archive may cost.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// the most members the archive may have
    pub max_members: usize,
    /// the most bytes all members read together may decompress to, and where
    /// that limit comes from (the host's memory budget), for the refusal
    pub budget: Budget,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_members: 10_000,
            budget: Budget {
                bytes: 4 << 30,
                source: Source::Default,
            },
        }
    }
}

/// An open archive whose member names were all checked.
pub(super) struct Archive<R> {
    zip: ZipArchive<R>,
    names: Vec<String>,
    limits: Limits,
    /// bytes decompressed so far, against `limits.budget`
    read_so_far: u64,
}

/// Why `name` may not be used as a member name, if it may not.
fn unsafe_name(name: &str) -> Option<&'static str> {
    if name.starts_with('/') || name.starts_with('\\') {
        return Some("an absolute path");
    }
    let bytes = name.as_bytes();
    if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
        return Some("a drive letter");
    }
    if name.contains('\0') {
        return Some("a NUL character");
    }
    if name.split(['/', '\\']).any(|c| c == "..") {
        return Some("a `..` component");
    }
    None
}

impl<R: Read + Seek> Archive<R> {
    /// Opens a zip and checks the member count and every member name.
    pub(super) fn open(reader: R, limits: Limits) -> Result<Archive<R>, Pt2Error> {
        // `torch.export.save` writes the archive from byte 0. The zip crate's default
        // (detecting a prefix before the archive) is fooled by a zip stored inside the
        // archive, such as `data/sample_inputs/model.pt`, whose end record lies close to
        // the outer one, and then reports a broken central directory.
        let config = zip::read::Config {
            archive_offset: zip::read::ArchiveOffset::Known(0),
        };
        let zip =
            ZipArchive::with_config(config, reader).map_err(|e| Pt2Error::NotZip(e.to_string()))?;
        if zip.len() > limits.max_members {
            return Err(Pt2Error::TooManyMembers {
                found: zip.len(),
                max: limits.max_members,
            });
        }
        let mut names = Vec::with_capacity(zip.len());
        for name in zip.file_names() {
            let name = name.map_err(|e| Pt2Error::NotZip(e.to_string()))?;
            if let Some(why) = unsafe_name(&name) {
                return Err(Pt2Error::UnsafeMemberName {
                    name: name.into_owned(),
                    why,
                });
            }
            names.push(name.into_owned());
        }
        Ok(Archive {
            zip,
            names,
            limits,
            read_so_far: 0,
        })
    }

    /// Every member name, in the archive's order.
    pub(super) fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether a member of this exact name exists.
    pub(super) fn has(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// The refusal of `what` (`this`, for short: "this member"), which needs
    /// `bytes` after the members read so far: the budget's own message, with
    /// both parts when some were read.
    pub(super) fn refuse(&self, what: &str, this: &str, bytes: Option<u64>) -> Pt2Error {
        let refused = if self.read_so_far > 0 {
            self.limits.budget.refusal(
                what,
                &[
                    ("the members read before it", Some(self.read_so_far)),
                    (this, bytes),
                ],
            )
        } else {
            self.limits.budget.refusal(what, &[(this, bytes)])
        };
        Pt2Error::TooLarge(refused)
    }

    /// The bytes still left of the budget.
    pub(super) fn left(&self) -> u64 {
        self.limits.budget.bytes.saturating_sub(self.read_so_far)
    }

    /// Reads a whole member, counting its decompressed bytes against the cap. The declared
    /// size is checked first, and the actual stream is cut at the cap too, since a
    /// declared size may lie.
    pub(super) fn read(&mut self, name: &str) -> Result<Vec<u8>, Pt2Error> {
        if !self.has(name) {
            return Err(Pt2Error::MissingMember(name.into()));
        }
        let budget = self.left();
        let file = self.zip.by_name(name).map_err(|e| Pt2Error::Member {
            member: name.into(),
            message: e.to_string(),
        })?;
        let declared = file.size();
        if declared > budget {
            drop(file);
            return Err(self.refuse(
                &format!("reading member `{name}`"),
                "this member",
                Some(declared),
            ));
        }
        // The declared size only bounds the reservation: a header may claim
        // gigabytes for a member of a few bytes, so memory grows with the
        // bytes that actually arrive.
        let declared = usize::try_from(declared).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(declared.min(INITIAL_READ_BYTES));
        file.take(budget.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| Pt2Error::Member {
                member: name.into(),
                message: e.to_string(),
            })?;
        let n = out.len() as u64;
        if n > budget {
            return Err(self.refuse(
                &format!("reading member `{name}` (more than its header declares)"),
                "this member",
                Some(n),
            ));
        }
        self.read_so_far += n;
        Ok(out)
    }

    /// Reads the first `need` bytes of a member into one shared buffer of
    /// exactly that size (a weight: nothing is copied after the read, and no
    /// reservation grows past it). `need` counts against the cap; a member
    /// shorter than `need` is an error naming both sizes.
    pub(super) fn read_prefix(&mut self, name: &str, need: u64) -> Result<Arc<[u8]>, Pt2Error> {
        if !self.has(name) {
            return Err(Pt2Error::MissingMember(name.into()));
        }
        if need > self.left() {
            return Err(self.refuse(
                &format!("reading member `{name}`"),
                "this member",
                Some(need),
            ));
        }
        let file = self.zip.by_name(name).map_err(|e| Pt2Error::Member {
            member: name.into(),
            message: e.to_string(),
        })?;
        let short = |have: u64| Pt2Error::Member {
            member: name.into(),
            message: format!("holds {have} bytes, its tensor needs {need}"),
        };
        if file.size() < need {
            return Err(short(file.size()));
        }
        let n = usize::try_from(need).map_err(|_| short(file.size()))?;
        // The budget allowed `need`, but a budget set by hand may exceed what
        // the process can have: find out before the allocation that aborts.
        crate::memory::probe(|| format!("reading member `{name}`"), n)?;
        let mut buffer = Arc::<[u8]>::new_uninit_slice(n);
        for slot in Arc::get_mut(&mut buffer).into_iter().flatten() {
            slot.write(0);
        }
        // SAFETY: a new Arc has one owner, so `get_mut` gave every element,
        // and each was written just above.
        let mut buffer = unsafe { buffer.assume_init() };
        let bytes = Arc::get_mut(&mut buffer).ok_or_else(|| short(0))?;
        file.take(need)
            .read_exact(bytes)
            .map_err(|e| Pt2Error::Member {
                member: name.into(),
                message: format!("reading {need} bytes: {e}"),
            })?;
        self.read_so_far += need;
        Ok(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::unsafe_name;

    #[test]
    fn member_names() {
        for bad in [
            "/etc/passwd",
            "\\x",
            "a/../b",
            "..",
            "a\\..\\b",
            "C:/x",
            "a\0b",
        ] {
            assert!(unsafe_name(bad).is_some(), "{bad:?}");
        }
        for good in ["archive/models/model.json", "a/..b/c", "x..y"] {
            assert!(unsafe_name(good).is_none(), "{good:?}");
        }
    }
}
