//! Segment file names, engine ids and the default directory.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Where engines publish by default.
pub const DEFAULT_DIR: &str = "/dev/shm/hydra-progress";
/// Environment variable that overrides [`DEFAULT_DIR`] for every tool.
pub const DIR_ENV: &str = "HYDRA_PROGRESS_DIR";
/// File name extension of a segment.
pub const EXTENSION: &str = "hps";
/// Longest engine id (the header's field is 64 bytes, NUL-terminated).
pub const MAX_ENGINE_ID_LEN: usize = crate::header::ENGINE_ID_LEN - 1;

/// The segment directory: `explicit` if given, else `$HYDRA_PROGRESS_DIR`, else
/// [`DEFAULT_DIR`].
pub fn resolve_dir(explicit: Option<&Path>) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_path_buf();
    }
    match std::env::var_os(DIR_ENV) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_DIR),
    }
}

/// Checks that `id` can name a segment: 1 to 63 bytes of `[A-Za-z0-9._-]`, not starting
/// with `.` (names starting with `.` are creation temporaries).
pub fn validate_engine_id(id: &str) -> Result<()> {
    let reason = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_ENGINE_ID_LEN {
        Some("it is longer than 63 bytes")
    } else if id.starts_with('.') {
        Some("it starts with '.'")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("only ASCII letters, digits, '.', '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidEngineId {
            id: id.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// File name of engine `id`'s segment: `<id>.hps`.
pub fn file_name(id: &str) -> String {
    format!("{id}.{EXTENSION}")
}

/// Path of engine `id`'s segment in `dir`.
pub fn segment_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(file_name(id))
}

/// The engine id a directory entry names, if it is a segment file name
/// (`<valid id>.hps`); temporaries and other files give `None`.
pub fn engine_id_of(file_name: &str) -> Option<&str> {
    let id = file_name.strip_suffix(EXTENSION)?.strip_suffix('.')?;
    validate_engine_id(id).ok().map(|_| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(validate_engine_id("engine-0.a_b").is_ok());
        for bad in ["", ".hidden", "a/b", "a b", "ü", &"x".repeat(64)] {
            assert!(validate_engine_id(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_engine_id(&"x".repeat(63)).is_ok());
    }

    #[test]
    fn file_names_map_back_to_ids() {
        assert_eq!(engine_id_of(&file_name("e1")), Some("e1"));
        assert_eq!(engine_id_of(".e1.123.tmp"), None);
        assert_eq!(engine_id_of("e1.txt"), None);
        assert_eq!(engine_id_of(".hps"), None);
    }

    #[test]
    fn explicit_dir_wins() {
        assert_eq!(resolve_dir(Some(Path::new("/x"))), PathBuf::from("/x"));
    }
}
