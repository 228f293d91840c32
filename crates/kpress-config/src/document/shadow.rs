//! `[shadow]`: the what-if trials' candidates, sample, CPU share and queue.

use kpress_codec::Candidate;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::Walk;
use crate::settings::{
    ShadowSettings, SHADOW_CANDIDATES_MAX, SHADOW_MAX_CPU_FRACTION_DEFAULT,
    SHADOW_MAX_CPU_FRACTION_MIN, SHADOW_MAX_QUEUE_BYTES_DEFAULT, SHADOW_SAMPLE_DEFAULT,
    SHADOW_THREADS_DEFAULT,
};

pub(super) const KEYS: [&str; 5] = [
    "candidates",
    "sample",
    "max_cpu_fraction",
    "threads",
    "max_queue_bytes",
];
const THREADS_MAX: i64 = 64;
const MAX_QUEUE_BYTES_MIN: i64 = 64 << 10;
const MAX_QUEUE_BYTES_MAX: i64 = 1 << 30;
const CANDIDATES_ALLOWED: &str =
    "1..16 distinct specs such as \"zstd:3\", \"gzip:6:libdeflate\", \"lz4:9:block=7\", \
     \"zstd:3:window=22\", \"snappy\", \"none\"";

impl Walk<'_> {
    pub(super) fn shadow(&mut self, table: &DeTable<'_>) -> Option<ShadowSettings> {
        let keys = self.known_keys("shadow", table, &KEYS);
        // Left out, the auto rules' candidates are tried; the file as a whole is checked
        // for a rule that supplies some (`Walk::shadow_needs_candidates`).
        let candidates = match keys.get("candidates") {
            Some((_, v)) => self.candidates("shadow.candidates", v),
            None => Some(Vec::new()),
        };
        let sample = match keys.get("sample") {
            // Zero is no trials: leave out [shadow] for that.
            Some((_, v)) => self.fraction("shadow.sample", v, f64::MIN_POSITIVE, "0 < sample <= 1"),
            None => Some(SHADOW_SAMPLE_DEFAULT),
        };
        let max_cpu_fraction = match keys.get("max_cpu_fraction") {
            Some((_, v)) => self.fraction(
                "shadow.max_cpu_fraction",
                v,
                SHADOW_MAX_CPU_FRACTION_MIN,
                &format!("{SHADOW_MAX_CPU_FRACTION_MIN}..1"),
            ),
            None => Some(SHADOW_MAX_CPU_FRACTION_DEFAULT),
        };
        let threads = match keys.get("threads") {
            Some((_, v)) => self
                .integer_in(
                    "shadow.threads",
                    v,
                    1,
                    THREADS_MAX,
                    &format!("1..{THREADS_MAX}"),
                )
                .map(|n| n as usize),
            None => Some(SHADOW_THREADS_DEFAULT),
        };
        let max_queue_bytes = match keys.get("max_queue_bytes") {
            Some((_, v)) => self
                .integer_in(
                    "shadow.max_queue_bytes",
                    v,
                    MAX_QUEUE_BYTES_MIN,
                    MAX_QUEUE_BYTES_MAX,
                    &format!("{MAX_QUEUE_BYTES_MIN}..{MAX_QUEUE_BYTES_MAX}"),
                )
                .map(|n| n as usize),
            None => Some(SHADOW_MAX_QUEUE_BYTES_DEFAULT),
        };
        Some(ShadowSettings {
            sample: sample?,
            candidates: candidates?,
            max_cpu_fraction: max_cpu_fraction?,
            threads: threads?,
            max_queue_bytes: max_queue_bytes?,
        })
    }

    /// A list of candidate specs (`shadow.candidates`, `auto.candidates`), written as
    /// `key`.
    pub(super) fn candidates(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
    ) -> Option<Vec<Candidate>> {
        let DeValue::Array(items) = value.get_ref() else {
            self.sink.bad_value(
                key,
                &value.span(),
                format!(
                    "must be an array of spec strings, not {}",
                    value.get_ref().type_str()
                ),
                Some(CANDIDATES_ALLOWED.to_owned()),
            );
            return None;
        };
        if items.is_empty() || items.len() > SHADOW_CANDIDATES_MAX {
            self.sink.bad_value(
                key,
                &value.span(),
                format!(
                    "has {} candidates: each is a label of the shadow metrics, so 1..{SHADOW_CANDIDATES_MAX}",
                    items.len()
                ),
                Some(CANDIDATES_ALLOWED.to_owned()),
            );
            return None;
        }
        let mut candidates: Vec<Candidate> = Vec::with_capacity(items.len());
        let mut all_ok = true;
        for item in items.iter() {
            let Some(spec) = self.string(key, item) else {
                all_ok = false;
                continue;
            };
            match spec.parse::<Candidate>() {
                Ok(candidate) if candidates.contains(&candidate) => {
                    self.sink.bad_value(
                        key,
                        &item.span(),
                        format!("{spec:?} repeats the candidate {candidate}"),
                        Some(CANDIDATES_ALLOWED.to_owned()),
                    );
                    all_ok = false;
                }
                Ok(candidate) => candidates.push(candidate),
                Err(err) => {
                    self.sink.bad_value(
                        key,
                        &item.span(),
                        err.to_string(),
                        Some(CANDIDATES_ALLOWED.to_owned()),
                    );
                    all_ok = false;
                }
            }
        }
        all_ok.then_some(candidates)
    }

    /// A number (float or integer) in `min..=1`.
    pub(super) fn fraction(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        min: f64,
        allowed: &str,
    ) -> Option<f64> {
        self.number_in(key, value, min, 1.0, allowed)
    }

    /// A number (float or integer) in `min..=max`.
    pub(super) fn number_in(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        min: f64,
        max: f64,
        allowed: &str,
    ) -> Option<f64> {
        let number = match value.get_ref() {
            DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
            DeValue::Integer(n) => i64::from_str_radix(n.as_str(), n.radix())
                .ok()
                .map(|n| n as f64),
            other => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    format!("must be a number, not {}", other.type_str()),
                    Some(allowed.to_owned()),
                );
                return None;
            }
        };
        match number {
            Some(n) if n.is_finite() && (min..=max).contains(&n) => Some(n),
            _ => {
                self.sink
                    .bad_value(key, &value.span(), "out of range", Some(allowed.to_owned()));
                None
            }
        }
    }
}
