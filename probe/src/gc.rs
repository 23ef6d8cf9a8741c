//! Removing what dead engines left behind: their segments, and stale creation temporaries.
//!
//! Rules, checked for every entry:
//! - a **segment** (`<id>.hps`) is removed only if it opens as a valid segment (owner
//!   checks included) and its writer is gone: dead (lock free, never closed) or a leftover
//!   closed one (lock free, CLOSED). A live engine's segment is never touched.
//! - a **creation temporary** (`.<id>.<pid>.<hex>.tmp`) is removed only if it is a regular
//!   file, older than [`GcOptions::tmp_min_age`], and its lock is free (a creator holds
//!   `LOCK_EX` on it from the first moment it matters).
//! - anything else, including a file named like a segment that is not a valid one, is kept.
//!
//! Removal re-checks right before unlinking, under the directory lock that creators hold
//! while they create and rename (so no new segment can appear under the name meanwhile):
//! the file is reopened without following symlinks, its liveness re-read, `LOCK_EX|LOCK_NB`
//! taken on it (a live writer holds `LOCK_EX`, so getting it proves there is none), and the
//! name is checked to still refer to the very inode that was locked. Those steps, the
//! temporary names and the directory lock are the segment-directory protocol of
//! [`hydra_layout::directory`], which the writer follows too; this module only decides
//! what is removable.

use crate::error::ProbeError;
use hydra_layout::directory::{EntryName, Removal, SegmentDir};
use hydra_layout::{Liveness, SegmentReader};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use hydra_layout::directory::temporary_engine_id;

/// How long gc waits for the directory lock (creators hold it for milliseconds).
const DIR_LOCK_WAIT: Duration = Duration::from_secs(2);

/// What gc does.
#[derive(Debug, Clone, Copy)]
pub struct GcOptions {
    /// Only report what would be removed.
    pub dry_run: bool,
    /// Minimum age (by modification time) of a creation temporary before it may be removed.
    /// Default 60 s: creation takes milliseconds, so a minute-old temporary is abandoned.
    pub tmp_min_age: Duration,
}

impl Default for GcOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            tmp_min_age: Duration::from_secs(60),
        }
    }
}

/// What happened to one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GcAction {
    /// Removed.
    Removed,
    /// Would be removed (dry run).
    WouldRemove,
    /// Left alone; see the reason.
    Kept,
    /// Removal was attempted and failed; see the reason.
    Failed,
}

impl GcAction {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Removed => "removed",
            Self::WouldRemove => "would remove",
            Self::Kept => "kept",
            Self::Failed => "failed",
        }
    }
}

/// One entry gc looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GcEntry {
    /// The file.
    pub path: PathBuf,
    /// The engine id its name carries.
    pub engine_id: String,
    /// What was done.
    pub action: GcAction,
    /// Why.
    pub reason: String,
}

/// Runs gc over `dir` (see the module docs). Entries that are neither segments nor
/// temporaries are not reported. A directory that does not exist or cannot be read is an
/// error.
pub fn gc(dir: &Path, opts: &GcOptions) -> Result<Vec<GcEntry>, ProbeError> {
    let segment_dir = SegmentDir::open(dir)?;
    let mut out = Vec::new();
    for name in segment_dir.entries()? {
        let Some(entry) = EntryName::of(&name) else {
            continue;
        };
        let path = dir.join(&name);
        let (action, reason) = match entry {
            EntryName::Segment(_) => gc_segment(&segment_dir, &name, &path, opts),
            EntryName::Temporary(_) => gc_temporary(&segment_dir, &name, opts),
        };
        out.push(GcEntry {
            engine_id: entry.engine_id().to_owned(),
            path,
            action,
            reason,
        });
    }
    Ok(out)
}

/// Why a segment may be removed, or `Err(reason to keep it)`.
fn removable_segment(path: &Path) -> Result<(String, u64), String> {
    let reader = SegmentReader::open(path).map_err(|e| format!("not a valid segment: {e}"))?;
    let pid = reader.identity().pid;
    let instance = reader.identity().instance_id;
    match reader.liveness() {
        Ok(Liveness::Live) => Err(format!("live engine (pid {pid})")),
        Ok(Liveness::Dead) => Ok((
            format!("dead engine (pid {pid}, lock free, never closed)"),
            instance,
        )),
        Ok(Liveness::Closed) => Ok((format!("closed engine (pid {pid}, lock free)"), instance)),
        Err(e) => Err(format!("cannot probe liveness: {e}")),
    }
}

fn gc_segment(dir: &SegmentDir, name: &str, path: &Path, opts: &GcOptions) -> (GcAction, String) {
    let (why, instance) = match removable_segment(path) {
        Ok(v) => v,
        Err(keep) => return (GcAction::Kept, keep),
    };
    if opts.dry_run {
        return (GcAction::WouldRemove, why);
    }
    with_dir_lock(dir, || {
        // Re-check under the directory lock: same segment, still not live.
        match removable_segment(path) {
            Ok((_, again)) if again == instance => {}
            Ok(_) => return (GcAction::Kept, "replaced by a new segment meanwhile".into()),
            Err(keep) => return (GcAction::Kept, keep),
        }
        removal(dir.remove(name), why)
    })
}

fn gc_temporary(dir: &SegmentDir, name: &str, opts: &GcOptions) -> (GcAction, String) {
    let why = match dir.stale_temporary(name, opts.tmp_min_age) {
        Ok(why) => why,
        Err(keep) => return (GcAction::Kept, keep),
    };
    if opts.dry_run {
        return (GcAction::WouldRemove, why);
    }
    with_dir_lock(dir, || match dir.stale_temporary(name, opts.tmp_min_age) {
        Ok(_) => removal(dir.remove(name), why),
        Err(keep) => (GcAction::Kept, keep),
    })
}

fn removal(r: Removal, why: String) -> (GcAction, String) {
    match r {
        Removal::Removed => (GcAction::Removed, why),
        Removal::Kept(reason) => (GcAction::Kept, reason),
        Removal::Failed(reason) => (GcAction::Failed, reason),
    }
}

fn with_dir_lock(dir: &SegmentDir, f: impl FnOnce() -> (GcAction, String)) -> (GcAction, String) {
    match dir.with_lock(DIR_LOCK_WAIT, f) {
        Ok(Some(result)) => result,
        Ok(None) => (
            GcAction::Failed,
            format!(
                "directory {} stayed locked by a creator",
                dir.path().display()
            ),
        ),
        Err(e) => (GcAction::Failed, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::SegmentWriter;
    use rustix::fs::FlockOperation;
    use std::time::SystemTime;

    fn writer(dir: &Path, id: &str) -> SegmentWriter {
        crate::test_support::writer(dir, id, 1)
    }

    fn action_of<'a>(entries: &'a [GcEntry], id: &str) -> &'a GcEntry {
        entries.iter().find(|e| e.engine_id == id).unwrap()
    }

    #[test]
    fn removes_dead_keeps_live_and_garbage() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("segs");
        let live = writer(&dir, "live");
        writer(&dir, "dead").simulate_crash();
        std::fs::write(dir.join("junk.hps"), b"not a segment").unwrap();
        let fresh_tmp = dir.join(".x.1.ab.tmp");
        std::fs::write(&fresh_tmp, b"").unwrap();
        let old_tmp = dir.join(".y.2.cd.tmp");
        let f = std::fs::File::create(&old_tmp).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(61))
            .unwrap();
        drop(f);

        let dry = gc(
            &dir,
            &GcOptions {
                dry_run: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(action_of(&dry, "dead").action, GcAction::WouldRemove);
        assert_eq!(action_of(&dry, "y").action, GcAction::WouldRemove);
        assert!(dir.join("dead.hps").exists() && old_tmp.exists());

        let done = gc(&dir, &GcOptions::default()).unwrap();
        assert_eq!(action_of(&done, "live").action, GcAction::Kept);
        assert!(action_of(&done, "live").reason.contains("live engine"));
        assert_eq!(action_of(&done, "dead").action, GcAction::Removed);
        assert_eq!(action_of(&done, "junk").action, GcAction::Kept);
        assert!(action_of(&done, "junk")
            .reason
            .contains("not a valid segment"));
        assert_eq!(action_of(&done, "x").action, GcAction::Kept);
        assert_eq!(action_of(&done, "y").action, GcAction::Removed);
        assert!(!dir.join("dead.hps").exists() && !old_tmp.exists());
        assert!(
            dir.join("live.hps").exists() && dir.join("junk.hps").exists() && fresh_tmp.exists()
        );
        drop(live);
        let missing = tmp.path().join("missing");
        let e = gc(&missing, &GcOptions::default()).unwrap_err();
        assert_eq!(e.kind(), hydra_layout::ErrorKind::NotFound);
        assert!(e.to_string().contains(&*missing.to_string_lossy()), "{e}");
    }

    #[test]
    fn keeps_a_locked_old_temporary() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join(".z.3.ef.tmp");
        let f = std::fs::File::create(&p).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(120))
            .unwrap();
        rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).unwrap();
        let out = gc(tmp.path(), &GcOptions::default()).unwrap();
        assert_eq!(out[0].action, GcAction::Kept);
        assert!(out[0].reason.contains("locked"), "{}", out[0].reason);
        assert!(p.exists());
    }

    #[test]
    fn removes_a_leftover_closed_segment() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("segs");
        let w = writer(&dir, "c");
        // Keep a hard link so the close's unlink leaves the (closed) file behind, then put
        // it back under its own name.
        let path = w.path().to_path_buf();
        std::fs::hard_link(&path, dir.join("keep")).unwrap();
        w.close().unwrap();
        std::fs::rename(dir.join("keep"), &path).unwrap();
        let out = gc(&dir, &GcOptions::default()).unwrap();
        assert_eq!(action_of(&out, "c").action, GcAction::Removed, "{out:?}");
        assert!(action_of(&out, "c").reason.contains("closed"));
    }

    #[test]
    fn keeps_a_segment_planted_under_another_engines_name() {
        // A closed segment of engine "c" copied by hand to "planted.hps": its header does
        // not name the file (FORMAT 2.2), so it is not a valid segment and gc leaves it
        // for an operator rather than deleting what it cannot identify.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("segs");
        let w = writer(&dir, "c");
        std::fs::hard_link(w.path(), dir.join("planted.hps")).unwrap();
        w.close().unwrap();
        let out = gc(&dir, &GcOptions::default()).unwrap();
        let planted = action_of(&out, "planted");
        assert_eq!(planted.action, GcAction::Kept, "{out:?}");
        assert!(
            planted.reason.contains("engine id mismatch"),
            "{}",
            planted.reason
        );
        assert!(dir.join("planted.hps").exists());
    }
}
