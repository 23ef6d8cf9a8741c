//! The exposition formats, written by hand: Prometheus text 0.0.4 and OpenMetrics 1.0.0.
//!
//! A scrape of 16 engines x 64 busy slots is ~28k series. prometheus-client's encoders
//! spend ~170 ns on each (a `dyn` label-set encoder per sample, a buffered writer per
//! string, the labels re-encoded and re-escaped on every line); this writer appends to one
//! pre-sized `String`, with label sets rendered once per engine or slot ([`LabelSets`]),
//! the ends of the lines of a state set once per scrape ([`StateSet`]), and numbers
//! formatted by `itoa` / `zmij` (seconds by [`Seconds`], without a float conversion).
//! `crate::metrics` says *what* is exported; this module only knows the syntax.
//!
//! # What differs between the two formats
//!
//! | | text 0.0.4 | OpenMetrics 1.0.0 |
//! |---|---|---|
//! | counter family name in `# HELP` / `# TYPE` | `x_total` | `x` |
//! | counter sample name | `x_total` | `x_total` |
//! | escaped in `# HELP` | `\` and line feed | `\`, `"` and line feed |
//! | end of the exposition | nothing | `# EOF` ([`Exposition::finish`]) |
//!
//! Alike in both: a sample is `name{label="value",...} value` (`name value` without
//! labels), with no timestamp; label values escape `\`, `"` and line feed (`\\`, `\"`,
//! `\n`) and may hold any other UTF-8; integers are decimal; floats are the shortest
//! decimal that parses back to the same `f64` (`0.25`, `30.0`, `0.000017`), and `NaN`,
//! `+Inf`, `-Inf` otherwise; times kept in nanoseconds are written as the exact decimal of
//! the same `f64` (`1764460800.123456768`, see [`Seconds`]). A family with no sample is
//! left out entirely (no `# HELP` without a sample). No `# UNIT` is written.
//!
//! Both are checked against prometheus-client's encoders, the former implementation, by
//! `tests/exposition.rs`.

/// Exposition format of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Format {
    /// Picks the format for an `Accept` header: OpenMetrics when it lists
    /// `application/openmetrics-text` with a non-zero quality, else text 0.0.4.
    pub fn from_accept(accept: Option<&str>) -> Self {
        let Some(accept) = accept else {
            return Self::Text;
        };
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            if !media.eq_ignore_ascii_case("application/openmetrics-text") {
                continue;
            }
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .and_then(|(_, v)| v.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            if q > 0.0 {
                return Self::OpenMetrics;
            }
        }
        Self::Text
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Metric type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `gauge`.
    Gauge,
    /// `counter`: the sample name ends in `_total`.
    Counter,
    /// `histogram`: the samples are `name_sum`, `name_count` and the cumulative
    /// `name_bucket{le="…"}`s ([`Family::histogram`]).
    Histogram,
}

/// One exposition being written.
#[derive(Debug)]
pub(crate) struct Exposition {
    out: String,
    format: Format,
}

impl Exposition {
    /// An empty exposition in `format`, with room for `capacity` bytes.
    pub(crate) fn with_capacity(format: Format, capacity: usize) -> Self {
        Self {
            out: String::with_capacity(capacity),
            format,
        }
    }

    /// The text so far, to append families written by another encoder (whole families
    /// only, and no `# EOF`).
    pub(crate) fn out(&mut self) -> &mut String {
        &mut self.out
    }

    /// Writes one family: `samples` writes its samples through the [`Family`]. The
    /// `# HELP` and `# TYPE` lines come first, and are taken back if no sample was written.
    ///
    /// `name` is the sample name, `_total` included for a counter.
    // Inlined into each caller (like `Family::sample`), so that `name` is a constant there
    // and copying it into every line is a few moves rather than a call to `memcpy`.
    #[inline(always)]
    pub(crate) fn family(
        &mut self,
        name: &str,
        help: &str,
        kind: Kind,
        samples: impl FnOnce(&mut Family<'_>),
    ) {
        let start = self.out.len();
        let family_name = match (kind, self.format) {
            (Kind::Counter, Format::OpenMetrics) => {
                debug_assert!(name.ends_with("_total"), "counter {name} without _total");
                name.strip_suffix("_total").unwrap_or(name)
            }
            _ => name,
        };
        // Written through a local, which the compiler can keep in registers across the
        // copies of a line (it cannot prove that of a field behind `&mut self`).
        let mut text = std::mem::take(&mut self.out);
        let out = &mut text;
        out.push_str("# HELP ");
        out.push_str(family_name);
        out.push(' ');
        escape_help(out, help, self.format);
        out.push_str("\n# TYPE ");
        out.push_str(family_name);
        out.push_str(match kind {
            Kind::Gauge => " gauge\n",
            Kind::Counter => " counter\n",
            Kind::Histogram => " histogram\n",
        });
        let mut family = Family {
            out,
            name,
            samples: 0,
            format: self.format,
        };
        samples(&mut family);
        if family.samples == 0 {
            text.truncate(start);
        }
        self.out = text;
    }

    /// The finished exposition (OpenMetrics: with its `# EOF` line).
    pub(crate) fn finish(mut self) -> String {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
        self.out
    }
}

/// The samples of one family (see [`Exposition::family`]).
#[derive(Debug)]
pub(crate) struct Family<'o> {
    out: &'o mut String,
    name: &'o str,
    samples: usize,
    format: Format,
}

impl Family<'_> {
    /// Ends the sample whose name and label set are written: its value, then the newline.
    #[inline(always)]
    fn end_sample(&mut self, value: impl Value) {
        value.write(self.out);
        self.out.push('\n');
        self.samples += 1;
    }

    /// `name{labels} value`, or `name value` for [`Labels::NONE`].
    #[inline(always)]
    pub(crate) fn sample(&mut self, labels: Labels<'_>, value: impl Value) {
        let out = &mut *self.out;
        out.push_str(self.name);
        if labels.0.is_empty() {
            out.push(' ');
        } else {
            out.push_str(labels.0);
        }
        self.end_sample(value);
    }

    /// `name{labels,extra} value`: a sample with one more label pair after the label set
    /// (`{extra} value` without labels).
    #[inline(always)]
    pub(crate) fn sample_with(
        &mut self,
        labels: Labels<'_>,
        extra: &ExtraLabel,
        value: impl Value,
    ) {
        let out = &mut *self.out;
        out.push_str(self.name);
        match labels.0.strip_suffix("} ") {
            Some(open) => {
                out.push_str(open);
                out.push(',');
            }
            None => out.push('{'),
        }
        out.push_str(&extra.pair);
        out.push_str("} ");
        self.end_sample(value);
    }

    /// The series of one state set for one label set: `name{labels,state="…"} 1` for
    /// every state `is` says the owner is in, `… 0` for the others, in the order of
    /// `states`.
    #[inline(always)]
    pub(crate) fn state_set(
        &mut self,
        labels: Labels<'_>,
        states: &StateSet,
        is: impl Fn(usize) -> bool,
    ) {
        let out = &mut *self.out;
        // The label set without its `} `, then `,state="…"} v`; without labels,
        // `{state="…"} v`.
        let (open, skip) = match labels.0.strip_suffix("} ") {
            Some(open) => (open, 0),
            None => ("{", 1),
        };
        for (i, tails) in states.tails.iter().enumerate() {
            out.push_str(self.name);
            out.push_str(open);
            out.push_str(&tails[usize::from(is(i))][skip..]);
        }
        self.samples += states.tails.len();
    }
}

/// The observations of one histogram series, its buckets not cumulative.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observations<'h, S> {
    /// The sum of the observed values, in the histogram's unit.
    pub(crate) sum: S,
    /// How many were observed.
    pub(crate) count: u64,
    /// Per bucket of the [`Les`] it is written with (the last is `+Inf`).
    pub(crate) buckets: &'h [u64],
}

impl Family<'_> {
    /// The series of one histogram for one label set (and an optional extra pair), in the
    /// order prometheus-client writes them: in text 0.0.4 the cumulative
    /// `name_bucket{…,le="…"}`s in ascending `le`, then `name_sum` and `name_count`; in
    /// OpenMetrics `name_sum` and `name_count` first. The buckets saturate.
    #[inline(always)]
    pub(crate) fn histogram<S: Value>(
        &mut self,
        labels: Labels<'_>,
        extra: Option<&ExtraLabel>,
        les: &Les,
        h: Observations<'_, S>,
    ) {
        debug_assert_eq!(h.buckets.len(), les.text.len());
        // The pairs without braces: `engine="e",kind="prefill"` (empty without labels).
        let inner = labels
            .0
            .strip_prefix('{')
            .and_then(|l| l.strip_suffix("} "));
        let mut pairs = String::from(inner.unwrap_or_default());
        if let Some(e) = extra {
            if !pairs.is_empty() {
                pairs.push(',');
            }
            pairs.push_str(&e.pair);
        }
        match self.format {
            Format::Text => {
                self.buckets(&pairs, &les.text, h.buckets);
                self.sum_and_count(&pairs, h.sum, h.count);
            }
            Format::OpenMetrics => {
                self.sum_and_count(&pairs, h.sum, h.count);
                self.buckets(&pairs, &les.open_metrics, h.buckets);
            }
        }
        self.samples += 2 + h.buckets.len();
    }

    fn sum_and_count<S: Value>(&mut self, pairs: &str, sum: S, count: u64) {
        let out = &mut *self.out;
        for (suffix, value) in [("_sum", None), ("_count", Some(count))] {
            out.push_str(self.name);
            out.push_str(suffix);
            if pairs.is_empty() {
                out.push(' ');
            } else {
                out.push('{');
                out.push_str(pairs);
                out.push_str("} ");
            }
            match value {
                None => sum.write(out),
                Some(n) => n.write(out),
            }
            out.push('\n');
        }
    }

    fn buckets(&mut self, pairs: &str, tails: &[String], buckets: &[u64]) {
        let out = &mut *self.out;
        let mut total = 0u64;
        for (n, tail) in buckets.iter().zip(tails) {
            total = total.saturating_add(*n);
            out.push_str(self.name);
            out.push_str("_bucket{");
            out.push_str(pairs);
            if !pairs.is_empty() {
                out.push(',');
            }
            out.push_str(tail);
            total.write(out);
            out.push('\n');
        }
    }
}

/// The `le` labels of one bucket layout, each rendered once as the end of a `_bucket`
/// sample's label set (`le="0.000128"} `), as each format spells a bound: an integral
/// bound is `1` in text 0.0.4 (as Go's client writes it) and `1.0` in OpenMetrics (its
/// canonical float; Prometheus 3 normalises both to that).
#[derive(Debug)]
pub(crate) struct Les {
    text: Vec<String>,
    open_metrics: Vec<String>,
}

impl Les {
    /// The layout whose bucket bounds are `les`, exact decimals in ascending order, the
    /// last `+Inf`.
    pub(crate) fn new(les: impl IntoIterator<Item = String>) -> Self {
        let tail = |le: &str| {
            let mut tail = String::new();
            push_pair(&mut tail, "le", le);
            tail.push_str("} ");
            tail
        };
        let (mut text, mut open_metrics) = (Vec::new(), Vec::new());
        for le in les {
            text.push(tail(&le));
            if le.bytes().all(|b| b.is_ascii_digit()) {
                open_metrics.push(tail(&format!("{le}.0")));
            } else {
                open_metrics.push(tail(&le));
            }
        }
        Self { text, open_metrics }
    }
}

/// The label sets of many samples, each rendered once, back to back in one buffer:
/// `{a="x",b="y"} `, from the brace that follows the metric name to the space before the
/// value, values escaped.
#[derive(Debug, Default)]
pub(crate) struct LabelSets {
    buf: String,
}

/// Where a label set is in its [`LabelSets`].
pub(crate) type LabelSetId = std::ops::Range<usize>;

impl LabelSets {
    /// Room for `n` label sets of some 32 bytes.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            buf: String::with_capacity(n * 32),
        }
    }

    /// Renders the label set of `pairs` (names must be valid label names,
    /// `[a-zA-Z_][a-zA-Z0-9_]*`; values are escaped). No pair: see [`Labels::NONE`].
    pub(crate) fn add(&mut self, pairs: &[(&str, &str)]) -> LabelSetId {
        debug_assert!(!pairs.is_empty());
        let start = self.buf.len();
        let mut sep = '{';
        for (name, value) in pairs {
            self.buf.push(sep);
            push_pair(&mut self.buf, name, value);
            sep = ',';
        }
        self.buf.push_str("} ");
        start..self.buf.len()
    }

    /// The label set `id`.
    pub(crate) fn get(&self, id: LabelSetId) -> Labels<'_> {
        Labels(&self.buf[id])
    }

    /// Forgets every label set.
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
    }
}

/// A label set of a [`LabelSets`] (or none), as written: `{a="x"} `.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Labels<'a>(&'a str);

impl Labels<'static> {
    /// No label: `name value`.
    pub(crate) const NONE: Self = Labels("");
}

impl Labels<'_> {
    /// Bytes of the label set as written (`{a="x"} `: 8).
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// One label pair rendered once, added after the label set of many samples
/// ([`Family::sample_with`]): `source="model"`.
#[derive(Debug)]
pub(crate) struct ExtraLabel {
    pair: String,
}

impl ExtraLabel {
    /// The pair `name="value"` (`name` a valid label name; the value is escaped).
    pub(crate) fn new(name: &str, value: &str) -> Self {
        let mut pair = String::new();
        push_pair(&mut pair, name, value);
        Self { pair }
    }
}

/// The states of a state set, each rendered once as the end of its sample lines.
#[derive(Debug)]
pub(crate) struct StateSet {
    /// Per state, the ends of its lines when the owner is not in it and when it is:
    /// `,label="state"} 0` and `… 1`, line feed included.
    tails: Vec<[String; 2]>,
}

impl StateSet {
    /// The state set whose label is `label` and whose states are `states`, in order.
    pub(crate) fn new<'s>(label: &str, states: impl IntoIterator<Item = &'s str>) -> Self {
        let tails = states
            .into_iter()
            .map(|state| {
                let mut pair = String::from(",");
                push_pair(&mut pair, label, state);
                [format!("{pair}}} 0\n"), format!("{pair}}} 1\n")]
            })
            .collect();
        Self { tails }
    }
}

/// A sample value.
pub(crate) trait Value: Copy {
    /// Appends the value as the formats spell it.
    fn write(self, out: &mut String);
}

impl Value for u64 {
    fn write(self, out: &mut String) {
        out.push_str(itoa::Buffer::new().format(self));
    }
}

impl Value for f64 {
    /// The shortest decimal that parses back to the same `f64` (`zmij`), or `NaN`, `+Inf`,
    /// `-Inf`.
    fn write(self, out: &mut String) {
        if self.is_finite() {
            out.push_str(zmij::Buffer::new().format_finite(self));
        } else if self.is_nan() {
            out.push_str("NaN");
        } else if self > 0.0 {
            out.push_str("+Inf");
        } else {
            out.push_str("-Inf");
        }
    }
}

/// A time given in integer nanoseconds, exported in seconds: the sample's value is the
/// `f64` `ns as f64 / 1e9`, written without a float-to-decimal conversion.
///
/// `y = ns as f64` is an integer below 2^64, so `y / 1e9` (IEEE division, rounded to
/// nearest) is the double nearest to the decimal `y x 10^-9`, which is exactly
/// `{y / 10^9}.{y % 10^9}`; a parser that rounds to nearest (Rust's, Go's `ParseFloat`)
/// reads that decimal back as that same double. It is longer than the shortest decimal of
/// the double (`1764460800.123456768` for `1764460800.1234568`) and cheaper to write:
/// one integer conversion.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seconds(pub(crate) u64);

impl Value for Seconds {
    #[inline]
    fn write(self, out: &mut String) {
        let y = self.0 as f64;
        // 2^64: `ns` near u64::MAX rounds up to a double that is no u64.
        if y >= 18_446_744_073_709_551_616.0 {
            return (y / 1e9).write(out);
        }
        let y = y as u64; // exact: `y` is an integer below 2^64
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(y);
        // `digits` x 10^-9: the whole seconds, then the nine digits of the fraction
        // (zero-padded in front, trailing zeros dropped; `.0` for none).
        let (whole, fraction) = digits.split_at(digits.len().saturating_sub(9));
        out.push_str(if whole.is_empty() { "0" } else { whole });
        let fraction = fraction.trim_end_matches('0');
        if fraction.is_empty() {
            out.push_str(".0");
        } else {
            out.push('.');
            out.push_str(&"000000000"[digits.len().min(9)..]);
            out.push_str(fraction);
        }
    }
}

fn push_pair(out: &mut String, name: &str, value: &str) {
    debug_assert!(is_label_name(name), "{name:?} is not a valid label name");
    out.push_str(name);
    out.push_str("=\"");
    escape(out, value, |b| matches!(b, b'\\' | b'"' | b'\n'));
    out.push('"');
}

fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn escape_help(out: &mut String, help: &str, format: Format) {
    match format {
        Format::Text => escape(out, help, |b| matches!(b, b'\\' | b'\n')),
        Format::OpenMetrics => escape(out, help, |b| matches!(b, b'\\' | b'"' | b'\n')),
    }
}

/// Appends `s`, with each byte `special` says is special written as its escape (`\\`,
/// `\"`, `\n`; `special` picks among those three only).
#[inline]
fn escape(out: &mut String, s: &str, special: impl Fn(u8) -> bool) {
    // Nearly every value has nothing to escape: check all bytes without branching on each
    // (this folds into a vectorised loop), then copy the string whole.
    if !s.bytes().fold(false, |found, b| found | special(b)) {
        out.push_str(s);
        return;
    }
    let mut last = 0;
    for (i, b) in s.bytes().enumerate() {
        if !special(b) {
            continue;
        }
        out.push_str(&s[last..i]);
        out.push_str(match b {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        });
        last = i + 1;
    }
    out.push_str(&s[last..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(format: Format, f: impl FnOnce(&mut Exposition)) -> String {
        let mut x = Exposition::with_capacity(format, 0);
        f(&mut x);
        x.finish()
    }

    #[test]
    fn counter_names_per_format() {
        for (format, want) in [
            (
                Format::Text,
                "# HELP a_total Things.\n# TYPE a_total counter\na_total{k=\"v\"} 3\n",
            ),
            (
                Format::OpenMetrics,
                "# HELP a Things.\n# TYPE a counter\na_total{k=\"v\"} 3\n# EOF\n",
            ),
        ] {
            let got = render(format, |x| {
                let mut sets = LabelSets::default();
                let k = sets.add(&[("k", "v")]);
                x.family("a_total", "Things.", Kind::Counter, |f| {
                    f.sample(sets.get(k), 3u64)
                });
            });
            assert_eq!(got, want, "{format:?}");
        }
    }

    #[test]
    fn empty_family_is_left_out() {
        let got = render(Format::Text, |x| {
            x.family("a", "A.", Kind::Gauge, |_| {});
            x.family("b", "B.", Kind::Gauge, |f| f.sample(Labels::NONE, 1u64));
        });
        assert_eq!(got, "# HELP b B.\n# TYPE b gauge\nb 1\n");
    }

    #[test]
    fn label_sets_and_state_sets() {
        let mut sets = LabelSets::default();
        let slot = sets.add(&[("engine", "e"), ("slot", "3")]);
        let long_id = "x".repeat(64);
        let long = sets.add(&[("engine", &long_id)]);
        let edge_id = "y".repeat(64 - r#"{engine=""} "#.len());
        let edge = sets.add(&[("engine", &edge_id)]);
        assert_eq!(sets.get(slot.clone()).0, r#"{engine="e",slot="3"} "#);
        assert_eq!(sets.get(edge.clone()).len(), 64);
        let phases = StateSet::new("phase", ["idle", "decode"]);
        let got = render(Format::Text, |x| {
            x.family("s", "S.", Kind::Gauge, |f| {
                f.state_set(sets.get(slot.clone()), &phases, |i| i == 1);
                f.state_set(Labels::NONE, &phases, |_| false);
                f.state_set(sets.get(long.clone()), &phases, |i| i == 0);
                f.sample(sets.get(slot.clone()), 2u64);
                f.sample(sets.get(long.clone()), 3u64);
                f.sample(sets.get(edge.clone()), 4u64);
                f.state_set(sets.get(edge.clone()), &phases, |_| true);
            });
        });
        let want = format!(
            "# HELP s S.\n# TYPE s gauge\n\
             s{{engine=\"e\",slot=\"3\",phase=\"idle\"}} 0\n\
             s{{engine=\"e\",slot=\"3\",phase=\"decode\"}} 1\n\
             s{{phase=\"idle\"}} 0\n\
             s{{phase=\"decode\"}} 0\n\
             s{{engine=\"{long_id}\",phase=\"idle\"}} 1\n\
             s{{engine=\"{long_id}\",phase=\"decode\"}} 0\n\
             s{{engine=\"e\",slot=\"3\"}} 2\n\
             s{{engine=\"{long_id}\"}} 3\n\
             s{{engine=\"{edge_id}\"}} 4\n\
             s{{engine=\"{edge_id}\",phase=\"idle\"}} 1\n\
             s{{engine=\"{edge_id}\",phase=\"decode\"}} 1\n"
        );
        assert_eq!(got, want);
    }

    #[test]
    fn escapes_label_values_and_help() {
        let mut sets = LabelSets::default();
        let id = sets.add(&[("model", "a\"b\\c\nd é\u{1F600}"), ("x", "\\")]);
        assert_eq!(sets.get(id).0, r#"{model="a\"b\\c\nd é😀",x="\\"} "#);
        // Multi-byte characters in every position of a label set's first 64 bytes.
        for n in 40..70 {
            let mut sets = LabelSets::default();
            let value = format!("{}é😀", "a".repeat(n));
            let id = sets.add(&[("v", &value)]);
            let got = render(Format::Text, |x| {
                x.family("u", "U.", Kind::Gauge, |f| {
                    f.sample(sets.get(id.clone()), 1u64)
                });
            });
            assert_eq!(
                got,
                format!("# HELP u U.\n# TYPE u gauge\nu{{v=\"{value}\"}} 1\n")
            );
        }
        let states = StateSet::new("s", ["\"\\\n"]);
        let got = render(Format::Text, |x| {
            x.family("h", "q\"b\\n\nx", Kind::Gauge, |f| {
                f.state_set(Labels::NONE, &states, |_| true)
            });
        });
        assert_eq!(
            got,
            "# HELP h q\"b\\\\n\\nx\n# TYPE h gauge\nh{s=\"\\\"\\\\\\n\"} 1\n"
        );
        let om = render(Format::OpenMetrics, |x| {
            x.family("h", "q\"b\\n\nx", Kind::Gauge, |f| {
                f.sample(Labels::NONE, 0u64)
            });
        });
        assert!(om.starts_with("# HELP h q\\\"b\\\\n\\nx\n"), "{om}");
    }

    #[test]
    fn numbers() {
        let exact: [(f64, &str); 9] = [
            (0.0, "0.0"),
            (1.0, "1.0"),
            (0.25, "0.25"),
            (30.0, "30.0"),
            (-0.5, "-0.5"),
            (1_764_460_800.123_456_7, "1764460800.1234567"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ];
        for (v, want) in exact {
            let mut s = String::new();
            v.write(&mut s);
            assert_eq!(s, want);
        }
        for v in [
            1.7e-5,
            1.7e-9,
            1e16,
            123_456_789_012_345_680.0,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            -1e300,
            0.1 + 0.2,
        ] {
            let mut s = String::new();
            v.write(&mut s);
            assert_eq!(s.parse::<f64>(), Ok(v), "round trip of {s}");
            assert!(
                s.bytes()
                    .all(|b| b.is_ascii_digit() || b"+-.e".contains(&b)),
                "{s}"
            );
        }
        let mut s = String::new();
        u64::MAX.write(&mut s);
        assert_eq!(s, "18446744073709551615");
    }

    #[test]
    fn seconds_are_the_f64_of_ns_over_1e9() {
        let written = |ns: u64| {
            let mut s = String::new();
            Seconds(ns).write(&mut s);
            s
        };
        assert_eq!(written(0), "0.0");
        assert_eq!(written(30_000_000_000), "30.0");
        assert_eq!(written(1_500_000), "0.0015");
        assert_eq!(written(1), "0.000000001");
        // Beyond 2^53 the nanoseconds are rounded to a double first, as `ns as f64 / 1e9`
        // does.
        assert_eq!(written(1_764_460_800_123_456_789), "1764460800.123456768");
        // Every value parses back to exactly the double of the float path.
        let mut edge = vec![
            999_999_999,
            1_000_000_001,
            (1 << 53) - 1,
            1 << 53,
            (1 << 53) + 1,
            1 << 63,
            u64::MAX - 1024,
            u64::MAX - 2048,
            u64::MAX,
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            // xorshift64, over every magnitude
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            edge.push(x >> (x % 64));
        }
        for ns in edge {
            let s = written(ns);
            let want = ns as f64 / 1e9;
            assert_eq!(
                s.parse::<f64>().map(f64::to_bits),
                Ok(want.to_bits()),
                "{ns} ns written as {s}, want {want}"
            );
        }
    }
}
