//! Finding segments in a directory and resolving an engine name (id or path) to one.

use crate::error::ProbeError;
use hydra_layout::naming::{engine_id_of, segment_path, validate_engine_id};
use hydra_layout::SegmentReader;
use std::fs::FileType;
use std::path::{Path, PathBuf};

/// One segment file found in a directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Discovered {
    /// The engine id its name carries.
    pub engine_id: String,
    /// Its path.
    pub path: PathBuf,
}

/// An entry named like a segment (`<id>.hps`) that is not a regular file: a FIFO, socket,
/// directory, symbolic link... Never opened, only reported.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Stray {
    /// The engine id its name carries.
    pub engine_id: String,
    /// Its path.
    pub path: PathBuf,
    /// What it is ("FIFO", "directory", "symbolic link", ...).
    pub kind: &'static str,
}

/// Everything named like a segment in a directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Regular files named `<valid id>.hps`, sorted by id.
    pub segments: Vec<Discovered>,
    /// Other entries named `<valid id>.hps`, sorted by id.
    pub strays: Vec<Stray>,
}

/// Whether a file type is of one kind.
type IsKind = fn(&FileType) -> bool;

fn kind_name(t: FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kinds: [(IsKind, &'static str); 7] = [
        (FileType::is_file, "regular file"),
        (FileType::is_dir, "directory"),
        (FileType::is_symlink, "symbolic link"),
        (FileType::is_fifo, "FIFO"),
        (FileType::is_socket, "socket"),
        (FileType::is_char_device, "character device"),
        (FileType::is_block_device, "block device"),
    ];
    kinds
        .iter()
        .find(|(is, _)| is(&t))
        .map_or("file of unknown type", |&(_, name)| name)
}

/// Lists `dir`: segments (regular files named `<valid id>.hps`) and strays. File types come
/// from the directory entry (symbolic links are not followed). A directory that does not
/// exist or cannot be read is an error (never an empty scan: a wrong `--dir` must not look
/// like a host without engines); an empty one is an empty scan.
pub fn scan(dir: &Path) -> std::io::Result<Scan> {
    let entries = std::fs::read_dir(dir)?;
    let mut scan = Scan::default();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(engine_id_of) else {
            continue;
        };
        let engine_id = id.to_owned();
        let path = entry.path();
        let ft = entry.file_type()?;
        if ft.is_file() {
            scan.segments.push(Discovered { engine_id, path });
        } else {
            scan.strays.push(Stray {
                engine_id,
                path,
                kind: kind_name(ft),
            });
        }
    }
    scan.segments.sort();
    scan.strays.sort_by(|a, b| a.engine_id.cmp(&b.engine_id));
    Ok(scan)
}

/// Every segment in `dir`: regular files named `<valid id>.hps`, sorted by engine id.
/// Temporaries (`.<id>.<pid>.<hex>.tmp`), other names and non-regular entries are skipped;
/// a missing or unreadable directory is an error (see [`scan`]).
pub fn discover(dir: &Path) -> std::io::Result<Vec<Discovered>> {
    scan(dir).map(|s| s.segments)
}

/// Resolves `engine` to a segment path.
///
/// - `Some(name)` containing a `/`: a path to a segment file.
/// - `Some(id)`: engine `id`'s segment in `dir` if that exists (whatever its type: opening
///   it reports what is wrong), else a file of that name relative to the current directory,
///   else [`ProbeError::UnknownEngine`].
/// - `None`: the only segment in `dir`; [`ProbeError::NoEngines`] or
///   [`ProbeError::AmbiguousEngine`] otherwise.
pub fn resolve(dir: &Path, engine: Option<&str>) -> Result<PathBuf, ProbeError> {
    let listing = || {
        discover(dir)
            .map_err(|e| ProbeError::from(hydra_layout::Error::io("read directory", dir, e)))
    };
    let Some(name) = engine else {
        let mut found = listing()?;
        return match found.len() {
            0 => Err(ProbeError::NoEngines {
                dir: dir.to_path_buf(),
            }),
            1 => Ok(found.remove(0).path),
            _ => Err(ProbeError::AmbiguousEngine {
                dir: dir.to_path_buf(),
                ids: found.into_iter().map(|d| d.engine_id).collect(),
            }),
        };
    };
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    if validate_engine_id(name).is_ok() {
        let p = segment_path(dir, name);
        if p.symlink_metadata().is_ok() {
            return Ok(p);
        }
    }
    if !name.is_empty() && Path::new(name).symlink_metadata().is_ok() {
        return Ok(PathBuf::from(name));
    }
    // A directory that cannot be listed is the error to report, not "no such engine".
    Err(ProbeError::UnknownEngine {
        engine: name.to_owned(),
        dir: dir.to_path_buf(),
        found: listing()?.into_iter().map(|d| d.engine_id).collect(),
    })
}

/// Resolves `engine` (see [`resolve`]) and opens it read-only with default options.
pub fn open(dir: &Path, engine: Option<&str>) -> Result<SegmentReader, ProbeError> {
    let path = resolve(dir, engine)?;
    Ok(SegmentReader::open(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::SegmentWriter;

    fn writer(dir: &Path, id: &str) -> SegmentWriter {
        crate::test_support::writer(dir, id, 2)
    }

    #[test]
    fn discovers_sorted_segments_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("segs");
        let _b = writer(&dir, "b");
        let _a = writer(&dir, "a");
        std::fs::write(dir.join(".a.1.ff.tmp"), b"x").unwrap();
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
        std::fs::create_dir(dir.join("d.hps")).unwrap();
        let s = scan(&dir).unwrap();
        let ids: Vec<_> = s.segments.iter().map(|d| d.engine_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(s.strays.len(), 1);
        assert_eq!(
            (s.strays[0].engine_id.as_str(), s.strays[0].kind),
            ("d", "directory")
        );
        assert_eq!(discover(&dir).unwrap(), s.segments);
        let missing = discover(&tmp.path().join("missing")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        std::fs::create_dir(tmp.path().join("empty")).unwrap();
        assert!(discover(&tmp.path().join("empty")).unwrap().is_empty());
    }

    #[test]
    fn resolves_names() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("segs");
        for engine in [None, Some("zz")] {
            match resolve(&dir, engine) {
                Err(e @ ProbeError::Layout(hydra_layout::Error::Io { .. })) => {
                    assert!(e.to_string().contains(&*dir.to_string_lossy()), "{e}")
                }
                other => panic!("missing directory, {engine:?}: {other:?}"),
            }
        }
        std::fs::create_dir(&dir).unwrap();
        assert!(matches!(
            resolve(&dir, None),
            Err(ProbeError::NoEngines { .. })
        ));
        let _a = writer(&dir, "a");
        assert_eq!(resolve(&dir, None).unwrap(), dir.join("a.hps"));
        let _b = writer(&dir, "b");
        match resolve(&dir, None) {
            Err(ProbeError::AmbiguousEngine { ids, .. }) => assert_eq!(ids, ["a", "b"]),
            other => panic!("{other:?}"),
        }
        assert_eq!(resolve(&dir, Some("b")).unwrap(), dir.join("b.hps"));
        let by_path = dir.join("a.hps");
        assert_eq!(resolve(&dir, by_path.to_str()).unwrap(), by_path);
        match resolve(&dir, Some("zz")) {
            Err(e @ ProbeError::UnknownEngine { .. }) => {
                assert!(e.to_string().contains("found: a, b"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(open(&dir, Some("a")).unwrap().identity().engine_id, "a");
    }
}
