//! Discovery: every library on the search path ([`super::search`]) is
//! tried, and the plugins that load fill the [`Registry`]. One broken library
//! never stops the others: its failure is recorded against its path.

use std::path::{Path, PathBuf};

use super::load::{load_unclaimed, LoadOutcome};
use super::registry::{Registry, Rejected, Shadowed};
use super::search::{libraries_of, Candidate, SearchEntry};

/// Tries every library on the search path and builds the registry. One broken
/// library never stops the others: its failure is recorded against its path.
pub fn discover(entries: &[SearchEntry]) -> Registry {
    let mut registry = Registry::default();
    let mut seen: Vec<PathBuf> = Vec::new();
    for entry in entries {
        let libs = match libraries_of(entry) {
            Ok(libs) => libs,
            Err(problem) => {
                tracing::debug!("{problem}");
                registry.search_problems.push(problem);
                continue;
            }
        };
        registry.searched.push(entry.clone());
        for candidate in libs {
            let lib = match candidate {
                Candidate::Library(lib) => lib,
                Candidate::Unusable { path, reason } => {
                    // Listed once even when two search entries reach it:
                    // the entry itself cannot be resolved, so its folder is.
                    let key = entry_key(&path);
                    if !seen.contains(&key) {
                        tracing::debug!("rejected {}: {reason}", path.display());
                        seen.push(key);
                        registry.rejected.push(Rejected { path, reason });
                    }
                    continue;
                }
            };
            let canonical = std::fs::canonicalize(&lib).unwrap_or_else(|_| lib.clone());
            if seen.contains(&canonical) {
                continue;
            }
            seen.push(canonical.clone());
            let _span = tracing::debug_span!("load", path = %canonical.display()).entered();
            let outcome = load_unclaimed(&canonical, |name| {
                registry.get(name).map(|p| p.path().to_path_buf())
            });
            match outcome {
                LoadOutcome::Loaded(plugin) => {
                    tracing::debug!(device = plugin.name(), "loaded");
                    registry.register_backend_for_device(*plugin);
                }
                LoadOutcome::NotAPlugin(reason) => {
                    tracing::debug!("skipped: {reason}");
                    registry.skipped.push(canonical);
                }
                LoadOutcome::Failed(error) => {
                    // Recorded, not printed: `host list` reports it, and a
                    // command that needs the device says it was rejected.
                    tracing::debug!("rejected {}: {error}", canonical.display());
                    registry.rejected.push(Rejected {
                        path: canonical,
                        reason: error.to_string(),
                    });
                }
                LoadOutcome::Shadowed { name, by } => {
                    tracing::info!("{} shadowed by {}", canonical.display(), by.display());
                    registry.shadowed.push(Shadowed {
                        path: canonical,
                        name,
                        by,
                    });
                }
            }
        }
    }
    registry
}

/// The folder-resolved path of an entry that cannot itself be resolved (a
/// dangling link, a loop), so that two spellings of one folder meet.
fn entry_key(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}
