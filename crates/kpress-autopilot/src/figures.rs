//! Trial figures: what each candidate made of a topic's sampled batches, and how much
//! the topic produced, summed over samples and replicas and forgotten exponentially.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One candidate's trials on a topic's sampled batches.
///
/// Byte and CPU counts are whole-batch sums; `weight`, `ratio_sum` and `ratio_sq_sum`
/// are the (decayed) number of samples and the sums of their per-batch ratios
/// `bytes_out / bytes_in` and its square, from which the per-sample ratio variance
/// comes. `samples` counts every trial ever added and is never decayed: it gates a
/// topic's first choice, while `weight` is what the statistics rest on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CandidateFigures {
    pub samples: u64,
    /// Sampled batches as the producer sent them, in bytes.
    pub bytes_in: u64,
    /// The records sections of those batches, uncompressed.
    pub raw_bytes: u64,
    /// The same batches written with the candidate.
    pub bytes_out: u64,
    pub cpu_nanos: u64,
    pub ratio_sum: f64,
    pub ratio_sq_sum: f64,
    /// Samples behind `ratio_sum` after decay (equals `samples` until decayed).
    #[serde(default)]
    pub weight: f64,
}

/// A topic's figures: its traffic and every candidate's trials.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopicFigures {
    /// Every batch byte produced to the topic, as sent.
    pub traffic_bytes: u64,
    /// The time `traffic_bytes` covers, in ms (decayed like the bytes, so their
    /// quotient is a recency-weighted rate).
    pub span_ms: u64,
    pub candidates: BTreeMap<String, CandidateFigures>,
    /// Paired differences of two candidates' ratios on the same batches, by
    /// [`pair_key`]: filled by [`TopicFigures::add_batch`]. Candidates tried on the
    /// same batches vary together (a batch that compresses well does so with every
    /// codec), so the variance of their difference is far below the sum of their
    /// variances: the stability test uses it when there is one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pairs: BTreeMap<String, PairFigures>,
}

/// Sums over batches of `ratio(first) - ratio(second)` for one pair of candidates
/// (see [`pair_key`]), decayed like the rest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PairFigures {
    pub weight: f64,
    pub diff_sum: f64,
    pub diff_sq_sum: f64,
}

impl PairFigures {
    fn merge(&mut self, other: &PairFigures) {
        self.weight += other.weight;
        self.diff_sum += other.diff_sum;
        self.diff_sq_sum += other.diff_sq_sum;
    }

    fn decay(&mut self, factor: f64) {
        self.weight *= factor;
        self.diff_sum *= factor;
        self.diff_sq_sum *= factor;
    }

    fn is_sane(&self) -> bool {
        self.weight.is_finite()
            && self.weight >= 0.0
            && self.diff_sum.is_finite()
            && self.diff_sq_sum.is_finite()
            && self.diff_sq_sum >= 0.0
    }
}

/// The key of a pair in [`TopicFigures::pairs`]: the two labels in byte order, joined
/// by `|`; the difference is the first's ratio minus the second's.
pub fn pair_key(a: &str, b: &str) -> String {
    if a <= b {
        format!("{a}|{b}")
    } else {
        format!("{b}|{a}")
    }
}

impl CandidateFigures {
    /// Adds one trial: a batch of `bytes_in` bytes as sent, `raw` bytes of records,
    /// `bytes_out` bytes written with the candidate, in `cpu_nanos` of CPU. A batch
    /// of 0 bytes carries no ratio and is ignored.
    pub fn add_trial(&mut self, bytes_in: u64, raw: u64, bytes_out: u64, cpu_nanos: u64) {
        if bytes_in == 0 {
            return;
        }
        let ratio = bytes_out as f64 / bytes_in as f64;
        self.samples = self.samples.saturating_add(1);
        self.bytes_in = self.bytes_in.saturating_add(bytes_in);
        self.raw_bytes = self.raw_bytes.saturating_add(raw);
        self.bytes_out = self.bytes_out.saturating_add(bytes_out);
        self.cpu_nanos = self.cpu_nanos.saturating_add(cpu_nanos);
        self.ratio_sum += ratio;
        self.ratio_sq_sum += ratio * ratio;
        self.weight += 1.0;
    }

    /// Adds `other`'s trials to these.
    pub fn merge(&mut self, other: &CandidateFigures) {
        self.samples = self.samples.saturating_add(other.samples);
        self.bytes_in = self.bytes_in.saturating_add(other.bytes_in);
        self.raw_bytes = self.raw_bytes.saturating_add(other.raw_bytes);
        self.bytes_out = self.bytes_out.saturating_add(other.bytes_out);
        self.cpu_nanos = self.cpu_nanos.saturating_add(other.cpu_nanos);
        self.ratio_sum += other.ratio_sum;
        self.ratio_sq_sum += other.ratio_sq_sum;
        self.weight += other.weight;
    }

    /// Multiplies every decayed quantity by `factor` (see [`TopicFigures::decay`]).
    pub fn decay(&mut self, factor: f64) {
        let factor = clamp_factor(factor);
        self.bytes_in = scale(self.bytes_in, factor);
        self.raw_bytes = scale(self.raw_bytes, factor);
        self.bytes_out = scale(self.bytes_out, factor);
        self.cpu_nanos = scale(self.cpu_nanos, factor);
        self.ratio_sum *= factor;
        self.ratio_sq_sum *= factor;
        self.weight *= factor;
    }

    /// Whether every float is finite and not negative (checked on records read from
    /// the fleet, which anyone with write access may have written).
    pub fn is_sane(&self) -> bool {
        [self.ratio_sum, self.ratio_sq_sum, self.weight]
            .iter()
            .all(|x| x.is_finite() && *x >= 0.0)
    }
}

impl TopicFigures {
    /// Adds one trial of `candidate` (see [`CandidateFigures::add_trial`]).
    pub fn add_trial(
        &mut self,
        candidate: &str,
        bytes_in: u64,
        raw: u64,
        bytes_out: u64,
        cpu_nanos: u64,
    ) {
        self.candidates
            .entry(candidate.to_owned())
            .or_default()
            .add_trial(bytes_in, raw, bytes_out, cpu_nanos);
    }

    /// Adds the trials of every candidate on one batch of `bytes_in` bytes as sent
    /// and `raw` bytes of records: `(label, bytes_out, cpu_nanos)` each. Besides each
    /// candidate's trial, it adds every pair's ratio difference (a label given twice
    /// counts once).
    pub fn add_batch(&mut self, bytes_in: u64, raw: u64, trials: &[(&str, u64, u64)]) {
        if bytes_in == 0 {
            return;
        }
        let mut ratios: BTreeMap<&str, f64> = BTreeMap::new();
        for &(label, bytes_out, cpu_nanos) in trials {
            if ratios.contains_key(label) {
                continue;
            }
            self.add_trial(label, bytes_in, raw, bytes_out, cpu_nanos);
            ratios.insert(label, bytes_out as f64 / bytes_in as f64);
        }
        for (i, (a, ra)) in ratios.iter().enumerate() {
            for (b, rb) in ratios.iter().skip(i + 1) {
                let d = ra - rb;
                let pair = self.pairs.entry(pair_key(a, b)).or_default();
                pair.weight += 1.0;
                pair.diff_sum += d;
                pair.diff_sq_sum += d * d;
            }
        }
    }

    /// Counts `bytes` of batches produced to the topic, as sent.
    pub fn add_traffic(&mut self, bytes: u64) {
        self.traffic_bytes = self.traffic_bytes.saturating_add(bytes);
    }

    /// Extends the time the traffic covers by `ms` (once per decision window).
    pub fn add_span(&mut self, ms: u64) {
        self.span_ms = self.span_ms.saturating_add(ms);
    }

    /// Adds another replica's figures of the same topic: trials and traffic add up;
    /// the span is the longer one, since replicas count over the same windows.
    pub fn merge(&mut self, other: &TopicFigures) {
        self.traffic_bytes = self.traffic_bytes.saturating_add(other.traffic_bytes);
        self.span_ms = self.span_ms.max(other.span_ms);
        for (label, figures) in &other.candidates {
            self.candidates
                .entry(label.clone())
                .or_default()
                .merge(figures);
        }
        for (key, pair) in &other.pairs {
            self.pairs.entry(key.clone()).or_default().merge(pair);
        }
    }

    /// Exponential forgetting, applied once per decision window before the window's
    /// figures are added: every quantity except `samples` is multiplied by `factor`
    /// (clamped to 0..=1; [`decay_factor`] turns a half-life into it). Counts are
    /// rounded to the nearest integer.
    pub fn decay(&mut self, factor: f64) {
        let factor = clamp_factor(factor);
        self.traffic_bytes = scale(self.traffic_bytes, factor);
        self.span_ms = scale(self.span_ms, factor);
        for figures in self.candidates.values_mut() {
            figures.decay(factor);
        }
        for pair in self.pairs.values_mut() {
            pair.decay(factor);
        }
    }

    /// Whether every float is sane ([`CandidateFigures::is_sane`]).
    pub fn is_sane(&self) -> bool {
        self.candidates.values().all(CandidateFigures::is_sane)
            && self.pairs.values().all(PairFigures::is_sane)
    }
}

/// The per-window factor that halves old figures' weight every `half_life_windows`
/// windows: `0.5^(1 / half_life_windows)`; 1 (no forgetting) for a half-life that is
/// not a positive finite number.
pub fn decay_factor(half_life_windows: f64) -> f64 {
    if half_life_windows.is_finite() && half_life_windows > 0.0 {
        0.5f64.powf(1.0 / half_life_windows)
    } else {
        1.0
    }
}

fn clamp_factor(factor: f64) -> f64 {
    if factor.is_nan() {
        1.0
    } else {
        factor.clamp(0.0, 1.0)
    }
}

fn scale(count: u64, factor: f64) -> u64 {
    // `as` saturates; factor <= 1 keeps the product within u64 anyway.
    (count as f64 * factor).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decay_halves_at_the_half_life() {
        let mut t = TopicFigures::default();
        t.add_trial("lz4", 1000, 2000, 500, 10_000);
        t.add_traffic(1_000_000);
        t.add_span(60_000);
        let f = decay_factor(4.0);
        for _ in 0..4 {
            t.decay(f);
        }
        let c = &t.candidates["lz4"];
        assert_eq!(c.samples, 1);
        assert_eq!(c.bytes_in, 500);
        assert!((c.weight - 0.5).abs() < 1e-12);
        assert!((c.ratio_sum - 0.25).abs() < 1e-12);
        // Counts are rounded at every step.
        assert!(
            t.traffic_bytes.abs_diff(500_000) <= 2,
            "{}",
            t.traffic_bytes
        );
        assert!(t.span_ms.abs_diff(30_000) <= 2, "{}", t.span_ms);
    }

    #[test]
    fn merge_sums_trials_and_keeps_the_longer_span() {
        let mut a = TopicFigures::default();
        a.add_trial("lz4", 100, 200, 50, 7);
        a.add_span(1000);
        let mut b = TopicFigures::default();
        b.add_trial("lz4", 100, 200, 60, 9);
        b.add_trial("zstd:3", 100, 200, 40, 9);
        b.add_span(900);
        a.merge(&b);
        assert_eq!(a.candidates["lz4"].samples, 2);
        assert_eq!(a.candidates["lz4"].bytes_out, 110);
        assert_eq!(a.candidates["zstd:3"].samples, 1);
        assert_eq!(a.span_ms, 1000);
    }

    #[test]
    fn odd_factors_do_not_break_figures() {
        let mut t = TopicFigures::default();
        t.add_trial("lz4", 100, 200, 50, 7);
        t.decay(f64::NAN);
        assert_eq!(t.candidates["lz4"].bytes_in, 100);
        t.decay(7.0);
        assert_eq!(t.candidates["lz4"].bytes_in, 100);
        t.decay(-1.0);
        assert_eq!(t.candidates["lz4"].bytes_in, 0);
        assert!(t.is_sane());
        assert_eq!(decay_factor(0.0), 1.0);
    }

    #[test]
    fn a_batch_adds_trials_and_pair_differences() {
        let mut t = TopicFigures::default();
        t.add_batch(
            1000,
            4000,
            &[("lz4", 300, 5), ("zstd:3", 200, 9), ("lz4", 1, 1)],
        );
        t.add_batch(1000, 4000, &[("zstd:3", 100, 9), ("lz4", 250, 5)]);
        assert_eq!(t.candidates["lz4"].samples, 2);
        assert_eq!(t.candidates["lz4"].bytes_out, 550);
        let pair = &t.pairs[&pair_key("zstd:3", "lz4")];
        assert_eq!(pair_key("zstd:3", "lz4"), "lz4|zstd:3");
        assert_eq!(pair.weight, 2.0);
        assert!((pair.diff_sum - 0.25).abs() < 1e-12);
        assert!((pair.diff_sq_sum - (0.01 + 0.0225)).abs() < 1e-12);
    }
}
