//! The invariants of a batch rewrite, shared by `batch_rewrite` and `request_frame`:
//! what `Recompressor` appended, judged against its input and reported outcomes.

use kpress_batch::{Outcome, RecompressMode, RecordBatch, RewritePolicy, Target};
use kpress_codec::{Codec, Decompressor};
use kpress_protocol::produce_allows_zstd;

/// What the rewrite was asked to do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected<'p> {
    pub(crate) policy: &'p RewritePolicy,
    /// The Produce version the rewrite was told (`rewrite_partition`), if any.
    pub(crate) produce_version: Option<i16>,
}

/// Checks that `output` is `input` with each batch either copied byte for byte or
/// validly rewritten, as `outcomes` (each with the input bytes it covers, in order)
/// say. Returns the decompressed bytes of the rewritten batches.
pub(crate) fn check_rewrite(
    input: &[u8],
    output: &[u8],
    outcomes: &[(Outcome, usize)],
    expected: Expected<'_>,
) -> usize {
    let (mut at_in, mut at_out, mut decompressed) = (0, 0, 0);
    for (i, (outcome, size)) in outcomes.iter().enumerate() {
        let piece = input.get(at_in..at_in + size).unwrap_or_else(|| {
            panic!(
                "outcome {i} ({outcome:?}) covers {size} bytes past the input's {}",
                input.len()
            )
        });
        let written = match *outcome {
            Outcome::PassedThrough(reason) => {
                let copy = output.get(at_out..at_out + size);
                assert!(
                    copy == Some(piece),
                    "batch {i} passed through ({reason}) but its {size} bytes were not copied as they were"
                );
                *size
            }
            Outcome::Rewritten {
                from,
                to,
                bytes_in,
                bytes_out,
            } => {
                assert_eq!(
                    bytes_in, *size,
                    "batch {i}: bytes_in is not the batch's size"
                );
                let new = output.get(at_out..at_out + bytes_out).unwrap_or_else(|| {
                    panic!("batch {i}: rewritten to {bytes_out} bytes past the output's end")
                });
                decompressed += check_rewritten(piece, new, from, to, expected);
                bytes_out
            }
        };
        at_in += size;
        at_out += written;
    }
    assert_eq!(
        at_in,
        input.len(),
        "the outcomes do not cover the whole input"
    );
    assert_eq!(
        at_out,
        output.len(),
        "output beyond what the outcomes account for"
    );
    decompressed
}

/// Checks one rewritten batch against its original; returns its records' size.
fn check_rewritten(
    original: &[u8],
    new: &[u8],
    from: Codec,
    to: Codec,
    expected: Expected<'_>,
) -> usize {
    let policy = expected.policy;
    let old = RecordBatch::parse(original).expect("a rewritten batch was framed as one");
    assert_eq!(
        old.bytes().len(),
        original.len(),
        "a rewrite covered more than one batch"
    );
    assert!(
        old.crc_is_valid(),
        "a batch with a bad CRC was rewritten (corruption laundered)"
    );
    assert!(!old.is_control(), "a control batch was rewritten");
    assert_eq!(
        old.codec(),
        Some(from),
        "Outcome::Rewritten.from is not the batch's codec"
    );

    let batch = RecordBatch::parse(new).expect("the rewritten batch does not parse");
    assert_eq!(
        batch.bytes().len(),
        new.len(),
        "the rewritten batch's length field is off"
    );
    assert!(batch.crc_is_valid(), "the rewritten batch's CRC is wrong");
    assert_eq!(
        batch.codec(),
        Some(to),
        "the rewritten batch is not in Outcome::Rewritten.to"
    );

    let options = match &policy.target {
        Target::Codec { codec, options } => {
            assert_eq!(
                *codec, to,
                "rewritten into a codec the policy does not name"
            );
            options
        }
        Target::Producer | Target::Unresolved(_) => {
            panic!("a policy that keeps batches rewrote one")
        }
    };
    assert!(
        from != to || (policy.mode == RecompressMode::Always && to != Codec::None),
        "a {from} batch was re-encoded in {to} under {}",
        policy.mode
    );
    if let Some(version) = expected.produce_version {
        assert!(
            to != Codec::Zstd || produce_allows_zstd(version),
            "zstd written into Produce v{version}"
        );
    }
    assert!(
        new.len() <= policy.max_batch_bytes,
        "rewritten batch of {} bytes over max_batch_bytes {}",
        new.len(),
        policy.max_batch_bytes
    );
    assert!(
        !policy.only_if_smaller || to == Codec::None || new.len() < original.len(),
        "a {}-byte batch grew to {} bytes under only_if_smaller",
        original.len(),
        new.len()
    );

    // Everything but the codec bits, length and CRC stays byte for byte.
    assert_eq!(batch.base_offset(), old.base_offset());
    assert_eq!(batch.partition_leader_epoch(), old.partition_leader_epoch());
    assert_eq!(batch.magic(), old.magic());
    assert_eq!(batch.attributes() & !0x07, old.attributes() & !0x07);
    assert_eq!(batch.last_offset_delta(), old.last_offset_delta());
    assert_eq!(batch.base_timestamp(), old.base_timestamp());
    assert_eq!(batch.max_timestamp(), old.max_timestamp());
    assert_eq!(batch.producer_id(), old.producer_id());
    assert_eq!(batch.producer_epoch(), old.producer_epoch());
    assert_eq!(batch.base_sequence(), old.base_sequence());
    assert_eq!(batch.records_count(), old.records_count());

    // The original is read as kpress read it (the policy's gzip provider); kpress's
    // output must read back with the default decoders, as any client would.
    let limit = policy.max_decompressed_bytes;
    let mut records = Vec::new();
    Decompressor::with_options(options)
        .decompress(from, old.records(), limit, &mut records)
        .expect("the original's records no longer decompress");
    let mut rewritten = Vec::new();
    Decompressor::new()
        .decompress(to, batch.records(), limit, &mut rewritten)
        .unwrap_or_else(|e| panic!("the rewritten {to} records do not decompress: {e}"));
    assert!(
        records == rewritten,
        "the rewritten batch holds other records"
    );
    records.len()
}
