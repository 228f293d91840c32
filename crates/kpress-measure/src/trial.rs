//! One candidate's compressed size and compress/decompress CPU time over sections.

use std::time::Duration;

use kpress_batch::HEADER_LEN;
use kpress_codec::{Candidate, Codec, Compressor, Decompressor};

use crate::clock::thread_cpu_time;
use crate::{MeasureError, RecordsSection};

/// One candidate measured over sections.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialResult {
    pub candidate: Candidate,
    pub batches: usize,
    pub records: u64,
    /// Sum of the uncompressed records sections.
    pub raw_bytes: u64,
    /// Sum of the whole record batches written: 61-byte header and compressed records.
    pub batch_bytes: u64,
    /// Thread CPU time compressing every section once (one core); the least of the passes.
    pub compress: Duration,
    /// Thread CPU time decompressing the output back; the least of the passes.
    pub decompress: Duration,
}

impl TrialResult {
    /// Compressed batches over the same batches uncompressed:
    /// `batch_bytes / (raw_bytes + 61 × batches)`, so `none` is 1.0 and the fixed
    /// header is counted on both sides, as the broker stores it.
    pub fn ratio(&self) -> f64 {
        let uncompressed = self.raw_bytes + (HEADER_LEN * self.batches) as u64;
        if uncompressed == 0 {
            return 1.0;
        }
        self.batch_bytes as f64 / uncompressed as f64
    }

    /// Records bytes (10^6) compressed per second of one core's CPU time.
    pub fn compress_mb_per_s(&self) -> f64 {
        mb_per_s(self.raw_bytes, self.compress)
    }

    /// Records bytes (10^6) decompressed per second of one core's CPU time.
    pub fn decompress_mb_per_s(&self) -> f64 {
        mb_per_s(self.raw_bytes, self.decompress)
    }

    /// Milliseconds of CPU compressing each 10^6 records bytes.
    pub fn compress_cpu_ms_per_mb(&self) -> f64 {
        if self.raw_bytes == 0 {
            return 0.0;
        }
        self.compress.as_secs_f64() * 1e3 / (self.raw_bytes as f64 / 1e6)
    }

    /// Average compressed batch, header included (TestCompression's "compressed size").
    pub fn avg_batch_bytes(&self) -> f64 {
        self.batch_bytes as f64 / self.batches.max(1) as f64
    }

    /// Average compress time per batch.
    pub fn avg_compress(&self) -> Duration {
        self.compress / self.batches.max(1) as u32
    }

    /// Average decompress time per batch.
    pub fn avg_decompress(&self) -> Duration {
        self.decompress / self.batches.max(1) as u32
    }
}

fn mb_per_s(bytes: u64, time: Duration) -> f64 {
    let seconds = time.as_secs_f64();
    if seconds <= 0.0 {
        // Below the clock's resolution: report as unmeasurably fast, not infinite.
        return 0.0;
    }
    bytes as f64 / 1e6 / seconds
}

/// Compresses every section with `candidate` and decompresses the result back,
/// `passes` times (at least once); times are the least total CPU time of the passes,
/// which a busy machine inflates least. Each output is checked to decompress to
/// exactly its input.
pub fn trial(
    candidate: &Candidate,
    sections: &[RecordsSection],
    passes: usize,
) -> Result<TrialResult, MeasureError> {
    if sections.is_empty() {
        return Err(MeasureError::NoRecords);
    }
    let codec = candidate.codec();
    let mut compressor = Compressor::new(codec, candidate.options());
    let mut decompressor = Decompressor::with_options(candidate.options());
    let mut compressed: Vec<Vec<u8>> = vec![Vec::new(); sections.len()];
    let mut decompressed = Vec::new();
    // One section's output back into `decompressed`, bounded by the section's size.
    let mut decompress_one = |section: &RecordsSection, payload: &[u8], into: &mut Vec<u8>| {
        into.clear();
        decompressor
            .decompress(codec, payload, section.records.len(), into)
            .map_err(|source| MeasureError::Decompress {
                candidate: candidate.clone(),
                source,
            })
    };
    let mut compress = Duration::MAX;
    let mut decompress = Duration::MAX;
    for _ in 0..passes.max(1) {
        let start = thread_cpu_time();
        for (section, out) in sections.iter().zip(&mut compressed) {
            out.clear();
            if codec == Codec::None {
                out.extend_from_slice(&section.records);
            } else {
                compressor
                    .compress(&section.records, out)
                    .map_err(|source| MeasureError::Compress {
                        candidate: candidate.clone(),
                        source,
                    })?;
            }
        }
        compress = compress.min(thread_cpu_time() - start);

        let start = thread_cpu_time();
        for (section, payload) in sections.iter().zip(&compressed) {
            decompress_one(section, payload, &mut decompressed)?;
        }
        decompress = decompress.min(thread_cpu_time() - start);
    }
    for (section, payload) in sections.iter().zip(&compressed) {
        decompress_one(section, payload, &mut decompressed)?;
        if decompressed != section.records {
            return Err(MeasureError::RoundTrip {
                candidate: candidate.clone(),
            });
        }
    }
    Ok(TrialResult {
        candidate: candidate.clone(),
        batches: sections.len(),
        records: sections.iter().map(|s| u64::from(s.count)).sum(),
        raw_bytes: sections.iter().map(|s| s.records.len() as u64).sum(),
        batch_bytes: compressed
            .iter()
            .map(|c| (HEADER_LEN + c.len()) as u64)
            .sum(),
        compress,
        decompress,
    })
}

/// The time to decompress stored batches' records as they are stored (`passes`
/// times, the least), e.g. a segment's: what a consumer pays to read them.
pub fn decompress_stored(
    stored: &[(Codec, &[u8], usize)],
    passes: usize,
) -> Result<Duration, kpress_codec::CodecError> {
    let mut decompressor = Decompressor::new();
    let mut out = Vec::new();
    let mut best = Duration::MAX;
    for _ in 0..passes.max(1) {
        let start = thread_cpu_time();
        for &(codec, payload, limit) in stored {
            out.clear();
            decompressor.decompress(codec, payload, limit, &mut out)?;
        }
        best = best.min(thread_cpu_time() - start);
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{lines, sections};

    fn sample() -> Vec<RecordsSection> {
        let text: String = (0..2000)
            .map(|i| {
                format!(
                    "127.0.0.1 - - GET /index.html?page={} HTTP/1.1 200\n",
                    i % 37
                )
            })
            .collect();
        let values: Vec<&[u8]> = lines(text.as_bytes()).collect();
        sections(&values, 50)
    }

    #[test]
    fn every_codec_round_trips_and_counts_sizes() {
        let sections = sample();
        let raw: u64 = sections.iter().map(|s| s.records.len() as u64).sum();
        for spec in [
            "none",
            "gzip:6",
            "snappy",
            "lz4:9",
            "lz4:17:block=7",
            "zstd:3",
            "zstd:-5",
        ] {
            let candidate: Candidate = spec.parse().unwrap();
            let r = trial(&candidate, &sections, 2).unwrap();
            assert_eq!(r.batches, 40, "{spec}");
            assert_eq!(r.records, 2000, "{spec}");
            assert_eq!(r.raw_bytes, raw, "{spec}");
            if spec == "none" {
                assert_eq!(r.ratio(), 1.0);
            } else {
                assert!(r.ratio() < 0.5, "{spec}: {}", r.ratio());
            }
            assert!(r.compress_mb_per_s() >= 0.0);
        }
    }

    #[test]
    fn ratio_counts_headers_on_both_sides() {
        let r = TrialResult {
            candidate: "zstd:3".parse().unwrap(),
            batches: 2,
            records: 4,
            raw_bytes: 878,
            batch_bytes: 500,
            compress: Duration::from_millis(2),
            decompress: Duration::from_millis(1),
        };
        assert!((r.ratio() - 0.5).abs() < 1e-12);
        assert!((r.compress_mb_per_s() - 0.439).abs() < 1e-9);
        assert!((r.compress_cpu_ms_per_mb() - 2.0 / 0.000878).abs() < 1e-6);
        assert_eq!(r.avg_batch_bytes(), 250.0);
    }

    #[test]
    fn no_sections_is_an_error() {
        let candidate: Candidate = "zstd:3".parse().unwrap();
        assert_eq!(trial(&candidate, &[], 1), Err(MeasureError::NoRecords));
    }
}
