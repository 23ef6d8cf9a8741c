//! What the engine's cost model learnt, kept between runs: a small JSON file beside the
//! engine's segment, one per model, device and CPU thread count, so that the first request
//! after a restart is predicted from its first step instead of after three or four (the
//! first 7,000-token prefill's ETA was 16-17% short at a quarter while the model learnt).
//!
//! The file is `<progress dir>/.cost-model-<model fingerprint>-<device>-t<threads>.json`:
//! hidden, so that no segment scan takes it for an engine, and in the directory the
//! engine already writes to (a test's temporary directory keeps its own). It is ignored,
//! with a log line, when it is another model's, device's or thread count's (its key is
//! checked, not only its name), older than [`MAX_AGE`], not this format, or refused by
//! [`CostModel::with_learnt`] (a damaged file). It is written atomically (a temporary file
//! renamed over it) at most every [`SAVE_EVERY`] at a task's end, and when the engine
//! closes.

use hydra_layout::{CostModel, Learnt, ModelConfig};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A file older than this is stale: the machine (its load, its other tenants) may have
/// changed since.
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The least time between two saves at a task's end.
pub const SAVE_EVERY: Duration = Duration::from_secs(30);

/// This file format's version.
const FORMAT: u32 = 1;

/// Whose model a file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Key {
    format: u32,
    model_fingerprint: String,
    device: String,
    cpu_threads: usize,
}

#[derive(Debug, Serialize, Deserialize)]
struct File {
    key: Key,
    saved_unix_s: u64,
    /// The fits, as `hydra_layout::LearntFit` serializes them.
    fits: Learnt,
}

/// Where one engine keeps what its cost model learnt.
#[derive(Debug, Clone)]
pub struct LearntStore {
    path: PathBuf,
    key: Key,
}

impl LearntStore {
    /// The store of an engine publishing in `dir`, serving the model of `fingerprint` on
    /// `device` with `cpu_threads` threads.
    pub fn new(dir: &Path, fingerprint: u64, device: &str, cpu_threads: usize) -> Self {
        let safe: String = device
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let name = format!(".cost-model-{fingerprint:016x}-{safe}-t{cpu_threads}.json");
        Self {
            path: dir.join(name),
            key: Key {
                format: FORMAT,
                model_fingerprint: format!("{fingerprint:016x}"),
                device: device.to_owned(),
                cpu_threads,
            },
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The model learnt by an earlier run, when the file is there, this engine's, fresh and
    /// sound (see the module docs); `None` otherwise, logged unless the file is missing.
    pub fn load(&self, config: ModelConfig) -> Option<CostModel> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => return self.ignored(format_args!("unreadable: {e}")),
        };
        let file: File = match serde_json::from_str(&text) {
            Ok(file) => file,
            Err(e) => return self.ignored(format_args!("not a cost model file: {e}")),
        };
        if file.key != self.key {
            return self.ignored(format_args!("another engine's ({:?})", file.key));
        }
        let age = unix_now().saturating_sub(file.saved_unix_s);
        if age > MAX_AGE.as_secs() {
            return self.ignored(format_args!("stale (saved {age} s ago)"));
        }
        let Some(model) = CostModel::with_learnt(config, &file.fits) else {
            return self.ignored(format_args!("its figures are not a model's"));
        };
        tracing::info!(file = %self.path.display(), "cost model restored from the last run");
        Some(model)
    }

    fn ignored(&self, why: std::fmt::Arguments<'_>) -> Option<CostModel> {
        tracing::warn!(file = %self.path.display(), "cost model file ignored: {why}");
        None
    }

    /// Writes `model`'s learnt figures, atomically (a temporary file renamed over the
    /// file). Figures that are not finite (JSON has no NaN) are not written.
    pub fn save(&self, model: &CostModel) -> std::io::Result<()> {
        let file = File {
            key: self.key.clone(),
            saved_unix_s: unix_now(),
            fits: model.learnt(),
        };
        let text = serde_json::to_string(&file).map_err(std::io::Error::other)?;
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.path)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::StepShape;

    fn trained() -> CostModel {
        let mut m = CostModel::default();
        for i in 0..10u64 {
            let s = StepShape::prefill(256, 256 * i);
            m.observe(&s, 2_000_000 + 40_000 * 256 + 30 * (256 * i));
        }
        m
    }

    #[test]
    fn a_saved_model_is_restored_by_the_same_engine_only() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LearntStore::new(tmp.path(), 0xabc, "cpu", 2);
        assert!(
            store.load(ModelConfig::default()).is_none(),
            "nothing saved yet"
        );
        let m = trained();
        store.save(&m).unwrap();
        let name = store.path().file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with(".cost-model-0000000000000abc-cpu-t2"),
            "{name}"
        );
        let again = store.load(ModelConfig::default()).expect("restored");
        let s = StepShape::prefill(256, 4096);
        assert_eq!(again.predict(&s), m.predict(&s));
        // Another thread count, device or model finds no file of its own; a file copied
        // under its name is refused by its key.
        for other in [
            LearntStore::new(tmp.path(), 0xabc, "cpu", 4),
            LearntStore::new(tmp.path(), 0xabc, "cuda:0", 2),
            LearntStore::new(tmp.path(), 0xdef, "cpu", 2),
        ] {
            assert!(other.load(ModelConfig::default()).is_none());
            std::fs::copy(store.path(), other.path()).unwrap();
            assert!(
                other.load(ModelConfig::default()).is_none(),
                "{:?}",
                other.path()
            );
        }
    }

    #[test]
    fn stale_damaged_and_foreign_files_are_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LearntStore::new(tmp.path(), 1, "cpu", 1);
        store.save(&trained()).unwrap();
        let text = std::fs::read_to_string(store.path()).unwrap();
        let mut file: serde_json::Value = serde_json::from_str(&text).unwrap();
        let write = |v: &serde_json::Value| std::fs::write(store.path(), v.to_string()).unwrap();

        file["saved_unix_s"] = (unix_now() - MAX_AGE.as_secs() - 10).into();
        write(&file);
        assert!(store.load(ModelConfig::default()).is_none(), "stale");
        file["saved_unix_s"] = unix_now().into();
        file["fits"][0]["mean_sq_error"] = (-1.0).into();
        write(&file);
        assert!(store.load(ModelConfig::default()).is_none(), "damaged");
        file["fits"] = serde_json::json!([]);
        write(&file);
        assert!(store.load(ModelConfig::default()).is_none(), "too few fits");
        std::fs::write(store.path(), "{not json").unwrap();
        assert!(store.load(ModelConfig::default()).is_none(), "not JSON");
        let mut other_format: serde_json::Value = serde_json::from_str(&text).unwrap();
        other_format["key"]["format"] = 99.into();
        write(&other_format);
        assert!(
            store.load(ModelConfig::default()).is_none(),
            "another format"
        );
    }
}
