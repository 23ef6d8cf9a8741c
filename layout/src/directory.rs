//! The segment-directory protocol: the rules every party that changes the directory
//! follows, in one place. The writer ([`crate::SegmentWriter`]) creates and removes its own
//! segment with them; garbage collection (`hydra-probe gc`) removes what dead engines left
//! with them. Readers change nothing and take no directory lock.
//!
//! - **Names.** A segment is `<engine id>.hps` ([`crate::naming`]). A segment under
//!   construction is the creation temporary `.<engine id>.<pid>.<instance hex>.tmp`
//!   ([`temporary_name`]); its leading `.` keeps it out of every listing of segments, and
//!   it is renamed into place only once complete and READY.
//! - **The directory lock.** `flock(LOCK_EX)` on the directory itself, held by a creator
//!   from before it looks at the old segment until after its rename, by a writer while it
//!   unlinks its segment on close, and by gc while it re-checks and unlinks. So no segment
//!   appears or disappears under a name while one of them decides about that name.
//! - **Takeover.** A creator replaces an existing segment only if it can take `LOCK_EX` on
//!   it (a live writer holds it for its whole life), retrying for [`TAKEOVER_WAIT`] since a
//!   reader's liveness probe holds `LOCK_SH` for microseconds.
//! - **Removal.** Under the directory lock: reopen the name without following symlinks,
//!   take `LOCK_EX` on it (retrying as above: proof that no writer holds it), check that
//!   the name still refers to the very inode locked, then unlink ([`SegmentDir::remove`]).
//!   A writer removing its own segment checks the name against its own file instead.
//! - **Stale temporaries.** A creation temporary may be removed when it is a regular file
//!   older than a minimum age (creation takes milliseconds) whose lock is free: a creator
//!   locks it before anything else ([`SegmentDir::stale_temporary`]).

use crate::error::{Error, Result};
use crate::fsutil::{self, LockProbe};
use crate::naming::{self, engine_id_of, validate_engine_id};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// How long taking over (or removing) a segment retries a file lock held by a momentary
/// reader probe before deciding a live writer holds it. Readers hold `LOCK_SH` for
/// microseconds; a live writer holds `LOCK_EX` forever.
pub const TAKEOVER_WAIT: Duration = Duration::from_millis(200);
/// Pause between two attempts at a lock.
pub const LOCK_RETRY: Duration = Duration::from_millis(2);

/// The creation temporary of engine `id` made by process `pid` for instance `instance_id`:
/// `.<id>.<pid>.<instance hex>.tmp`.
pub fn temporary_name(id: &str, pid: u32, instance_id: u64) -> String {
    format!(".{id}.{pid}.{instance_id:016x}.tmp")
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

/// What a directory entry's name makes it in the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryName<'a> {
    /// `<id>.hps`: a segment of engine `id`.
    Segment(&'a str),
    /// `.<id>.<pid>.<hex>.tmp`: a creation temporary of engine `id`.
    Temporary(&'a str),
}

impl<'a> EntryName<'a> {
    /// The role of `name`, or `None` for a name the protocol does not use.
    pub fn of(name: &'a str) -> Option<Self> {
        engine_id_of(name)
            .map(Self::Segment)
            .or_else(|| temporary_engine_id(name).map(Self::Temporary))
    }

    /// The engine id the name carries.
    pub fn engine_id(self) -> &'a str {
        match self {
            Self::Segment(id) | Self::Temporary(id) => id,
        }
    }
}

/// `flock(LOCK_EX | LOCK_NB)` on `fd`, retried every [`LOCK_RETRY`] until `wait` has
/// passed; `Ok(false)` if it is still held by someone else then.
pub fn lock_within(fd: impl AsFd, wait: Duration) -> rustix::io::Result<bool> {
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

/// An open segment directory (opened without following a final symlink).
#[derive(Debug)]
pub struct SegmentDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// The outcome of [`SegmentDir::remove`].
#[derive(Debug)]
pub enum Removal {
    /// Unlinked.
    Removed,
    /// Left in place, and why (its lock is held, the name changed meanwhile).
    Kept(String),
    /// A system call failed; the message names the file.
    Failed(String),
}

impl SegmentDir {
    /// Opens `path` to manage its entries: it must be a directory and not a symbolic link.
    /// A missing directory is an [`Error::Io`] of kind "not found".
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self {
            fd: fsutil::open_dir_nofollow(path)?,
            path: path.to_path_buf(),
        })
    }

    /// Opens (creating if missing, mode 0750) the directory a writer publishes into, and
    /// checks that it is safe: not a symlink, a directory, owned by us, not world-writable.
    pub(crate) fn open_for_writer(path: &Path) -> Result<Self> {
        Ok(Self {
            fd: fsutil::open_writer_dir(path)?,
            path: path.to_path_buf(),
        })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's file descriptor (for `*at` calls).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The names of every entry the protocol uses (segments and creation temporaries; see
    /// [`EntryName::of`]), sorted.
    pub fn entries(&self) -> Result<Vec<String>> {
        let read = |e| Error::io("read directory", &self.path, e);
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.path).map_err(read)? {
            let entry = entry.map_err(read)?;
            if let Some(name) = entry.file_name().to_str() {
                if EntryName::of(name).is_some() {
                    out.push(name.to_owned());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Takes the directory lock, waiting as long as it takes (creators hold it for
    /// milliseconds). Released by [`unlock`](Self::unlock) or when this closes.
    pub fn lock(&self) -> Result<()> {
        rustix::fs::flock(&self.fd, FlockOperation::LockExclusive)
            .map_err(|e| Error::io("lock directory", &self.path, e))
    }

    /// Releases the directory lock.
    pub fn unlock(&self) {
        // Unlocking a lock we hold (or do not hold) cannot fail in a way worth reporting.
        let _ = rustix::fs::flock(&self.fd, FlockOperation::Unlock);
    }

    /// Runs `f` under the directory lock, waiting at most `wait` for it; `Ok(None)` when it
    /// stayed held by a creator that long.
    pub fn with_lock<T>(&self, wait: Duration, f: impl FnOnce() -> T) -> Result<Option<T>> {
        if !lock_within(&self.fd, wait).map_err(|e| Error::io("lock directory", &self.path, e))? {
            return Ok(None);
        }
        let result = f();
        self.unlock();
        Ok(Some(result))
    }

    /// Opens entry `name` read-only without following a symlink and without blocking on a
    /// FIFO.
    pub fn open_entry(&self, name: &str) -> rustix::io::Result<OwnedFd> {
        rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
    }

    /// Whether `name` still refers to the same inode as `file`.
    fn is_same(&self, name: &str, file: impl AsFd) -> rustix::io::Result<bool> {
        let ours = rustix::fs::fstat(file)?;
        Ok(
            match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st.st_dev == ours.st_dev && st.st_ino == ours.st_ino,
                Err(_) => false,
            },
        )
    }

    /// Removes entry `name` of a writer that is gone. Call it under the directory lock:
    /// takes `LOCK_EX` on the entry (retrying for [`TAKEOVER_WAIT`]: a held lock means a
    /// writer), checks that the name still refers to the locked inode, and unlinks it.
    pub fn remove(&self, name: &str) -> Removal {
        let path = self.path.join(name);
        let fd = match self.open_entry(name) {
            Ok(fd) => fd,
            Err(e) => return Removal::Failed(format!("reopen {}: {e}", path.display())),
        };
        match lock_within(&fd, TAKEOVER_WAIT) {
            Ok(true) => {}
            Ok(false) => return Removal::Kept("its lock is held (a writer appeared)".into()),
            Err(e) => return Removal::Failed(format!("lock {}: {e}", path.display())),
        }
        if !self.is_same(name, &fd).unwrap_or(false) {
            return Removal::Kept("the name changed while checking".into());
        }
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Removal::Removed,
            Err(e) => Removal::Failed(format!("unlink {}: {e}", path.display())),
        }
    }

    /// Unlinks `name` if it still refers to `file` (a writer removing its own segment:
    /// another engine may have taken the name over since). Takes and releases the
    /// directory lock itself.
    pub(crate) fn unlink_own(&self, name: &str, file: impl AsFd) -> Result<()> {
        let path = self.path.join(name);
        let _ = rustix::fs::flock(&self.fd, FlockOperation::LockExclusive);
        let result = match self.is_same(name, file) {
            Ok(true) => rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
                .map_err(|e| Error::io("unlink", &path, e)),
            Ok(false) => Ok(()),
            Err(e) => Err(Error::io("fstat", &path, e)),
        };
        self.unlock();
        result
    }

    /// Why creation temporary `name` may be removed (`Ok(reason)`), or why it must be kept
    /// (`Err(reason)`): it must be a regular file, older than `min_age` by modification
    /// time, with its lock free (its creator locks it before anything else).
    pub fn stale_temporary(
        &self,
        name: &str,
        min_age: Duration,
    ) -> std::result::Result<String, String> {
        let fd = self
            .open_entry(name)
            .map_err(|e| format!("cannot open: {e}"))?;
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
        if age <= min_age {
            return Err(format!(
                "creation temporary only {}s old (minimum {}s)",
                age.as_secs(),
                min_age.as_secs()
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
    }

    /// Takeover: fails with [`Error::EngineIdInUse`] if engine `id`'s segment has a live
    /// writer. A missing, dead or closed segment is fine: the creator's rename replaces it.
    /// Call it under the directory lock.
    pub(crate) fn refuse_if_live(&self, id: &str) -> Result<()> {
        let file_name = naming::file_name(id);
        let path = self.path.join(&file_name);
        let fd = match self.open_entry(&file_name) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(()),
            Err(Errno::LOOP) => return Err(Error::SymlinkFile { path }),
            Err(e) => return Err(Error::io("open existing segment", &path, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("fstat", &path, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::NotRegularFile {
                kind: fsutil::kind_name(&st),
                path,
            });
        }
        let deadline = Instant::now() + TAKEOVER_WAIT;
        loop {
            match fsutil::try_flock(&fd, FlockOperation::NonBlockingLockExclusive, &path)? {
                LockProbe::Acquired => return Ok(()),
                LockProbe::Held if Instant::now() < deadline => std::thread::sleep(LOCK_RETRY),
                LockProbe::Held => {
                    let pid = crate::reader::SegmentReader::open(&path)
                        .ok()
                        .map(|r| r.identity().pid);
                    return Err(Error::EngineIdInUse {
                        id: id.to_owned(),
                        path,
                        pid,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_round_trip() {
        assert_eq!(
            temporary_name("e1", 123, 0xff),
            ".e1.123.00000000000000ff.tmp"
        );
        assert_eq!(
            temporary_engine_id(&temporary_name("a.b", 7, 1)),
            Some("a.b")
        );
        assert_eq!(temporary_engine_id(".e1.123.00ff.tmp"), Some("e1"));
        for bad in [
            ".e1.x.00ff.tmp",
            ".e1.123.zz.tmp",
            "e1.123.ff.tmp",
            ".e1.123.ff",
            "..1.f.tmp",
        ] {
            assert_eq!(temporary_engine_id(bad), None, "{bad}");
        }
        assert_eq!(EntryName::of("e1.hps"), Some(EntryName::Segment("e1")));
        assert_eq!(
            EntryName::of(".e1.1.ab.tmp").map(EntryName::engine_id),
            Some("e1")
        );
        assert_eq!(EntryName::of("notes.txt"), None);
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let e = SegmentDir::open(&tmp.path().join("missing")).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::NotFound);
    }

    #[test]
    fn remove_refuses_a_locked_entry_and_unlinks_a_free_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SegmentDir::open(tmp.path()).unwrap();
        let held = std::fs::File::create(tmp.path().join("held.hps")).unwrap();
        rustix::fs::flock(&held, FlockOperation::NonBlockingLockExclusive).unwrap();
        std::fs::write(tmp.path().join("free.hps"), b"x").unwrap();
        std::fs::write(tmp.path().join("notes.txt"), b"x").unwrap();
        assert_eq!(dir.entries().unwrap(), ["free.hps", "held.hps"]);
        assert!(matches!(dir.remove("held.hps"), Removal::Kept(_)));
        assert!(matches!(dir.remove("free.hps"), Removal::Removed));
        assert!(tmp.path().join("held.hps").exists() && !tmp.path().join("free.hps").exists());
    }
}
