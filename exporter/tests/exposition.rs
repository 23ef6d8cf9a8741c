//! The hand-written exposition against its oracle, the former prometheus-client encoding
//! (`tests/oracle/`): for the same collection, both formats give the same families (name,
//! `# HELP`, `# TYPE`) with the same samples (name, labels, value) in the same order,
//! including hostile label values (quotes, backslashes, line feeds, unicode) and
//! non-finite values; each output is well formed on its own (one family per name, samples
//! under their family, OpenMetrics ending with one `# EOF`), families come in the order of
//! `METRIC_NAMES`, and promtool accepts the text format.

mod common;
mod oracle;

use common::*;
use hydra_exporter::collect::Collection;
use hydra_exporter::{render, Collector, Format, METRIC_NAMES};
use hydra_layout::{clock, Phase, SlotState, WorkUnit};
use hydra_probe::Thresholds;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One sample line.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl PartialEq for Sample {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.labels == other.labels
            && (self.value == other.value || (self.value.is_nan() && other.value.is_nan()))
    }
}

/// One metric family: its metadata and its samples, in order.
#[derive(Debug, Clone, PartialEq)]
struct Family {
    help: String,
    kind: String,
    samples: Vec<Sample>,
}

/// A parsed exposition: families by name, and their names in output order.
#[derive(Debug)]
struct Parsed {
    order: Vec<String>,
    families: BTreeMap<String, Family>,
}

/// Parses a text 0.0.4 or OpenMetrics 1.0.0 exposition as the exporter writes it (HELP
/// then TYPE before each family's samples, no timestamps, no exemplars), panicking with
/// the line at the first thing out of place.
fn parse(text: &str, format: Format) -> Parsed {
    assert!(
        text.ends_with('\n'),
        "exposition does not end with a newline"
    );
    let lines: Vec<&str> = text[..text.len() - 1].split('\n').collect();
    let mut parsed = Parsed {
        order: Vec::new(),
        families: BTreeMap::new(),
    };
    let mut current: Option<String> = None;
    let mut eof = false;
    for (n, line) in lines.iter().enumerate() {
        let at = || format!("line {}: {line:?}", n + 1);
        assert!(!eof, "content after # EOF at {}", at());
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            assert!(
                !parsed.families.contains_key(name),
                "family {name} declared twice at {}",
                at()
            );
            parsed.order.push(name.to_owned());
            parsed.families.insert(
                name.to_owned(),
                Family {
                    help: unescape_help(help, format),
                    kind: String::new(),
                    samples: Vec::new(),
                },
            );
            current = Some(name.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE without a type");
            assert_eq!(
                Some(name),
                current.as_deref(),
                "TYPE not after its HELP at {}",
                at()
            );
            let family = parsed.families.get_mut(name).unwrap();
            assert!(
                family.kind.is_empty() && family.samples.is_empty(),
                "{}",
                at()
            );
            assert!(
                ["gauge", "counter", "histogram"].contains(&kind),
                "type {kind} at {}",
                at()
            );
            family.kind = kind.to_owned();
        } else if *line == "# EOF" {
            assert_eq!(format, Format::OpenMetrics, "# EOF in the text format");
            eof = true;
        } else {
            assert!(!line.starts_with('#'), "unexpected comment at {}", at());
            let sample = parse_sample(line).unwrap_or_else(|e| panic!("{e} at {}", at()));
            let name = current.as_deref().expect("sample before any family");
            let family = parsed.families.get_mut(name).unwrap();
            assert!(
                sample_names(name, &family.kind, format).contains(&sample.name),
                "sample outside its family at {}",
                at()
            );
            family.samples.push(sample);
        }
    }
    assert_eq!(
        eof,
        format == Format::OpenMetrics,
        "OpenMetrics must end with # EOF (and only it)"
    );
    for (name, f) in &parsed.families {
        assert!(!f.kind.is_empty(), "family {name} without TYPE");
        assert!(!f.samples.is_empty(), "family {name} without samples");
    }
    parsed
}

/// The sample names family `name` of type `kind` may have in `format`.
fn sample_names(name: &str, kind: &str, format: Format) -> Vec<String> {
    match (kind, format) {
        ("counter", Format::OpenMetrics) => vec![format!("{name}_total")],
        ("histogram", _) => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|s| format!("{name}{s}"))
            .collect(),
        _ => vec![name.to_owned()],
    }
}

fn unescape_help(help: &str, format: Format) -> String {
    let mut out = String::new();
    let mut chars = help.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if format == Format::OpenMetrics => out.push('"'),
            other => panic!("bad escape \\{other:?} in HELP {help:?}"),
        }
    }
    out
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or_else(|| "no value".to_owned())?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
    {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        loop {
            let eq = rest.find('=').ok_or("label without =")?;
            let key = &rest[..eq];
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("bad label name {key:?}"));
            }
            rest = rest[eq + 1..]
                .strip_prefix('"')
                .ok_or("label value not quoted")?;
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next().ok_or("unterminated label value")? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        c => return Err(format!("bad escape \\{c}")),
                    },
                    (_, '\n') => return Err("raw line feed in a label value".into()),
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.to_owned(), value));
            rest = &rest[end + 1..];
            if let Some(r) = rest.strip_prefix(',') {
                rest = r;
            } else if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            } else {
                return Err("label not followed by , or }".into());
            }
        }
    }
    let v = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let value = match v {
        "NaN" => f64::NAN,
        "+Inf" | "+inf" | "inf" => f64::INFINITY,
        "-Inf" | "-inf" => f64::NEG_INFINITY,
        _ => v
            .parse::<f64>()
            .map_err(|e| format!("bad value {v:?}: {e}"))?,
    };
    // Where `le` stands among a bucket's labels is free: prometheus-client's OpenMetrics
    // encoder puts it first, its text encoder and the exporter last.
    if let Some(at) = labels.iter().position(|(k, _)| k == "le") {
        let le = labels.remove(at);
        labels.push(le);
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Renders `c` both ways in both formats and checks they agree; returns the new text.
fn assert_same_as_oracle(c: Collection, stats: &hydra_exporter::stats::ExporterStats) -> String {
    let c = Arc::new(c);
    let mut text = String::new();
    for format in [Format::Text, Format::OpenMetrics] {
        let new_out = render(c.clone(), stats, format);
        let old_out = oracle::render_prometheus_client(c.clone(), stats, format);
        let new = parse(&new_out, format);
        let old = parse(&old_out, format);
        let names = |p: &Parsed| p.families.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&new), names(&old), "{format:?}: families differ");
        for (name, want) in &old.families {
            let got = &new.families[name];
            assert_eq!(
                (&got.help, &got.kind),
                (&want.help, &want.kind),
                "{format:?}: metadata of {name}"
            );
            assert_eq!(
                got.samples.len(),
                want.samples.len(),
                "{format:?}: sample count of {name}"
            );
            for (g, w) in got.samples.iter().zip(&want.samples) {
                assert_eq!(g, w, "{format:?}: a sample of {name}");
            }
        }
        // Families in the documented order (the exporter's own counters last).
        let documented: Vec<&str> = METRIC_NAMES
            .iter()
            .map(|n| match format {
                Format::OpenMetrics => {
                    let fam = n.strip_suffix("_total").unwrap_or(n);
                    if new.families.contains_key(fam) {
                        fam
                    } else {
                        n
                    }
                }
                Format::Text => n,
            })
            .filter(|n| new.families.contains_key(*n))
            .collect();
        assert_eq!(new.order, documented, "{format:?}: family order");
        if format == Format::Text {
            text = new_out;
        }
    }
    text
}

/// An engine with one slot in each phase and odd values: idle, queued, prefill, decode,
/// save, restore, a phase and unit from a newer writer, a decode with an unknown target,
/// and counts beyond `i64::MAX`.
fn every_phase(s: &Scratch, id: &str) -> hydra_layout::SegmentWriter {
    let now = clock::monotonic_ns();
    let mut w = s.writer(id, 10);
    w.heartbeat(now);
    let d = decode(now, 100, 1000, 10 * S, S / 100);
    let states = [
        (1, SlotState::default()),
        (
            2,
            SlotState {
                phase: Phase::Prefill,
                work_done: 64,
                work_total: 512,
                ..d
            },
        ),
        (3, d),
        (4, save(now, 3 << 20, 8 << 20)),
        (
            5,
            SlotState {
                phase: Phase::Restore,
                ..save(now, 1 << 20, 8 << 20)
            },
        ),
        (
            6,
            SlotState {
                phase: Phase::Unknown(77),
                work_unit: WorkUnit::Unknown(9),
                ..d
            },
        ),
        (7, SlotState { work_total: 0, ..d }),
        (
            8,
            SlotState {
                n_past: u64::MAX,
                n_ctx: u64::MAX - 1,
                state_size: 1 << 63,
                work_done: u64::MAX,
                work_total: u64::MAX,
                ..d
            },
        ),
        (
            9,
            SlotState {
                phase: Phase::Queued,
                ..SlotState::default()
            },
        ),
    ];
    for (slot, st) in states {
        w.publish(slot, &st).unwrap();
    }
    w.pending_counter().queued(9);
    w
}

/// A directory with an engine in every state ([`every_state`]) and one with a slot in
/// every phase ([`every_phase`]), their writers, and a collector over it.
fn every_state_and_phase() -> (Scratch, Vec<hydra_layout::SegmentWriter>, Collector) {
    let s = Scratch::new();
    let mut writers = every_state(&s);
    writers.push(every_phase(&s, "phases"));
    let collector = Collector::new(&s.dir, Thresholds::default());
    (s, writers, collector)
}

#[test]
fn same_as_prometheus_client_for_every_engine_state_and_phase() {
    let (s, _writers, collector) = every_state_and_phase();
    let c = collector.collect();
    assert_eq!(c.views().count(), 5, "{}", s.describe());
    let text = assert_same_as_oracle(c, collector.stats());
    promtool(&["check", "metrics"], &text);
}

#[test]
fn same_as_prometheus_client_with_hostile_labels_and_non_finite_values() {
    let (s, _writers, collector) = every_state_and_phase();
    let mut c = collector.collect();
    let hostile = [
        "quo\"te\"",
        "back\\slash\\",
        "line\nfeed\n",
        "ünï©ødé 🚀 \u{0}\t",
        "all \\\"\n\\n\" } , = { # EOF",
    ];
    let mut views: Vec<_> = c
        .engines
        .iter_mut()
        .filter_map(|e| e.view.as_mut().ok())
        .collect();
    assert_eq!(views.len(), hostile.len(), "{}", s.describe());
    for (v, id) in views.iter_mut().zip(hostile) {
        v.engine_id = id.to_owned();
        let d = &mut v.identity.description;
        d.model_name = format!("model \"{id}\"");
        d.model_quant = format!("Q4\\K\n{id}");
        d.device = "cuda:0\\\"\n".to_owned();
    }
    // Non-finite values on active slots (the reader never derives them, but a writer of
    // the exposition must still spell them right).
    let live = views
        .iter_mut()
        .find(|v| v.slots.iter().any(|s| s.is_active()))
        .expect("an engine with an active slot");
    let slot = live.slots.iter_mut().find(|s| s.is_active()).unwrap();
    slot.derived.eta_s = Some(f64::INFINITY);
    slot.derived.rate_per_s = Some(f64::NEG_INFINITY);
    slot.derived.progress = Some(f64::NAN);
    let text = assert_same_as_oracle(c, collector.stats());
    for want in [
        r#"engine="quo\"te\"""#,
        r#"engine="back\\slash\\""#,
        r#"engine="line\nfeed\n""#,
        r#"model="model \"all \\\"\n\\n\" } , = { # EOF\"""#,
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
    assert!(text.contains(" +Inf\n") && text.contains(" -Inf\n") && text.contains(" NaN\n"));
    promtool(&["check", "metrics"], &text);
}

#[test]
fn same_as_prometheus_client_for_busy_engines() {
    let s = Scratch::new();
    let now = clock::monotonic_ns();
    let _writers: Vec<_> = (0..3)
        .map(|e| {
            let mut w = s.writer(&format!("busy-{e}"), 32);
            w.heartbeat(now);
            for slot in 0..32 {
                let st = if slot % 4 == 3 {
                    save(now, slot as u64 * 4096, 1 << 20)
                } else {
                    decode(now, 10 + slot as u64, 1000, 10 * S, slot as u64 * S / 10)
                };
                w.publish(slot, &st).unwrap();
            }
            w
        })
        .collect();
    let collector = Collector::new(&s.dir, Thresholds::default());
    assert_same_as_oracle(collector.collect(), collector.stats());
}

#[test]
fn empty_collection_is_the_same_too() {
    let collector = Collector::new("/nonexistent/hydra-exporter-test", Thresholds::default());
    let c = collector.collect();
    assert_eq!(c.views().count(), 0);
    assert_same_as_oracle(c, collector.stats());
}

#[test]
fn same_as_prometheus_client_for_statistics_summed_and_per_slot() {
    let s = Scratch::new();
    let _served = s.served("served", 3);
    let _plain = s.served("other", 1);
    for per_slot in [false, true] {
        let collector = Collector::new(&s.dir, Thresholds::default()).with_per_slot_stats(per_slot);
        let text = assert_same_as_oracle(collector.collect(), collector.stats());
        assert!(text.contains("# TYPE hydra_step_duration_seconds histogram"));
        assert!(text.contains(r#"hydra_tasks_finished_total{engine="served","#));
        promtool(&["check", "metrics"], &text);
    }
}
