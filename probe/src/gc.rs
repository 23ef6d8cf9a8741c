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
//! name is checked to still refer to the very inode that was locked.

use crate::error::ProbeError;
use hydra_layout::naming::{engine_id_of, validate_engine_id};
use hydra_layout::{Liveness, SegmentReader};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use serde::Serialize;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// How long gc waits for the directory lock (creators hold it for milliseconds).
const DIR_LOCK_WAIT: Duration = Duration::from_secs(2);
/// How long gc retries a file lock held by a momentary reader probe (microseconds in
/// practice); a live writer holds it forever.
const FILE_LOCK_WAIT: Duration = Duration::from_millis(200);
/// Pause between lock attempts.
const LOCK_RETRY: Duration = Duration::from_millis(2);

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

enum Kind {
    Segment,
    Temporary,
}

/// The engine id of a creation temporary name `.<id>.<pid>.<hex>.tmp`.
pub fn temporary_engine_id(name: &str) -> Option<&str> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = inner.rsplitn(3, '.');
    let hex = parts.next()?;
    let pid = parts.next()?;
    let id = parts.next()?;
    let ok = !hex.is_empty()
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && validate_engine_id(id).is_ok();
    ok.then_some(id)
}

/// Runs gc over `dir` (see the module docs). Entries that are neither segments nor
/// temporaries are not reported. A missing directory is an empty result.
pub fn gc(dir: &Path, opts: &GcOptions) -> Result<Vec<GcEntry>, ProbeError> {
    let dir_fd = match rustix::fs::open(
        dir,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(Vec::new()),
        Err(e) => return Err(ProbeError::io("open directory", dir, e)),
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| ProbeError::io("read directory", dir, e))? {
        let entry = entry.map_err(|e| ProbeError::io("read directory", dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Some(id) = engine_id_of(&name) {
            names.push((name.clone(), id.to_owned(), Kind::Segment));
        } else if let Some(id) = temporary_engine_id(&name) {
            names.push((name.clone(), id.to_owned(), Kind::Temporary));
        }
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(names.len());
    for (name, engine_id, kind) in names {
        let path = dir.join(&name);
        let (action, reason) = match kind {
            Kind::Segment => gc_segment(&dir_fd, dir, &name, &path, opts),
            Kind::Temporary => gc_temporary(&dir_fd, dir, &name, &path, opts),
        };
        out.push(GcEntry {
            path,
            engine_id,
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

fn gc_segment(
    dir_fd: &OwnedFd,
    dir: &Path,
    name: &str,
    path: &Path,
    opts: &GcOptions,
) -> (GcAction, String) {
    let (why, instance) = match removable_segment(path) {
        Ok(v) => v,
        Err(keep) => return (GcAction::Kept, keep),
    };
    if opts.dry_run {
        return (GcAction::WouldRemove, why);
    }
    with_dir_lock(dir_fd, dir, || {
        // Re-check under the directory lock: same segment, still not live.
        match removable_segment(path) {
            Ok((_, again)) if again == instance => {}
            Ok(_) => return (GcAction::Kept, "replaced by a new segment meanwhile".into()),
            Err(keep) => return (GcAction::Kept, keep),
        }
        remove_locked(dir_fd, name, path, why)
    })
}

fn gc_temporary(
    dir_fd: &OwnedFd,
    dir: &Path,
    name: &str,
    path: &Path,
    opts: &GcOptions,
) -> (GcAction, String) {
    let check = || -> Result<String, String> {
        let fd = open_nofollow(dir_fd, name).map_err(|e| format!("cannot open: {e}"))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat: {e}"))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err("not a regular file".into());
        }
        let mtime = SystemTime::UNIX_EPOCH
            + Duration::new(
                st.st_mtime.max(0) as u64,
                st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
            );
        let age = SystemTime::now().duration_since(mtime).unwrap_or_default();
        if age <= opts.tmp_min_age {
            return Err(format!(
                "creation temporary only {}s old (minimum {}s)",
                age.as_secs(),
                opts.tmp_min_age.as_secs()
            ));
        }
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(format!(
                "stale creation temporary, {}s old, lock free",
                age.as_secs()
            )),
            Err(Errno::WOULDBLOCK) => Err("creation temporary locked by its creator".into()),
            Err(e) => Err(format!("cannot lock: {e}")),
        }
    };
    let why = match check() {
        Ok(why) => why,
        Err(keep) => return (GcAction::Kept, keep),
    };
    if opts.dry_run {
        return (GcAction::WouldRemove, why);
    }
    with_dir_lock(dir_fd, dir, || match check() {
        Ok(_) => remove_locked(dir_fd, name, path, why),
        Err(keep) => (GcAction::Kept, keep),
    })
}

fn open_nofollow(dir_fd: &OwnedFd, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir_fd,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Takes `LOCK_EX` on the file (proof that no writer holds it), checks the name still
/// refers to the locked inode, and unlinks it. Called under the directory lock.
fn remove_locked(dir_fd: &OwnedFd, name: &str, path: &Path, why: String) -> (GcAction, String) {
    let fd = match open_nofollow(dir_fd, name) {
        Ok(fd) => fd,
        Err(e) => return (GcAction::Failed, format!("reopen {}: {e}", path.display())),
    };
    match lock_with_deadline(&fd, FILE_LOCK_WAIT) {
        Ok(true) => {}
        Ok(false) => {
            return (
                GcAction::Kept,
                "its lock is held (a writer appeared)".into(),
            )
        }
        Err(e) => return (GcAction::Failed, format!("lock {}: {e}", path.display())),
    }
    let same = match (
        rustix::fs::fstat(&fd),
        rustix::fs::statat(dir_fd, name, AtFlags::SYMLINK_NOFOLLOW),
    ) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    };
    if !same {
        return (GcAction::Kept, "the name changed while checking".into());
    }
    match rustix::fs::unlinkat(dir_fd, name, AtFlags::empty()) {
        Ok(()) => (GcAction::Removed, why),
        Err(e) => (GcAction::Failed, format!("unlink {}: {e}", path.display())),
    }
}

/// `LOCK_EX|LOCK_NB` retried until `wait` passes; Ok(false) if still held.
fn lock_with_deadline(fd: impl AsFd, wait: Duration) -> rustix::io::Result<bool> {
    let deadline = Instant::now() + wait;
    loop {
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(true),
            Err(Errno::WOULDBLOCK) if Instant::now() < deadline => std::thread::sleep(LOCK_RETRY),
            Err(Errno::WOULDBLOCK) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

fn with_dir_lock(
    dir_fd: &OwnedFd,
    dir: &Path,
    f: impl FnOnce() -> (GcAction, String),
) -> (GcAction, String) {
    match lock_with_deadline(dir_fd, DIR_LOCK_WAIT) {
        Ok(true) => {}
        Ok(false) => {
            return (
                GcAction::Failed,
                format!("directory {} stayed locked by a creator", dir.display()),
            )
        }
        Err(e) => {
            return (
                GcAction::Failed,
                format!("lock directory {}: {e}", dir.display()),
            )
        }
    }
    let result = f();
    let _ = rustix::fs::flock(dir_fd, FlockOperation::Unlock);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::{SegmentConfig, SegmentWriter};

    fn writer(dir: &Path, id: &str) -> SegmentWriter {
        SegmentWriter::create(&SegmentConfig {
            dir: dir.to_path_buf(),
            engine_id: id.into(),
            slot_count: 1,
            description: Default::default(),
        })
        .unwrap()
    }

    fn action_of<'a>(entries: &'a [GcEntry], id: &str) -> &'a GcEntry {
        entries.iter().find(|e| e.engine_id == id).unwrap()
    }

    #[test]
    fn temporary_names() {
        assert_eq!(temporary_engine_id(".e1.123.00ff.tmp"), Some("e1"));
        assert_eq!(temporary_engine_id(".a.b.123.00ff.tmp"), Some("a.b"));
        for bad in [
            ".e1.x.00ff.tmp",
            ".e1.123.zz.tmp",
            "e1.123.ff.tmp",
            ".e1.123.ff",
            "..1.f.tmp",
        ] {
            assert_eq!(temporary_engine_id(bad), None, "{bad}");
        }
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
        assert!(gc(&tmp.path().join("missing"), &GcOptions::default())
            .unwrap()
            .is_empty());
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
        // Keep a hard link so the close's unlink leaves the (closed) file behind.
        std::fs::hard_link(w.path(), dir.join("c2.hps")).unwrap();
        w.close().unwrap();
        let out = gc(&dir, &GcOptions::default()).unwrap();
        assert_eq!(action_of(&out, "c2").action, GcAction::Removed, "{out:?}");
        assert!(action_of(&out, "c2").reason.contains("closed"));
    }
}
