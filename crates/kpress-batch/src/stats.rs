//! What a rewrite did with each batch, and counts of it for metrics and summaries.

use kpress_codec::Codec;
use std::fmt;

/// What [`Recompressor::rewrite_batch`](crate::Recompressor::rewrite_batch) appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A recompressed batch of `bytes_out` bytes replaced the `bytes_in`-byte original.
    Rewritten {
        from: Codec,
        to: Codec,
        bytes_in: usize,
        bytes_out: usize,
    },
    /// The original bytes, untouched.
    PassedThrough(PassReason),
}

impl Outcome {
    /// A rewrite kept although it is larger than the original: the policy's codec is
    /// stored whatever its size unless `only_if_smaller`, and operators count these.
    pub fn grew(&self) -> bool {
        matches!(*self, Outcome::Rewritten { bytes_in, bytes_out, .. } if bytes_out > bytes_in)
    }
}

/// Why a batch went through untouched.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PassReason {
    /// The policy keeps the producer's codec.
    PolicyProducer,
    /// Already in the target codec and the mode is `codec-differs`.
    SameCodec,
    /// A magic 0/1 message set entry.
    NotMagicV2,
    ControlBatch,
    /// `recordsCount` is 0.
    EmptyBatch,
    /// Cannot be framed, or its counts disagree (`lastOffsetDelta + 1 != recordsCount`).
    Malformed,
    /// The stored CRC does not match: never rewrite (and so launder) corruption.
    CrcMismatch,
    /// Codec id 5-7.
    UnknownCodec,
    DecompressFailed,
    /// The records decompress to more than `max_decompressed_bytes`.
    DecompressLimit,
    /// The records are not exactly `recordsCount` length-prefixed records.
    RecordCountMismatch,
    CompressFailed,
    /// The rewrite was not smaller and the policy says `only_if_smaller`.
    NotSmaller,
    /// The rewrite is larger than `max_batch_bytes`.
    OverBatchLimit,
    /// The target is zstd but the request does not allow it (Produce v3-v6: the broker
    /// refuses zstd there with UNSUPPORTED_COMPRESSION_TYPE), so old clients keep their
    /// codec.
    ZstdNeedsProduceV7,
    /// The partition's records hold more than one batch; Produce v3+ allows exactly
    /// one, so the broker refuses the partition and kpress decodes none of them.
    MultipleBatches,
    /// The Produce request's batches already decompressed to
    /// `max_request_decompressed_bytes` together.
    RequestDecompressBudget,
    /// The records would inflate more than `max_decompression_ratio` times their
    /// compressed size.
    DecompressRatio,
    /// The target is the topic's own configuration and its lookup has not answered
    /// yet: batches never wait for it.
    TopicConfigPending,
    /// The target is the topic's own configuration and kpress may not read it (the
    /// broker answered an authorization error).
    TopicConfigDenied,
    /// The target is the topic's own configuration and kpress could not learn it (a
    /// timeout, a broker without DescribeConfigs, a value kpress does not take).
    TopicConfigUnavailable,
}

impl PassReason {
    pub const ALL: [PassReason; 21] = [
        PassReason::PolicyProducer,
        PassReason::SameCodec,
        PassReason::NotMagicV2,
        PassReason::ControlBatch,
        PassReason::EmptyBatch,
        PassReason::Malformed,
        PassReason::CrcMismatch,
        PassReason::UnknownCodec,
        PassReason::DecompressFailed,
        PassReason::DecompressLimit,
        PassReason::RecordCountMismatch,
        PassReason::CompressFailed,
        PassReason::NotSmaller,
        PassReason::OverBatchLimit,
        PassReason::ZstdNeedsProduceV7,
        PassReason::MultipleBatches,
        PassReason::RequestDecompressBudget,
        PassReason::DecompressRatio,
        PassReason::TopicConfigPending,
        PassReason::TopicConfigDenied,
        PassReason::TopicConfigUnavailable,
    ];

    /// snake_case label for metrics and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            PassReason::PolicyProducer => "policy_producer",
            PassReason::SameCodec => "same_codec",
            PassReason::NotMagicV2 => "not_magic_v2",
            PassReason::ControlBatch => "control_batch",
            PassReason::EmptyBatch => "empty_batch",
            PassReason::Malformed => "malformed",
            PassReason::CrcMismatch => "crc_mismatch",
            PassReason::UnknownCodec => "unknown_codec",
            PassReason::DecompressFailed => "decompress_failed",
            PassReason::DecompressLimit => "decompress_limit",
            PassReason::RecordCountMismatch => "record_count_mismatch",
            PassReason::CompressFailed => "compress_failed",
            PassReason::NotSmaller => "not_smaller",
            PassReason::OverBatchLimit => "over_batch_limit",
            PassReason::ZstdNeedsProduceV7 => "zstd_needs_produce_v7",
            PassReason::MultipleBatches => "multiple_batches",
            PassReason::RequestDecompressBudget => "request_decompress_budget",
            PassReason::DecompressRatio => "decompress_ratio",
            PassReason::TopicConfigPending => "topic_config_pending",
            PassReason::TopicConfigDenied => "topic_config_denied",
            PassReason::TopicConfigUnavailable => "topic_config_unavailable",
        }
    }

    /// Position in [`ALL`](Self::ALL) (and in [`RewriteStats::passed`]).
    pub fn index(self) -> usize {
        // Declaration order is ALL's order.
        self as usize
    }
}

impl fmt::Display for PassReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counts of outcomes over many batches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewriteStats {
    pub batches_rewritten: u64,
    /// Of `batches_rewritten`, those that came out larger ([`Outcome::grew`]).
    pub batches_grown: u64,
    /// Batches passed through, indexed by [`PassReason::index`].
    pub passed: [u64; PassReason::ALL.len()],
    /// Bytes of every batch (and unparseable tail) seen.
    pub bytes_in: u64,
    /// Bytes written for them, rewritten or passed through.
    pub bytes_out: u64,
}

impl RewriteStats {
    /// Counts one batch of `input_len` bytes that ended with `outcome`.
    pub fn add(&mut self, outcome: &Outcome, input_len: usize) {
        self.bytes_in += input_len as u64;
        match *outcome {
            Outcome::Rewritten { bytes_out, .. } => {
                self.batches_rewritten += 1;
                self.batches_grown += u64::from(outcome.grew());
                self.bytes_out += bytes_out as u64;
            }
            Outcome::PassedThrough(reason) => {
                self.passed[reason.index()] += 1;
                self.bytes_out += input_len as u64;
            }
        }
    }

    pub fn merge(&mut self, other: &RewriteStats) {
        self.batches_rewritten += other.batches_rewritten;
        self.batches_grown += other.batches_grown;
        for (mine, theirs) in self.passed.iter_mut().zip(other.passed) {
            *mine += theirs;
        }
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
    }

    pub fn passed_for(&self, reason: PassReason) -> u64 {
        self.passed[reason.index()]
    }

    pub fn batches_passed(&self) -> u64 {
        self.passed.iter().sum()
    }

    pub fn batches(&self) -> u64 {
        self.batches_rewritten + self.batches_passed()
    }

    /// Every reason with its count, zeros included, in [`PassReason::ALL`] order.
    pub fn passed_by_reason(&self) -> impl Iterator<Item = (PassReason, u64)> + '_ {
        PassReason::ALL
            .into_iter()
            .map(|r| (r, self.passed[r.index()]))
    }

    /// `bytes_out / bytes_in`, or 1 when nothing was seen.
    pub fn ratio(&self) -> f64 {
        if self.bytes_in == 0 {
            1.0
        } else {
            self.bytes_out as f64 / self.bytes_in as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_index_their_position_and_labels_are_unique() {
        for (i, r) in PassReason::ALL.into_iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        let mut labels: Vec<_> = PassReason::ALL.iter().map(|r| r.as_str()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), PassReason::ALL.len());
    }

    #[test]
    fn stats_add_and_merge() {
        let mut a = RewriteStats::default();
        a.add(
            &Outcome::Rewritten {
                from: Codec::Gzip,
                to: Codec::Zstd,
                bytes_in: 100,
                bytes_out: 60,
            },
            100,
        );
        a.add(&Outcome::PassedThrough(PassReason::CrcMismatch), 40);
        let grown = Outcome::Rewritten {
            from: Codec::Zstd,
            to: Codec::Lz4,
            bytes_in: 50,
            bytes_out: 70,
        };
        assert!(grown.grew());
        a.add(&grown, 50);
        let mut b = a.clone();
        b.merge(&a);
        assert_eq!((b.batches_rewritten, b.batches_grown), (4, 2));
        assert_eq!(b.passed_for(PassReason::CrcMismatch), 2);
        assert_eq!(b.batches(), 6);
        assert_eq!((b.bytes_in, b.bytes_out), (380, 340));
        assert_eq!(b.passed_by_reason().filter(|(_, n)| *n > 0).count(), 1);
        assert!((a.ratio() - 170.0 / 190.0).abs() < 1e-9);
        assert!(!Outcome::PassedThrough(PassReason::NotSmaller).grew());
    }
}
