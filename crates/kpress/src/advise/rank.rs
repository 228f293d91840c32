//! Ranking measured candidates for a goal, and the one sentence that explains each
//! trade-off. Sans-IO: the figures come from offline trials or the proxy's shadow
//! trials alike.

use anyhow::Context;
use kpress_codec::Candidate;
use kpress_measure::{RecordsSection, TrialResult};

/// What the advice optimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Goal {
    /// The smallest stored bytes (within any floor).
    Size,
    /// The most MB/s per core (among candidates that shrink the records).
    Speed,
}

impl Goal {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Goal::Size => "size",
            Goal::Speed => "speed",
        }
    }
}

/// Limits a candidate must meet to be chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Floors {
    /// At least this many 10^6 raw bytes compressed per second on one core.
    pub(crate) min_mbps: Option<f64>,
    /// At most this many milliseconds of one core per 10^6 raw bytes.
    pub(crate) max_cpu_ms_per_mb: Option<f64>,
}

impl Floors {
    /// Why `measured` is not eligible, if it is not.
    fn miss(&self, measured: &Measured) -> Option<String> {
        if measured.stored_bytes >= measured.uncompressed_bytes() {
            return Some("stores no less than the records uncompressed".to_owned());
        }
        let mbps = measured.compress_mb_per_s();
        if let Some(min) = self.min_mbps.filter(|&min| mbps < min) {
            return Some(format!(
                "below the --min-mbps {} floor at {} MB/s",
                number(min),
                number(mbps)
            ));
        }
        let cpu = measured.compress_cpu_ms_per_mb();
        if let Some(max) = self.max_cpu_ms_per_mb.filter(|&max| cpu > max) {
            return Some(format!(
                "above the --max-cpu-ms-per-mb {} ceiling at {} ms/MB",
                number(max),
                number(cpu)
            ));
        }
        None
    }
}

/// One candidate's figures over the same records as every other candidate's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Measured {
    pub(crate) candidate: Candidate,
    /// Batches the records were grouped into.
    pub(crate) batches: u64,
    /// Uncompressed records bytes (the records sections).
    pub(crate) raw_bytes: u64,
    /// The whole batches written with the candidate (headers included): what a broker
    /// stores.
    pub(crate) stored_bytes: u64,
    /// One core's time compressing `raw_bytes`.
    pub(crate) compress_seconds: f64,
    /// One core's time decompressing them back, when measured.
    pub(crate) decompress_seconds: Option<f64>,
}

/// Each of `candidates` tried on `sections`, `passes` times.
pub(crate) fn measure(
    candidates: &[Candidate],
    sections: &[RecordsSection],
    passes: usize,
) -> anyhow::Result<Vec<Measured>> {
    candidates
        .iter()
        .map(|candidate| {
            kpress_measure::trial(candidate, sections, passes)
                .map(|r| Measured::of_trial(&r))
                .with_context(|| format!("measuring {candidate}"))
        })
        .collect()
}

impl Measured {
    /// The figures of one trial.
    fn of_trial(result: &TrialResult) -> Measured {
        Measured {
            candidate: result.candidate.clone(),
            batches: result.batches as u64,
            raw_bytes: result.raw_bytes,
            stored_bytes: result.batch_bytes,
            compress_seconds: result.compress.as_secs_f64(),
            decompress_seconds: Some(result.decompress.as_secs_f64()),
        }
    }
}

/// A record batch's header before its records: what `none` adds to the raw bytes.
pub(crate) const BATCH_HEADER_BYTES: u64 = 61;

impl Measured {
    /// The same records in uncompressed batches.
    pub(crate) fn uncompressed_bytes(&self) -> u64 {
        self.raw_bytes + BATCH_HEADER_BYTES * self.batches
    }

    /// Stored bytes per uncompressed batch byte.
    pub(crate) fn ratio(&self) -> f64 {
        self.stored_bytes as f64 / self.uncompressed_bytes().max(1) as f64
    }

    /// 10^6 raw bytes per second of one core.
    pub(crate) fn compress_mb_per_s(&self) -> f64 {
        per_second(self.raw_bytes, self.compress_seconds)
    }

    pub(crate) fn decompress_mb_per_s(&self) -> Option<f64> {
        self.decompress_seconds
            .map(|seconds| per_second(self.raw_bytes, seconds))
    }

    /// Milliseconds of one core per 10^6 raw bytes.
    pub(crate) fn compress_cpu_ms_per_mb(&self) -> f64 {
        if self.raw_bytes == 0 {
            return 0.0;
        }
        self.compress_seconds * 1e3 / (self.raw_bytes as f64 / 1e6)
    }
}

fn per_second(bytes: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return f64::INFINITY;
    }
    bytes as f64 / 1e6 / seconds
}

/// A candidate in its place, with why it is there.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ranked {
    pub(crate) measured: Measured,
    /// Why the goal's floors (or the records' own size) rule it out, if they do.
    pub(crate) miss: Option<String>,
    /// Its trade-off against the choice (the choice's, against the runner-up).
    pub(crate) sentence: String,
}

/// `results` best first for `goal`: the eligible ones ordered by the goal, then the
/// ones `floors` rule out, in the same order. The first is the choice when eligible.
pub(crate) fn rank(results: Vec<Measured>, goal: Goal, floors: &Floors) -> Vec<Ranked> {
    let mut ranked: Vec<Ranked> = results
        .into_iter()
        .map(|measured| Ranked {
            miss: floors.miss(&measured),
            measured,
            sentence: String::new(),
        })
        .collect();
    ranked.sort_by(|a, b| {
        a.miss
            .is_some()
            .cmp(&b.miss.is_some())
            .then_with(|| compare_for(goal, &a.measured, &b.measured))
            .then_with(|| {
                a.measured
                    .candidate
                    .to_string()
                    .cmp(&b.measured.candidate.to_string())
            })
    });
    let sentences: Vec<String> = (0..ranked.len())
        .map(|i| {
            let reference = if i == 0 { 1 } else { 0 };
            match ranked.get(reference) {
                Some(other) if reference != i => trade_off(&ranked[i], &other.measured),
                _ => format!("{} is the only candidate.", ranked[i].measured.candidate),
            }
        })
        .collect();
    for (entry, sentence) in ranked.iter_mut().zip(sentences) {
        entry.sentence = sentence;
    }
    ranked
}

/// The chosen candidate: the first when eligible.
pub(crate) fn choice(ranked: &[Ranked]) -> Option<&Ranked> {
    ranked.first().filter(|r| r.miss.is_none())
}

fn compare_for(goal: Goal, a: &Measured, b: &Measured) -> std::cmp::Ordering {
    let by_size = || a.ratio().total_cmp(&b.ratio());
    let by_speed = || b.compress_mb_per_s().total_cmp(&a.compress_mb_per_s());
    match goal {
        Goal::Size => by_size().then_with(by_speed),
        Goal::Speed => by_speed().then_with(by_size),
    }
}

/// Within this fraction, two sizes are "the same".
const SAME_SIZE: f64 = 0.005;
/// Within this factor, two speeds are "as fast".
const SAME_SPEED: f64 = 1.05;

/// One sentence: how `entry` stores and compresses against `other`, e.g. "zstd:3
/// stores 12% less than gzip:6 and compresses 4.1x faster per core."
pub(crate) fn trade_off(entry: &Ranked, other: &Measured) -> String {
    let this = &entry.measured;
    // Sizes compare per uncompressed byte, so trials over different records (a topic's
    // shadow samples) compare fairly.
    let size = this.ratio() / other.ratio().max(f64::MIN_POSITIVE) - 1.0;
    let (size_text, smaller) = if size.abs() < SAME_SIZE {
        (format!("stores as much as {}", other.candidate), None)
    } else if size < 0.0 {
        (
            format!("stores {} less than {}", percent(-size), other.candidate),
            Some(true),
        )
    } else {
        (
            format!("stores {} more than {}", percent(size), other.candidate),
            Some(false),
        )
    };
    let speed = this.compress_mb_per_s() / other.compress_mb_per_s();
    let (speed_text, faster) = if !speed.is_finite() || speed <= 0.0 {
        ("compresses too fast to time".to_owned(), None)
    } else if speed < SAME_SPEED && speed > 1.0 / SAME_SPEED {
        ("compresses as fast per core".to_owned(), None)
    } else if speed > 1.0 {
        (
            format!("compresses {}x faster per core", factor(speed)),
            Some(true),
        )
    } else {
        (
            format!("compresses {}x slower per core", factor(1.0 / speed)),
            Some(false),
        )
    };
    let joint = match (smaller, faster) {
        (Some(a), Some(b)) if a != b => "but",
        _ => "and",
    };
    let mut sentence = format!("{} {size_text} {joint} {speed_text}", this.candidate);
    if let Some(miss) = &entry.miss {
        sentence.push_str(&format!(" ({miss})"));
    }
    sentence.push('.');
    sentence
}

/// `0.123` as "12%", small ones with a decimal ("0.4%").
pub(crate) fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    if p.abs() < 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

fn factor(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// A figure for people: three significant digits at most, no trailing zeros.
pub(crate) fn number(x: f64) -> String {
    if !x.is_finite() {
        return "∞".to_owned();
    }
    let digits = if x.abs() >= 100.0 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    let text = format!("{x:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A candidate that stored `stored` of 1 MB raw in 10 batches, compressing at
    /// `mbps`.
    pub(crate) fn measured(spec: &str, stored: u64, mbps: f64) -> Measured {
        Measured {
            candidate: spec.parse().unwrap(),
            batches: 10,
            raw_bytes: 1_000_000,
            stored_bytes: stored,
            compress_seconds: 1.0 / mbps,
            decompress_seconds: None,
        }
    }

    fn specs(ranked: &[Ranked]) -> Vec<String> {
        ranked
            .iter()
            .map(|r| r.measured.candidate.to_string())
            .collect()
    }

    fn sample() -> Vec<Measured> {
        vec![
            measured("gzip:6", 120_000, 40.0),
            measured("zstd:3", 106_000, 164.0),
            measured("lz4:9", 190_000, 600.0),
            measured("zstd:19", 95_000, 4.0),
            measured("none", 1_000_610, 5000.0),
        ]
    }

    #[test]
    fn size_ranks_smallest_first_and_uncompressed_last() {
        let ranked = rank(sample(), Goal::Size, &Floors::default());
        assert_eq!(
            specs(&ranked),
            ["zstd:19", "zstd:3", "gzip:6", "lz4:9", "none"]
        );
        assert_eq!(
            choice(&ranked).unwrap().measured.candidate.to_string(),
            "zstd:19"
        );
        assert!(ranked[4].miss.as_deref().unwrap().contains("uncompressed"));
    }

    #[test]
    fn a_floor_makes_size_pick_the_smallest_fast_enough() {
        let floors = Floors {
            min_mbps: Some(100.0),
            max_cpu_ms_per_mb: None,
        };
        let ranked = rank(sample(), Goal::Size, &floors);
        assert_eq!(
            specs(&ranked),
            ["zstd:3", "lz4:9", "zstd:19", "gzip:6", "none"]
        );
        assert_eq!(
            ranked[2].sentence,
            "zstd:19 stores 10% less than zstd:3 but compresses 41x slower per core \
             (below the --min-mbps 100 floor at 4 MB/s)."
        );
        let cpu = Floors {
            min_mbps: None,
            max_cpu_ms_per_mb: Some(4.0),
        };
        let ranked = rank(sample(), Goal::Size, &cpu);
        assert_eq!(
            choice(&ranked).unwrap().measured.candidate.to_string(),
            "lz4:9"
        );
        let zstd3 = ranked
            .iter()
            .find(|r| r.measured.candidate.to_string() == "zstd:3")
            .unwrap();
        assert!(zstd3
            .miss
            .as_deref()
            .unwrap()
            .contains("ceiling at 6.1 ms/MB"));
    }

    #[test]
    fn speed_ranks_fastest_that_shrinks_the_records() {
        let ranked = rank(sample(), Goal::Speed, &Floors::default());
        assert_eq!(
            specs(&ranked),
            ["lz4:9", "zstd:3", "gzip:6", "zstd:19", "none"]
        );
    }

    #[test]
    fn sentences_compare_with_the_choice() {
        let ranked = rank(
            vec![
                measured("gzip:6", 120_000, 40.0),
                measured("zstd:3", 106_000, 164.0),
            ],
            Goal::Size,
            &Floors::default(),
        );
        assert_eq!(
            ranked[0].sentence,
            "zstd:3 stores 12% less than gzip:6 and compresses 4.1x faster per core."
        );
        assert_eq!(
            ranked[1].sentence,
            "gzip:6 stores 13% more than zstd:3 and compresses 4.1x slower per core."
        );
        let same = rank(
            vec![
                measured("zstd:3", 100_000, 100.0),
                measured("zstd:4", 100_100, 102.0),
            ],
            Goal::Size,
            &Floors::default(),
        );
        assert_eq!(
            same[1].sentence,
            "zstd:4 stores as much as zstd:3 and compresses as fast per core."
        );
        let alone = rank(
            vec![measured("zstd:3", 1, 1.0)],
            Goal::Size,
            &Floors::default(),
        );
        assert_eq!(alone[0].sentence, "zstd:3 is the only candidate.");
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(number(4.0), "4");
        assert_eq!(number(6.0975), "6.1");
        assert_eq!(number(0.123), "0.12");
        assert_eq!(number(1234.6), "1235");
        assert_eq!(percent(0.1234), "12%");
        assert_eq!(percent(0.0423), "4.2%");
    }
}
