//! Formatting of ages, rates, durations and progress for people (CLI tables, messages).

/// A duration in ns as a short human string: `0.4ms`, `850ms`, `12.3s`, `5m03s`, `2h04m`,
/// `3d02h` (a tenth of a millisecond below 10 ms, where a device wait lies).
pub fn duration_ns(ns: u64) -> String {
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;
    if ns < 10 * MS {
        format!("{:.1}ms", ns as f64 / MS as f64)
    } else if ns < S {
        format!("{}ms", ns / MS)
    } else if ns < 60 * S {
        format!("{:.1}s", ns as f64 / S as f64)
    } else if ns < 3600 * S {
        format!("{}m{:02}s", ns / (60 * S), ns / S % 60)
    } else if ns < 86_400 * S {
        format!("{}h{:02}m", ns / (3600 * S), ns / (60 * S) % 60)
    } else {
        format!("{}d{:02}h", ns / (86_400 * S), ns / (3600 * S) % 24)
    }
}

/// A duration in seconds (finite, not negative) as [`duration_ns`] does.
pub fn seconds(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "-".into();
    }
    let ns = s * 1e9;
    duration_ns(if ns >= u64::MAX as f64 {
        u64::MAX
    } else {
        ns as u64
    })
}

/// An optional age, or `-`.
pub fn age(ns: Option<u64>) -> String {
    ns.map(duration_ns).unwrap_or_else(|| "-".into())
}

/// A rate in `unit`s per second: `31.2 tok/s`, `1.5 MiB/s`, or `-` when unknown.
pub fn rate(r: Option<f64>, unit: &str) -> String {
    let Some(r) = r.filter(|r| r.is_finite()) else {
        return "-".into();
    };
    match unit {
        "tokens" => format!("{r:.1} tok/s"),
        "bytes" => format!("{}/s", bytes(r)),
        other => format!("{r:.1} {other}/s"),
    }
}

/// A byte count with a binary unit: `512 B`, `1.5 KiB`, `3.2 GiB`.
pub fn bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", UNITS[0])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// `done/total (pct%)`, `done/?` without a total.
pub fn progress(done: u64, total: u64, ratio: Option<f64>) -> String {
    match ratio {
        Some(p) if total > 0 => format!("{done}/{total} ({:.1}%)", p * 100.0),
        _ if done > 0 => format!("{done}/?"),
        _ => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(duration_ns(850_000_000), "850ms");
        assert_eq!(duration_ns(420_000), "0.4ms");
        assert_eq!(duration_ns(3_440_000), "3.4ms");
        assert_eq!(duration_ns(10_000_000), "10ms");
        assert_eq!(duration_ns(12_340_000_000), "12.3s");
        assert_eq!(duration_ns(303_000_000_000), "5m03s");
        assert_eq!(duration_ns(7_440_000_000_000), "2h04m");
        assert_eq!(duration_ns(u64::MAX), "213503d23h");
        assert_eq!(seconds(f64::NAN), "-");
        assert_eq!(rate(Some(31.25), "tokens"), "31.2 tok/s");
        assert_eq!(rate(Some(1536.0), "bytes"), "1.5 KiB/s");
        assert_eq!(rate(None, "tokens"), "-");
        assert_eq!(progress(45, 100, Some(0.45)), "45/100 (45.0%)");
        assert_eq!(progress(3, 0, None), "3/?");
    }
}
