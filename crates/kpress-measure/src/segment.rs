//! A Kafka log segment's batches as stored: codec, size, and their records
//! decompressed within bounds. Damaged batches are reported and skipped.

use std::fmt;

use kpress_batch::{
    batches, BatchError, Outcome, PassReason, RecompressMode, Recompressor, RecordBatch,
    RewritePolicy, DEFAULT_MAX_DECOMPRESSED_BYTES, DEFAULT_MAX_DECOMPRESSION_RATIO, HEADER_LEN,
};
use kpress_codec::{Codec, CompressionOptions};

use crate::{MeasureError, RecordsSection};

/// One stored batch: its codec, its whole size as stored, and its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    /// Byte position of the batch in the segment.
    pub position: usize,
    pub base_offset: i64,
    pub codec: Codec,
    /// The whole batch: 61-byte header and stored (compressed) records.
    pub stored_bytes: usize,
    pub section: RecordsSection,
}

/// A batch (or the segment's tail) that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedBatch {
    /// Byte position in the segment.
    pub position: usize,
    /// The batch's base offset, when its header could be read.
    pub base_offset: Option<i64>,
    pub reason: String,
}

impl fmt::Display for DamagedBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.base_offset {
            Some(offset) => write!(
                f,
                "batch at offset {offset} (byte {}): {}",
                self.position, self.reason
            ),
            None => write!(f, "bytes from {}: {}", self.position, self.reason),
        }
    }
}

/// Bounds on what reading a segment may decompress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentLimits {
    /// Most bytes one batch's records may decompress to.
    pub max_batch_records_bytes: usize,
    /// Most times its stored size one batch's records may inflate.
    pub max_decompression_ratio: usize,
    /// Most records bytes kept over the whole segment; batches after that are
    /// counted as skipped.
    pub max_total_records_bytes: usize,
}

impl Default for SegmentLimits {
    /// The proxy's per-batch bounds, and 1 GiB in all.
    fn default() -> Self {
        SegmentLimits {
            max_batch_records_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES,
            max_decompression_ratio: DEFAULT_MAX_DECOMPRESSION_RATIO,
            max_total_records_bytes: 1 << 30,
        }
    }
}

/// What [`read_segment`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segment {
    /// The data batches read, in segment order.
    pub batches: Vec<StoredBatch>,
    /// Batches that are damaged or could not be decompressed within the limits.
    pub damaged: Vec<DamagedBatch>,
    /// Sound batches that hold no data records (control batches, empty batches), and
    /// those past [`SegmentLimits::max_total_records_bytes`].
    pub skipped: usize,
}

/// The data batches of `segment` (concatenated v2 record batches, as in a partition's
/// `.log` file), with [`SegmentLimits::default`]. Damaged batches are left out; use
/// [`read_segment`] to see which and why. Fails only when no batch could be read.
pub fn segment_batches(segment: &[u8]) -> Result<Vec<StoredBatch>, MeasureError> {
    let read = read_segment(segment, SegmentLimits::default());
    if read.batches.is_empty() {
        return Err(MeasureError::NoBatches {
            damaged: read.damaged.len(),
            skipped: read.skipped,
        });
    }
    Ok(read.batches)
}

/// Reads every batch of `segment`. Each is checked as the proxy checks a batch before
/// rewriting it (CRC, counts, codec, bounded decompression, exactly `recordsCount`
/// records), by kpress-batch's own rewrite to uncompressed.
pub fn read_segment(segment: &[u8], limits: SegmentLimits) -> Segment {
    let policy = RewritePolicy {
        mode: RecompressMode::Always,
        max_batch_bytes: usize::MAX,
        max_decompressed_bytes: limits.max_batch_records_bytes,
        max_decompression_ratio: limits.max_decompression_ratio,
        ..RewritePolicy::to_codec(Codec::None, CompressionOptions::default())
    };
    let mut recompressor = Recompressor::new();
    let mut read = Segment::default();
    let mut total_records = 0usize;
    let mut iter = batches(segment);
    let mut rewritten = Vec::new();
    loop {
        let position = segment.len() - iter.remainder().len();
        let Some(next) = iter.next() else { break };
        let batch = match next {
            Ok(batch) => batch,
            Err(err) => {
                read.damaged.push(DamagedBatch {
                    position,
                    base_offset: base_offset_of(&segment[position..]),
                    reason: framing_reason(&err),
                });
                continue;
            }
        };
        let damaged = |reason: String| DamagedBatch {
            position,
            base_offset: Some(batch.base_offset()),
            reason,
        };
        rewritten.clear();
        let records: &[u8] =
            match recompressor.rewrite_batch(batch.bytes(), &policy, &mut rewritten) {
                Outcome::Rewritten { .. } => &rewritten[HEADER_LEN..],
                // An uncompressed batch has passed every check but the record count.
                Outcome::PassedThrough(PassReason::SameCodec) => batch.records(),
                Outcome::PassedThrough(PassReason::ControlBatch | PassReason::EmptyBatch) => {
                    read.skipped += 1;
                    continue;
                }
                Outcome::PassedThrough(reason) => {
                    let detail = recompressor
                        .take_codec_error()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default();
                    read.damaged
                        .push(damaged(format!("{}{detail}", describe(reason, &batch))));
                    continue;
                }
            };
        if total_records + records.len() > limits.max_total_records_bytes {
            read.skipped += 1;
            continue;
        }
        total_records += records.len();
        read.batches.push(StoredBatch {
            position,
            base_offset: batch.base_offset(),
            codec: batch.codec().unwrap_or(Codec::None),
            stored_bytes: batch.bytes().len(),
            section: RecordsSection {
                records: records.to_vec(),
                count: u32::try_from(batch.records_count()).unwrap_or(0),
            },
        });
    }
    read
}

fn base_offset_of(bytes: &[u8]) -> Option<i64> {
    let first: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some(i64::from_be_bytes(first))
}

fn framing_reason(err: &BatchError) -> String {
    match err {
        BatchError::NotMagicV2 { .. } => format!("{err} (a pre-0.11 message set entry)"),
        _ => err.to_string(),
    }
}

fn describe(reason: PassReason, batch: &RecordBatch<'_>) -> String {
    match reason {
        PassReason::CrcMismatch => format!(
            "CRC mismatch: stored {:#010x}, computed {:#010x}",
            batch.crc(),
            batch.computed_crc()
        ),
        PassReason::Malformed => format!(
            "malformed: recordsCount {} with lastOffsetDelta {}",
            batch.records_count(),
            batch.last_offset_delta()
        ),
        PassReason::UnknownCodec => {
            format!("unknown codec id {}", batch.attributes() & 0x07)
        }
        PassReason::DecompressLimit => "records decompress beyond the per-batch limit".into(),
        PassReason::DecompressRatio => {
            "records inflate beyond the decompression ratio limit".into()
        }
        PassReason::RecordCountMismatch => format!(
            "records are not exactly the {} records the header declares",
            batch.records_count()
        ),
        other => other.as_str().replace('_', " "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_batch::builder::{BatchBuilder, Record};

    fn batch(codec: Codec, base_offset: i64, values: &[&str]) -> Vec<u8> {
        let records: Vec<Record> = values.iter().map(|v| Record::value(v.as_bytes())).collect();
        BatchBuilder {
            base_offset,
            ..BatchBuilder::codec(codec)
        }
        .build(&records)
        .unwrap()
    }

    #[test]
    fn reads_each_codec_as_stored() {
        let mut segment = Vec::new();
        let codecs = [
            Codec::None,
            Codec::Gzip,
            Codec::Snappy,
            Codec::Lz4,
            Codec::Zstd,
        ];
        for (i, codec) in codecs.into_iter().enumerate() {
            segment.extend(batch(codec, 2 * i as i64, &["hello hello hello", "world"]));
        }
        let got = segment_batches(&segment).unwrap();
        assert_eq!(got.len(), 5);
        let plain = kpress_batch::builder::encode_records(&[
            Record::value(&b"hello hello hello"[..]),
            Record::value(&b"world"[..]),
        ]);
        for (b, codec) in got.iter().zip(codecs) {
            assert_eq!(b.codec, codec);
            assert_eq!(b.section.records, plain);
            assert_eq!(b.section.count, 2);
        }
        assert_eq!(
            got.iter().map(|b| b.stored_bytes).sum::<usize>(),
            segment.len()
        );
        assert_eq!(got[3].base_offset, 6);
    }

    #[test]
    fn damaged_batches_are_reported_with_offset_and_reason_and_skipped() {
        let good = batch(Codec::Zstd, 0, &["a", "b"]);
        let mut bad_crc = batch(Codec::Gzip, 2, &["c", "d"]);
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 0xff;
        let mut bad_payload = batch(Codec::Lz4, 4, &["e", "f"]);
        // Garbage in place of the lz4 frame, sealed with a matching CRC.
        for b in &mut bad_payload[HEADER_LEN..] {
            *b = 0xAB;
        }
        kpress_batch::builder::seal(&mut bad_payload);
        let also_good = batch(Codec::Snappy, 6, &["g"]);
        let truncated = batch(Codec::None, 7, &["h"]);
        let mut segment = [good, bad_crc, bad_payload, also_good].concat();
        segment.extend_from_slice(&truncated[..truncated.len() - 3]);

        let read = read_segment(&segment, SegmentLimits::default());
        let offsets: Vec<i64> = read.batches.iter().map(|b| b.base_offset).collect();
        assert_eq!(offsets, [0, 6]);
        let damaged: Vec<String> = read.damaged.iter().map(|d| d.to_string()).collect();
        assert_eq!(damaged.len(), 3, "{damaged:?}");
        assert!(damaged[0].starts_with("batch at offset 2 "), "{damaged:?}");
        assert!(damaged[0].contains("CRC mismatch"), "{damaged:?}");
        assert!(damaged[1].starts_with("batch at offset 4 "), "{damaged:?}");
        assert!(damaged[1].contains("decompress failed"), "{damaged:?}");
        assert!(damaged[2].contains("truncated"), "{damaged:?}");
    }

    #[test]
    fn decompression_is_bounded() {
        let big = "x".repeat(100_000);
        let segment = batch(Codec::Zstd, 0, &[&big]);
        let limits = SegmentLimits {
            max_batch_records_bytes: 10_000,
            ..SegmentLimits::default()
        };
        let read = read_segment(&segment, limits);
        assert!(read.batches.is_empty());
        assert!(
            read.damaged[0].reason.contains("limit"),
            "{:?}",
            read.damaged
        );
        let limits = SegmentLimits {
            max_total_records_bytes: 10_000,
            max_decompression_ratio: usize::MAX,
            ..SegmentLimits::default()
        };
        let read = read_segment(&[segment.clone(), segment].concat(), limits);
        assert_eq!((read.batches.len(), read.skipped), (0, 2));
    }

    #[test]
    fn garbage_is_no_batch_and_no_panic() {
        for garbage in [&b""[..], b"\x00", &[0xff; 100], &[0; 61]] {
            let read = read_segment(garbage, SegmentLimits::default());
            assert!(read.batches.is_empty());
            assert!(segment_batches(garbage).is_err());
        }
    }
}
