//! Measures what Kafka codecs and their options make of real records, without I/O:
//! callers pass bytes (dataset files, log segments), this crate builds the record
//! batches a producer would send, compresses and decompresses them with each
//! [`Candidate`], and reports sizes and one core's CPU time. `kpress bench`,
//! `kpress advise` and the proxy's shadow trials share it, so their figures agree.
//!
//! - [`lines`], [`sections`], [`sections_by_bytes`]: records sections from input, by
//!   records per batch (KIP-780 TestCompression's `--batch-size`) or by `batch.size`.
//! - [`read_segment`], [`segment_batches`]: a log segment's batches as stored, each
//!   checked and decompressed within bounds; damaged ones reported and skipped.
//! - [`trial`]: one candidate over sections, as a [`TrialResult`].
//! - [`matrix`], [`pareto_front`]: every useful codec setting, and the best trade-offs.
//! - [`render`]: results as a table, CSV, or the JSON other tools read.
//! - [`advice::regroup_by_bytes`]: a segment's records grouped again by `batch.size`.

pub mod advice;
mod clock;
mod error;
mod matrix;
pub mod render;
mod section;
mod segment;
mod trial;

pub use clock::thread_cpu_time;
pub use error::MeasureError;
pub use kpress_codec::{Candidate, Codec};
pub use matrix::{matrix, pareto_front};
pub use section::{cycle_to, lines, sections, sections_by_bytes, RecordsSection};
pub use segment::{
    read_segment, segment_batches, DamagedBatch, Segment, SegmentLimits, StoredBatch,
};
pub use trial::{decompress_stored, trial, TrialResult};
