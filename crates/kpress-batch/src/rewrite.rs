//! Recompressing one batch (or every batch of a records field) into a policy's codec.
//!
//! Copies per payload byte on the rewrite path: one decompression into a reused scratch
//! buffer (none for an uncompressed source: the records slice is read in place), one
//! compression straight into `out` behind the copied 61-byte header. Only the header's
//! codec bits, length and CRC are patched afterwards, the CRC last. A batch that is not
//! rewritten costs one copy of its bytes into `out`.

use crate::batch::{
    crc32c, ATTRIBUTES_OFFSET, CODEC_MASK, CRC_OFFSET, CRC_START, HEADER_LEN, LENGTH_OFFSET,
    LOG_OVERHEAD,
};
use crate::records::{crc_and_holds_exactly, holds_exactly};
use crate::{BatchError, Outcome, PassReason, RecompressMode, RecordBatch, RewritePolicy};
use crate::{RewriteStats, Target};
use kpress_codec::{Codec, CodecError, CompressionOptions, Compressor, Decompressor};

/// Scratch capacity kept between batches: a few of Kafka's default 1 MiB batches.
const SCRATCH_KEEP_BYTES: usize = 8 << 20;

/// What one Produce request allows its batches: whether they may be written in zstd (its
/// version says; the protocol crate knows which versions), and the decompressed bytes
/// all its batches may still use together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAllowance {
    allows_zstd: bool,
    decompressed_bytes_left: usize,
}

impl ProduceAllowance {
    /// A request whose batches may be written in zstd if `allows_zstd`, and may
    /// decompress to `max_request_decompressed_bytes` together.
    pub fn new(allows_zstd: bool, max_request_decompressed_bytes: usize) -> ProduceAllowance {
        ProduceAllowance {
            allows_zstd,
            decompressed_bytes_left: max_request_decompressed_bytes,
        }
    }

    /// Decompressed bytes the request's remaining batches may still use.
    pub fn decompressed_bytes_left(&self) -> usize {
        self.decompressed_bytes_left
    }

    fn allows(&self, codec: Codec) -> bool {
        codec != Codec::Zstd || self.allows_zstd
    }
}

/// The tightest bound on one batch's decompressed size, and which limit it is.
fn decompress_bound(
    policy: &RewritePolicy,
    compressed_len: usize,
    request: Option<&ProduceAllowance>,
) -> (usize, PassReason) {
    let mut bound = (policy.max_decompressed_bytes, PassReason::DecompressLimit);
    let by_ratio = compressed_len.saturating_mul(policy.max_decompression_ratio);
    if by_ratio < bound.0 {
        bound = (by_ratio, PassReason::DecompressRatio);
    }
    if let Some(request) = request {
        if request.decompressed_bytes_left < bound.0 {
            bound = (
                request.decompressed_bytes_left,
                PassReason::RequestDecompressBudget,
            );
        }
    }
    bound
}

/// Rewrites batches, keeping codec state and buffers between calls. One per thread.
#[derive(Debug, Default)]
pub struct Recompressor {
    /// Reads gzip input through the topic policy's `compression.gzip.provider`.
    decompressor: Decompressor,
    /// One per (codec, options) seen; policies are few, so a linear scan is enough.
    compressors: Vec<Compressor>,
    scratch: Vec<u8>,
    /// The codec's error behind the last `DecompressFailed` or `CompressFailed`
    /// outcome, kept aside so an [`Outcome`] stays `Copy` and the success path
    /// allocates nothing for it.
    codec_error: Option<CodecError>,
}

impl Recompressor {
    pub fn new() -> Self {
        Recompressor::default()
    }

    /// Drops the compressors whose (codec, options) `keep` refuses, with their state
    /// (up to hundreds of MiB at high zstd levels); called when the policy changes.
    pub fn retain_compressors(&mut self, keep: impl Fn(Codec, &CompressionOptions) -> bool) {
        self.compressors.retain(|c| keep(c.codec(), c.options()));
    }

    /// The codec's error text behind the last [`PassReason::DecompressFailed`] or
    /// [`PassReason::CompressFailed`] outcome, once: for logs.
    pub fn take_codec_error(&mut self) -> Option<CodecError> {
        self.codec_error.take()
    }

    /// Compressors held, one per (codec, options) used since they were last dropped.
    pub fn compressors_held(&self) -> usize {
        self.compressors.len()
    }

    /// Appends to `out` either the rewritten batch or the original bytes, and says which.
    ///
    /// `batch` must be exactly one batch: bytes after the one its length field frames
    /// make it [`PassReason::Malformed`] (use [`rewrite_records`](Self::rewrite_records)
    /// for a records field).
    pub fn rewrite_batch(
        &mut self,
        batch: &[u8],
        policy: &RewritePolicy,
        out: &mut Vec<u8>,
    ) -> Outcome {
        self.rewrite_one(batch, policy, None, PassReason::Malformed, out)
    }

    /// Rewrites `bytes` if they are exactly one batch, else copies them with the
    /// reason: `after_first` when a whole batch is followed by more bytes.
    fn rewrite_one(
        &mut self,
        bytes: &[u8],
        policy: &RewritePolicy,
        request: Option<&mut ProduceAllowance>,
        after_first: PassReason,
        out: &mut Vec<u8>,
    ) -> Outcome {
        match framed_alone(bytes, after_first) {
            Ok(batch) => self.rewrite_parsed(batch, policy, request, out),
            Err(reason) => {
                out.extend_from_slice(bytes);
                Outcome::PassedThrough(reason)
            }
        }
    }

    /// [`rewrite_batch`](Self::rewrite_batch) for a batch already framed.
    fn rewrite_parsed(
        &mut self,
        batch: RecordBatch<'_>,
        policy: &RewritePolicy,
        request: Option<&mut ProduceAllowance>,
        out: &mut Vec<u8>,
    ) -> Outcome {
        let start = out.len();
        let outcome = match self.try_rewrite(batch, policy, request, out) {
            Ok(outcome) => outcome,
            Err(reason) => {
                out.truncate(start);
                out.extend_from_slice(batch.bytes());
                Outcome::PassedThrough(reason)
            }
        };
        // One huge batch must not pin up to max_decompressed_bytes per Recompressor.
        if self.scratch.capacity() > SCRATCH_KEEP_BYTES {
            self.scratch = Vec::new();
        }
        outcome
    }

    /// Rewrites every batch of a records field (or log segment) into `out`; magic 0/1
    /// entries and any unparseable tail are copied untouched.
    pub fn rewrite_records(
        &mut self,
        records: &[u8],
        policy: &RewritePolicy,
        out: &mut Vec<u8>,
        stats: &mut RewriteStats,
    ) {
        self.rewrite_each(records, policy, out, |outcome, size| {
            stats.add(outcome, size)
        });
    }

    /// Like [`rewrite_records`](Self::rewrite_records), reporting each batch's outcome
    /// and input size to `on_batch` instead of adding them up.
    pub fn rewrite_each(
        &mut self,
        records: &[u8],
        policy: &RewritePolicy,
        out: &mut Vec<u8>,
        mut on_batch: impl FnMut(&Outcome, usize),
    ) {
        let mut rest = records;
        while !rest.is_empty() {
            let (size, outcome) = match RecordBatch::parse(rest) {
                Ok(batch) => (
                    batch.bytes().len(),
                    self.rewrite_parsed(batch, policy, None, out),
                ),
                Err(BatchError::NotMagicV2 { size, .. }) => {
                    out.extend_from_slice(&rest[..size]);
                    (size, Outcome::PassedThrough(PassReason::NotMagicV2))
                }
                // An unparseable tail goes on as is; the broker answers for it.
                Err(_) => {
                    out.extend_from_slice(rest);
                    (rest.len(), Outcome::PassedThrough(PassReason::Malformed))
                }
            };
            on_batch(&outcome, size);
            rest = &rest[size..];
        }
    }

    /// Rewrites one partition's records field of a Produce request (v3+), within what
    /// the request allows: a field of more than one batch goes on untouched as one
    /// [`PassReason::MultipleBatches`] outcome (the broker refuses it, so decoding any
    /// of it would be wasted), zstd is not written where the request does not allow it, and
    /// decompression counts against the request's budget. Reports the outcome and
    /// input size to `on_batch`.
    pub fn rewrite_partition(
        &mut self,
        records: &[u8],
        policy: &RewritePolicy,
        request: &mut ProduceAllowance,
        out: &mut Vec<u8>,
        mut on_batch: impl FnMut(&Outcome, usize),
    ) {
        let outcome = self.rewrite_one(
            records,
            policy,
            Some(request),
            PassReason::MultipleBatches,
            out,
        );
        on_batch(&outcome, records.len());
    }

    /// Writes the rewrite into `out` or says why not; the caller undoes partial output.
    fn try_rewrite(
        &mut self,
        batch: RecordBatch<'_>,
        policy: &RewritePolicy,
        request: Option<&mut ProduceAllowance>,
        out: &mut Vec<u8>,
    ) -> Result<Outcome, PassReason> {
        let input = batch.bytes();
        let (from, to, options) = verdict_before_codec(&batch, policy, request.as_deref())?;
        let count = batch.records_count();

        let records = if from == Codec::None {
            // The record walk rides on the CRC's pass over the bytes (`count` is
            // positive here).
            let (crc, holds) =
                crc_and_holds_exactly(&input[CRC_START..], HEADER_LEN - CRC_START, count as usize);
            if crc != batch.crc() {
                return Err(PassReason::CrcMismatch);
            }
            if !holds {
                return Err(PassReason::RecordCountMismatch);
            }
            batch.records()
        } else {
            if !batch.crc_is_valid() {
                return Err(PassReason::CrcMismatch);
            }
            self.scratch.clear();
            if from == Codec::Gzip {
                self.decompressor.set_gzip_provider(options.gzip_provider());
            }
            let (limit, over_limit) =
                decompress_bound(policy, batch.records().len(), request.as_deref());
            let decoded =
                self.decompressor
                    .decompress(from, batch.records(), limit, &mut self.scratch);
            // Work done counts against the request whether or not the batch decoded.
            if let Some(request) = request {
                let spent = match &decoded {
                    Ok(n) => *n,
                    Err(CodecError::LimitExceeded { .. }) => limit,
                    Err(_) => self.scratch.len(),
                };
                request.decompressed_bytes_left =
                    request.decompressed_bytes_left.saturating_sub(spent);
            }
            if let Err(err) = decoded {
                if let CodecError::LimitExceeded { .. } = err {
                    return Err(over_limit);
                }
                self.codec_error = Some(err);
                return Err(PassReason::DecompressFailed);
            }
            // `count` is positive here.
            if !holds_exactly(&self.scratch, count as usize) {
                return Err(PassReason::RecordCountMismatch);
            }
            &self.scratch
        };

        let start = out.len();
        out.extend_from_slice(&input[..HEADER_LEN]);
        if to == Codec::None {
            out.extend_from_slice(records);
        } else {
            if let Err(err) =
                compressor_for(&mut self.compressors, to, options).compress(records, out)
            {
                self.codec_error = Some(err);
                return Err(PassReason::CompressFailed);
            }
        }
        let bytes_out = out.len() - start;
        if bytes_out > policy.max_batch_bytes {
            return Err(PassReason::OverBatchLimit);
        }
        // The user asked for uncompressed output, so its growth is expected.
        if policy.only_if_smaller && bytes_out >= input.len() && to != Codec::None {
            return Err(PassReason::NotSmaller);
        }
        let length =
            i32::try_from(bytes_out - LOG_OVERHEAD).map_err(|_| PassReason::OverBatchLimit)?;

        let written = &mut out[start..];
        written[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&length.to_be_bytes());
        let attributes = (batch.attributes() & !CODEC_MASK) | to.id();
        written[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2]
            .copy_from_slice(&attributes.to_be_bytes());
        let crc = crc32c(&written[CRC_START..]);
        written[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(Outcome::Rewritten {
            from,
            to,
            bytes_in: input.len(),
            bytes_out,
        })
    }
}

/// Why [`Recompressor::rewrite_partition`] would forward `records` (one partition's
/// field of a Produce request) untouched, when its framing, header and CRC tell that
/// without decoding or encoding anything; `None` when deciding takes codec work (the
/// batch may still be passed through after it). Nothing of `request` is spent.
pub fn pass_without_codec_work(
    records: &[u8],
    policy: &RewritePolicy,
    request: &ProduceAllowance,
) -> Option<PassReason> {
    match framed_alone(records, PassReason::MultipleBatches) {
        Ok(batch) => verdict_before_codec(&batch, policy, Some(request)).err(),
        Err(reason) => Some(reason),
    }
}

/// `bytes` as exactly one batch, or why not: `after_first` when a whole batch is
/// followed by more bytes.
fn framed_alone(bytes: &[u8], after_first: PassReason) -> Result<RecordBatch<'_>, PassReason> {
    match RecordBatch::parse(bytes) {
        Ok(parsed) if parsed.bytes().len() == bytes.len() => Ok(parsed),
        Ok(_) => Err(after_first),
        Err(BatchError::NotMagicV2 { .. }) => Err(PassReason::NotMagicV2),
        Err(_) => Err(PassReason::Malformed),
    }
}

/// The source codec, target codec and options of a batch that takes codec work, or
/// why it is kept as sent, as far as what precedes the codec tells.
fn verdict_before_codec<'p>(
    batch: &RecordBatch<'_>,
    policy: &'p RewritePolicy,
    request: Option<&ProduceAllowance>,
) -> Result<(Codec, Codec, &'p CompressionOptions), PassReason> {
    if batch.is_control() {
        return Err(PassReason::ControlBatch);
    }
    let count = batch.records_count();
    if count == 0 {
        return Err(PassReason::EmptyBatch);
    }
    if count < 0 || i64::from(batch.last_offset_delta()) + 1 != i64::from(count) {
        return Err(PassReason::Malformed);
    }
    // Reasons found in the header alone still rank below a CRC mismatch.
    match header_verdict(batch, policy, request) {
        Ok(verdict) => Ok(verdict),
        Err(reason) if batch.crc_is_valid() => Err(reason),
        Err(_) => Err(PassReason::CrcMismatch),
    }
}

/// The source codec, target codec and options of a batch worth rewriting, or the
/// reason its header alone gives to keep it (ranked below a CRC mismatch).
fn header_verdict<'p>(
    batch: &RecordBatch<'_>,
    policy: &'p RewritePolicy,
    request: Option<&ProduceAllowance>,
) -> Result<(Codec, Codec, &'p CompressionOptions), PassReason> {
    let from = batch.codec().ok_or(PassReason::UnknownCodec)?;
    let (to, options) = match &policy.target {
        Target::Producer => return Err(PassReason::PolicyProducer),
        Target::Unresolved(reason) => return Err(*reason),
        Target::Codec { codec, options } => (*codec, options),
    };
    // Re-encoding uncompressed records as uncompressed would copy them unchanged.
    if from == to && (policy.mode == RecompressMode::CodecDiffers || to == Codec::None) {
        return Err(PassReason::SameCodec);
    }
    if request.is_some_and(|r| !r.allows(to)) {
        return Err(PassReason::ZstdNeedsProduceV7);
    }
    if from == Codec::None && batch.records().len() > policy.max_decompressed_bytes {
        return Err(PassReason::DecompressLimit);
    }
    Ok((from, to, options))
}

fn compressor_for<'c>(
    compressors: &'c mut Vec<Compressor>,
    codec: Codec,
    options: &CompressionOptions,
) -> &'c mut Compressor {
    let found = compressors
        .iter()
        .position(|c| c.codec() == codec && c.options() == options);
    let index = match found {
        Some(i) => i,
        None => {
            compressors.push(Compressor::new(codec, options));
            compressors.len() - 1
        }
    };
    &mut compressors[index]
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pass_without_codec_work_tests {
    use super::*;
    use crate::builder::{seal, BatchBuilder, Record};
    use proptest::prelude::*;

    /// The partition's outcome and output from the full rewrite.
    fn rewritten(records: &[u8], policy: &RewritePolicy, allows_zstd: bool) -> (Outcome, Vec<u8>) {
        let mut request = ProduceAllowance::new(allows_zstd, 1 << 20);
        let mut out = Vec::new();
        let mut outcome = None;
        Recompressor::new().rewrite_partition(records, policy, &mut request, &mut out, |o, _| {
            outcome = Some(*o)
        });
        (outcome.expect("one outcome"), out)
    }

    fn batch(codec: Codec, n: usize) -> Vec<u8> {
        let records: Vec<Record> = (0..n)
            .map(|i| Record::value(format!("record {i} of a batch worth compressing")))
            .collect();
        BatchBuilder::codec(codec).build(&records).unwrap()
    }

    fn policy(target: Option<Codec>) -> RewritePolicy {
        match target {
            Some(codec) => RewritePolicy::to_codec(codec, CompressionOptions::default()),
            None => RewritePolicy {
                target: Target::Producer,
                ..RewritePolicy::to_codec(Codec::None, CompressionOptions::default())
            },
        }
    }

    #[test]
    fn header_reasons_are_found_without_codec_work_and_match_the_rewrite() {
        let lz4 = batch(Codec::Lz4, 50);
        let mut corrupt = lz4.clone();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        // Records, target (`None`: the producer's), whether zstd is allowed, expected reason.
        type Case<'a> = (&'a [u8], Option<Codec>, bool, Option<PassReason>);
        let cases: [Case<'_>; 7] = [
            (&lz4, None, true, Some(PassReason::PolicyProducer)),
            (&lz4, Some(Codec::Lz4), true, Some(PassReason::SameCodec)),
            (
                &lz4,
                Some(Codec::Zstd),
                false,
                Some(PassReason::ZstdNeedsProduceV7),
            ),
            (&corrupt, None, true, Some(PassReason::CrcMismatch)),
            (
                &[&lz4[..], &lz4[..]].concat(),
                Some(Codec::Zstd),
                true,
                Some(PassReason::MultipleBatches),
            ),
            (
                b"garbage",
                Some(Codec::Zstd),
                true,
                Some(PassReason::Malformed),
            ),
            (&lz4, Some(Codec::Zstd), true, None),
        ];
        for (records, target, zstd, expected) in cases {
            let policy = policy(target);
            let request = ProduceAllowance::new(zstd, 1 << 20);
            let found = pass_without_codec_work(records, &policy, &request);
            assert_eq!(found, expected, "{target:?} zstd allowed: {zstd}");
            let (outcome, _) = rewritten(records, &policy, zstd);
            match found {
                Some(reason) => assert_eq!(outcome, Outcome::PassedThrough(reason)),
                None => assert!(matches!(outcome, Outcome::Rewritten { .. }), "{outcome:?}"),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Whatever the check decides alone, the full rewrite decides the same, byte for byte.
        #[test]
        fn agrees_with_the_rewrite_on_damaged_input(
            from in prop::sample::select(Codec::ALL.to_vec()),
            target in prop::option::of(prop::sample::select(Codec::ALL.to_vec())),
            zstd in any::<bool>(),
            n in 0usize..20,
            flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..3),
            reseal in any::<bool>(),
        ) {
            let mut records = batch(from, n);
            for (at, bit) in &flips {
                let i = at.index(records.len());
                records[i] ^= 1 << bit;
            }
            if reseal && records.len() >= HEADER_LEN {
                seal(&mut records);
            }
            let policy = policy(target);
            let found = pass_without_codec_work(&records, &policy, &ProduceAllowance::new(zstd, 1 << 20));
            if let Some(reason) = found {
                let (outcome, out) = rewritten(&records, &policy, zstd);
                prop_assert_eq!(outcome, Outcome::PassedThrough(reason));
                prop_assert_eq!(out, records);
            }
        }
    }
}
