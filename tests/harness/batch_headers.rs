//! What a partition stores, batch by batch, without its records: Kafka's
//! DumpLogSegments over every segment of a partition without `--deep-iteration`, so it
//! reads and CRC-checks each batch but prints only its header. A load run's gigabytes
//! of records stay unprinted; what is left is enough to say which codec every stored
//! batch is in, whether each is valid, and how many records and bytes they hold.

use crate::dump::{run_dump_log_segments, DumpedBatch};
use crate::KafkaCluster;
use anyhow::{ensure, Context};
use std::collections::BTreeMap;
use std::path::Path;

/// The batches of one partition, summed up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredBatches {
    /// Data batches (not control batches) by DumpLogSegments' `compresscodec` name.
    pub batches_by_codec: BTreeMap<String, u64>,
    /// Data batches whose CRC did not match (`isvalid: false`).
    pub invalid_batches: u64,
    /// Records in the data batches.
    pub records: u64,
    /// Bytes of the data batches as stored (each batch's `size`, header included).
    pub bytes: u64,
    /// Lines DumpLogSegments printed that are neither a batch nor a header.
    pub problems: Vec<String>,
}

impl StoredBatches {
    fn add(&mut self, batch: &DumpedBatch) {
        if batch.is_control {
            return;
        }
        *self
            .batches_by_codec
            .entry(batch.compresscodec.clone())
            .or_default() += 1;
        if !batch.is_valid {
            self.invalid_batches += 1;
        }
        self.records += u64::try_from(batch.count).unwrap_or(0);
        self.bytes += u64::try_from(batch.size).unwrap_or(0);
    }

    /// Data batches stored in a codec other than `codec` (a DumpLogSegments name, as
    /// [`Compression::dump_name`](crate::Compression::dump_name) gives).
    pub fn batches_not_in(&self, codec: &str) -> u64 {
        self.batches_by_codec
            .iter()
            .filter(|(name, _)| name.as_str() != codec)
            .map(|(_, n)| n)
            .sum()
    }

    /// "1234 zstd, 2 gzip" (every codec found, most batches first).
    pub fn codecs(&self) -> String {
        let mut by_count: Vec<(&String, &u64)> = self.batches_by_codec.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = by_count.iter().map(|(c, n)| format!("{n} {c}")).collect();
        if parts.is_empty() {
            "no batches".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// [`StoredBatches`] of partition 0 of each of `topics` (first node hosting it), in
/// `topics` order, with one DumpLogSegments JVM for all of them.
pub fn stored_batches(
    cluster: &KafkaCluster,
    topics: &[&str],
) -> anyhow::Result<Vec<StoredBatches>> {
    let mut segments_of: Vec<Vec<std::path::PathBuf>> = Vec::new();
    for topic in topics {
        let segments = cluster.segments(topic, 0)?;
        ensure!(!segments.is_empty(), "no segment of {topic}-0");
        segments_of.push(segments);
    }
    let files: Vec<&Path> = segments_of.iter().flatten().map(|p| p.as_path()).collect();
    let mut dumped = dump_headers(cluster.version(), &files)?;
    segments_of
        .iter()
        .map(|segments| {
            let mut stored = StoredBatches::default();
            for segment in segments {
                let text = segment.display().to_string();
                let dump = dumped
                    .remove(&text)
                    .with_context(|| format!("DumpLogSegments did not dump {text}"))?;
                dump.batches.iter().for_each(|b| stored.add(b));
                stored
                    .problems
                    .extend(dump.problems.iter().map(|p| format!("{text}: {p}")));
            }
            Ok(stored)
        })
        .collect()
}

/// DumpLogSegments' batch headers of `segments`, by the path it printed.
fn dump_headers(
    version: &str,
    segments: &[&Path],
) -> anyhow::Result<BTreeMap<String, crate::dump::DumpedSegment>> {
    Ok(run_dump_log_segments(version, segments, &[])?
        .into_iter()
        .map(|d| (d.path.display().to_string(), d))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::parse_dump;

    #[test]
    fn sums_data_batches_by_codec() {
        let text = "Dumping /x/00000000000000000000.log\n\
Log starting offset: 0\n\
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1 size: 100 magic: 2 compresscodec: zstd crc: 1 isvalid: true\n\
baseOffset: 2 lastOffset: 4 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 100 CreateTime: 1 size: 50 magic: 2 compresscodec: gzip crc: 2 isvalid: false\n\
baseOffset: 5 lastOffset: 5 count: 1 baseSequence: -1 lastSequence: -1 producerId: 7 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty position: 150 CreateTime: 1 size: 78 magic: 2 compresscodec: none crc: 3 isvalid: true\n";
        let mut stored = StoredBatches::default();
        for segment in parse_dump(text).unwrap() {
            segment.batches.iter().for_each(|b| stored.add(b));
        }
        assert_eq!((stored.records, stored.bytes), (5, 150));
        assert_eq!(stored.invalid_batches, 1);
        assert_eq!(stored.batches_not_in("zstd"), 1);
        assert_eq!(stored.codecs(), "1 gzip, 1 zstd");
    }
}
