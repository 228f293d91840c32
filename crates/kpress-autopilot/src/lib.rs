//! The autopilot's engine: which codec each topic of an auto rule gets, from what
//! shadow trials measured, within a CPU budget. Pure: no I/O, no clock, no threads;
//! the proxy feeds it figures and the time.
//!
//! - [`TopicFigures`]: per topic, its traffic and each candidate's trials
//!   ([`TopicFigures::add_batch`] for all candidates of one batch, which also records
//!   their paired differences), summed over replicas ([`TopicFigures::merge`]) and
//!   forgotten exponentially ([`TopicFigures::decay`], once per decision window with
//!   [`Settings::decay_factor`]; half-life [`DECAY_HALF_LIFE_WINDOWS_DEFAULT`]).
//! - [`decide`]: per rule, a [`Decision`] for every topic: its [`Choice`] (or none
//!   yet) and an [`Explanation`] for `/policy`.
//! - Fleet records ([`encode_figures`], [`encode_choice`], [`decode`]) and the
//!   [`FleetView`] that folds what replicas wrote into merged figures and the latest
//!   choice per topic.
//!
//! ## How many samples: `min_samples` = 30
//!
//! A topic's first choice waits until every candidate has `min_samples` trials; a
//! later change needs a gain beyond the margin (2%) and beyond 2 standard errors of
//! the difference. The test `tests/spread.rs` (ignored; `cargo test -p
//! kpress-autopilot --test spread -- --ignored --nocapture`) cuts the repository's
//! datasets into batches of records as a producer would, writes each batch
//! uncompressed (as sent) and with zstd:3, lz4, gzip:6 and snappy, and measures the
//! spread of per-batch ratios (whole batch written / as sent), 2026-11-28:
//!
//! | dataset, batch | batches | ratio mean (zstd:3, lz4, gzip:6, snappy) | CV of per-batch ratios |
//! |---|--:|---|---|
//! | apache_access.log, 16 KiB | 155 | 0.201, 0.265, 0.194, 0.274 | 14.9-16.6% |
//! | apache_access.log, 64 KiB | 38 | 0.158, 0.214, 0.150, 0.244 | 8.3-9.1% |
//! | nginxplus_status.ndjson, 16 KiB | 249 | 0.146, 0.232, 0.146, 0.246 | 2.5-4.3% |
//! | nginxplus_status.ndjson, 64 KiB | 45 | 0.049, 0.100, 0.061, 0.154 | 3.0-5.3% |
//!
//! A batch that compresses well does so with every codec: the per-batch difference
//! of two candidates varies far less than either ratio (apache, 16 KiB: zstd:3 -
//! gzip:6 differs by 0.0073 ± 0.0031 a batch while each ratio varies by ± 0.031). So
//! the samples `n` for 2 standard errors to fall below 2% of the ratio,
//! `n = 4 sd^2 / (0.02 r)^2`, depend on how the difference's variance is estimated:
//!
//! | dataset, batch | n, paired differences | n, each candidate's own variance |
//! |---|--:|--:|
//! | apache_access.log, 16 KiB | 3-27 (lz4 vs gzip:6: 27) | 347-505 |
//! | apache_access.log, 64 KiB | 3-11 | 98-151 |
//! | nginxplus_status.ndjson, 16 KiB | 1-9 | 15-28 |
//! | nginxplus_status.ndjson, 64 KiB | 2-13 | 11-32 |
//!
//! Every candidate is tried on the same sampled batches, so the first choice, which
//! compares the candidates' ratios over those batches, has the paired error: 30
//! samples separate a 2% difference at 2 standard errors in every measured case (the
//! worst needs 27), hence the default 30. Changes use the paired differences when the
//! trials came in through [`TopicFigures::add_batch`], and otherwise fall back to the
//! candidates' own variances, which on log-like data need ten times more samples:
//! then a topic changes only between clearly different candidates, which errs on the
//! side of stability. Two datasets only; consecutive batches of one file are more
//! alike than the every-Nth batches the trials sample, so real spreads can be wider.
//!
//! ## Following a change, and not flapping
//!
//! With a half-life of 5 windows the statistics hold about 7.7 windows of samples. A
//! JSON-like topic whose payload turns random leaves its codec for as sent after 27
//! windows (a candidate must save more than the margin over as sent, which the mixed
//! figures stop showing once the old ones fall to about 2% of the weight: 5 ×
//! log2(44) ≈ 27), and compresses again within a window when the payload does.
//! Each window's change test is a 2-standard-error one, so chance passes it now and
//! then: two equal candidates with 15% noise each and no paired figures changed 5
//! times in 2000 windows (49 without the test); `max_changes_per_hour` bounds the rest.

mod decide;
mod figures;
mod record;

pub use decide::{
    decide, CandidateExplanation, Choice, Decision, Explanation, Ineligible, Objective, Prices,
    Settings, DECAY_HALF_LIFE_WINDOWS_DEFAULT, EXACT_SEARCH_MAX, EXACT_SEARCH_TOPICS_MAX,
};
pub use figures::{decay_factor, pair_key, CandidateFigures, PairFigures, TopicFigures};
pub use record::{
    decode, encode_choice, encode_figures, ChoiceRecord, FleetRecord, FleetView, RecordError,
    RECORD_KEY_MAX, RECORD_VALUE_MAX, RECORD_VERSION,
};
