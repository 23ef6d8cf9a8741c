//! Order statistics for the figures the suite prints.

/// Nearest-rank percentile `p` (0..=1) of `v`; `None` when empty. Sorts `v`.
pub fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let idx = ((v.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    Some(v[idx])
}

/// The median of `v`; `None` when empty.
pub fn median(v: &mut [f64]) -> Option<f64> {
    percentile(v, 0.5)
}

/// `p50 / p99 / max` of a set of durations in seconds, as milliseconds, for a table row.
pub fn latency_row(v: &mut [f64]) -> String {
    match (percentile(v, 0.5), percentile(v, 0.99), percentile(v, 1.0)) {
        (Some(a), Some(b), Some(c)) => format!(
            "n={} p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            v.len(),
            a * 1e3,
            b * 1e3,
            c * 1e3
        ),
        _ => "n=0".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_nearest_rank() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&mut v, 0.0), Some(1.0));
        assert_eq!(median(&mut v), Some(3.0));
        assert_eq!(percentile(&mut v, 1.0), Some(5.0));
        assert_eq!(percentile(&mut [], 0.5), None);
    }
}
