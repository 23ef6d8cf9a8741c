//! File-system checks shared by the writer and the reader: safe directory opening, file
//! type names, and the `flock` probes that tell a live writer from a dead one.

use crate::error::{Error, Result};
use rustix::fs::{FileType, FlockOperation, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// Human name of a file type, for error messages.
pub(crate) fn kind_name(st: &Stat) -> &'static str {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

/// Opens `dir` as a directory without following a final symlink.
pub(crate) fn open_dir_nofollow(dir: &Path) -> Result<OwnedFd> {
    match rustix::fs::open(
        dir,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(fd),
        Err(Errno::LOOP) => Err(Error::SymlinkDirectory {
            path: dir.to_path_buf(),
        }),
        Err(Errno::NOTDIR) => {
            // Either a symlink to something or not a directory at all: tell which.
            match rustix::fs::lstat(dir) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    Err(Error::SymlinkDirectory {
                        path: dir.to_path_buf(),
                    })
                }
                _ => Err(Error::UnsafeDirectory {
                    path: dir.to_path_buf(),
                    reason: "not a directory".into(),
                }),
            }
        }
        Err(e) => Err(Error::io("open directory", dir, e)),
    }
}

/// Opens (creating if missing, mode 0750) the directory a writer publishes into, and checks
/// that it is safe: not a symlink, a directory, owned by us, not world-writable.
pub(crate) fn open_writer_dir(dir: &Path) -> Result<OwnedFd> {
    match rustix::fs::mkdir(dir, Mode::from_raw_mode(0o750)) {
        Ok(()) => {
            // mkdir's mode is filtered by the umask; group readers need r-x regardless.
            rustix::fs::chmod(dir, Mode::from_raw_mode(0o750))
                .map_err(|e| Error::io("chmod directory", dir, e))?;
        }
        Err(Errno::EXIST) => {}
        Err(e) => return Err(Error::io("create directory", dir, e)),
    }
    let fd = open_dir_nofollow(dir)?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("fstat directory", dir, e))?;
    let euid = rustix::process::geteuid().as_raw();
    if st.st_uid != euid {
        return Err(Error::UnsafeDirectory {
            path: dir.to_path_buf(),
            reason: format!(
                "owned by uid {}, not by this process's uid {euid}",
                st.st_uid
            ),
        });
    }
    if st.st_mode & 0o002 != 0 {
        return Err(Error::UnsafeDirectory {
            path: dir.to_path_buf(),
            reason: "it is world-writable".into(),
        });
    }
    Ok(fd)
}

/// Outcome of a non-blocking lock attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockProbe {
    /// We got the lock (and still hold it).
    Acquired,
    /// Somebody else holds a conflicting lock.
    Held,
}

/// `flock(op | LOCK_NB)`, mapping EWOULDBLOCK to [`LockProbe::Held`].
pub(crate) fn try_flock(fd: impl AsFd, op: FlockOperation, path: &Path) -> Result<LockProbe> {
    match rustix::fs::flock(fd, op) {
        Ok(()) => Ok(LockProbe::Acquired),
        Err(Errno::WOULDBLOCK) => Ok(LockProbe::Held),
        Err(e) => Err(Error::io("flock", path, e)),
    }
}
