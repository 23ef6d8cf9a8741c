//! Headless Chromium for the page tests: load a URL, let its script run for a budget of
//! virtual time, and take the DOM as it then stands (`--dump-dom`) or a screenshot. Each
//! run has a user-data directory of its own, and the flags that keep Chromium from
//! reaching out to the network (this machine's network is closed, and a test must not
//! depend on it). A run that does not end within [`RUN_LIMIT`] is killed and fails the
//! test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest one Chromium run may take (120 s). A run takes 2-14 s on a quiet 2-core
/// machine; the page of 8 engines of 64 slots went past 60 s once with its three sibling
/// tests' engines and browsers and a callgrind run beside it.
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The Chromium found on `PATH` for `test` (under [`crate::require`]'s rule).
pub fn chromium(test: &str) -> Option<PathBuf> {
    crate::require::tool(test, "chromium", "Debian's `chromium` package")
}

/// One headless Chromium.
#[derive(Debug, Clone)]
pub struct Browser {
    program: PathBuf,
    /// Window size, `W,H`.
    pub window: String,
    /// Virtual time the page's script gets before the DOM is taken, ms.
    pub budget_ms: u64,
}

impl Browser {
    /// A 1280x800 window and a 1.5 s budget (six polls of the page).
    pub fn new(program: PathBuf) -> Self {
        Self {
            program,
            window: "1280,800".into(),
            budget_ms: 1_500,
        }
    }

    /// The DOM of `url` once its script has run for the budget.
    pub fn dump_dom(&self, url: &str) -> String {
        self.run(&["--dump-dom".to_owned()], url)
    }

    /// A PNG of `url` once its script has run for the budget, written to `png`.
    pub fn screenshot(&self, url: &str, png: &Path) {
        if let Some(parent) = png.parent() {
            std::fs::create_dir_all(parent).expect("screenshot directory");
        }
        self.run(&[format!("--screenshot={}", png.display())], url);
        assert!(
            png.is_file(),
            "Chromium wrote no screenshot to {}",
            png.display()
        );
    }

    fn run(&self, what: &[String], url: &str) -> String {
        let profile = crate::scratch("hydra-chromium");
        // Files, not pipes: a DOM of hundreds of slots is larger than a pipe's buffer,
        // which Chromium would fill and then wait on.
        let out_path = profile.path().join("stdout");
        let err_path = profile.path().join("stderr");
        let file = |p: &Path| std::fs::File::create(p).expect("Chromium's output file");
        let mut child = Command::new(&self.program)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--window-size={}", self.window))
            .arg(format!("--virtual-time-budget={}", self.budget_ms))
            .args(what)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(file(&out_path))
            .stderr(file(&err_path))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.program.display()));
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for Chromium") {
                break status;
            }
            if started.elapsed() > RUN_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("Chromium did not finish {url} within {RUN_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let read =
            |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
        assert!(
            status.success(),
            "Chromium on {url}: {status}\n{}",
            read(&err_path)
        );
        read(&out_path)
    }
}

/// The start tag of the first element of `dom` that carries `attr_eq` (`data-slot="0"`).
pub fn tag_with<'a>(dom: &'a str, attr_eq: &str) -> Option<&'a str> {
    let at = dom.find(attr_eq)?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    Some(&dom[start..=end])
}

/// The value of attribute `name` in start tag `tag`.
pub fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let from = tag.find(&key)? + key.len();
    let len = tag[from..].find('"')?;
    Some(&tag[from..from + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_attributes_of_a_dump() {
        let dom = r#"<main><article tabindex="0" class="slot stalled" data-key="0" data-slot="0" data-verdict="stalled" data-layer="2/4"><div></div></article>
<article class="slot idle" data-slot="1" data-verdict="idle"></article></main>"#;
        let tag = tag_with(dom, r#"data-slot="0""#).unwrap();
        assert!(tag.starts_with("<article") && tag.ends_with('>'), "{tag}");
        assert_eq!(attr(tag, "data-verdict"), Some("stalled"));
        assert_eq!(attr(tag, "data-layer"), Some("2/4"));
        assert_eq!(attr(tag, "data-done"), None);
        let other = tag_with(dom, r#"data-slot="1""#).unwrap();
        assert_eq!(attr(other, "data-verdict"), Some("idle"));
        assert_eq!(tag_with(dom, r#"data-slot="2""#), None);
    }
}
