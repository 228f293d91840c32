use super::*;
use crate::batches;
use crate::builder::{encode_records, plain_records, seal, BatchBuilder, Record};
use proptest::prelude::*;

fn records(n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| Record {
            key: Some(format!("key-{}", i % 7).into_bytes()),
            value: Some(
                format!("127.0.0.1 - - [22/Nov/2026:03:{i:02}:00 +0000] \"GET /index.html HTTP/1.1\" 200 {i}")
                    .into_bytes(),
            ),
            headers: if i % 3 == 0 {
                vec![("trace".into(), Some(vec![i as u8; 4])), ("nil".into(), None)]
            } else {
                Vec::new()
            },
        })
        .collect()
}

/// A producer batch with every header field set to something recognisable.
fn builder(codec: Codec) -> BatchBuilder {
    BatchBuilder {
        base_offset: 42,
        partition_leader_epoch: 7,
        extra_attributes: 0x10 | 0x08, // transactional, log-append-time: must survive
        base_timestamp: 1_763_780_000_000,
        producer_id: 9001,
        producer_epoch: 3,
        base_sequence: 100,
        codec,
        options: CompressionOptions::default(),
    }
}

fn to(codec: Codec) -> RewritePolicy {
    RewritePolicy::to_codec(codec, CompressionOptions::default())
}

fn pass(batch: &[u8], policy: &RewritePolicy) -> PassReason {
    let mut out = b"prefix".to_vec();
    let outcome = Recompressor::new().rewrite_batch(batch, policy, &mut out);
    assert_eq!(&out[..6], b"prefix", "existing bytes of out are kept");
    assert_eq!(&out[6..], batch, "a passed batch is copied byte for byte");
    match outcome {
        Outcome::PassedThrough(reason) => reason,
        other => panic!("expected a pass-through, got {other:?}"),
    }
}

/// The uncompressed records section of a (valid) batch.
/// Checks a rewrite of `input` into `output`: header byte-identical except length,
/// CRC and codec bits; CRC valid; records equal to `expected`.
fn assert_rewrite(input: &[u8], output: &[u8], codec: Codec, expected: &[u8]) {
    let batch = RecordBatch::parse(output).unwrap();
    assert_eq!(batch.bytes().len(), output.len());
    assert!(batch.crc_is_valid());
    assert_eq!(batch.codec(), Some(codec));
    assert_eq!(batch.batch_length() as usize, output.len() - 12);
    assert_eq!(input[..8], output[..8]);
    assert_eq!(input[12..17], output[12..17]);
    assert_eq!(input[21], output[21]);
    assert_eq!(input[22] & !0x07, output[22] & !0x07);
    assert_eq!(input[23..HEADER_LEN], output[23..HEADER_LEN]);
    assert_eq!(plain_records(&batch), expected);
}

#[test]
fn view_reads_every_header_field() {
    let bytes = builder(Codec::None).build(&records(5)).unwrap();
    let mut with_tail = bytes.clone();
    with_tail.extend_from_slice(b"next batch");
    let b = RecordBatch::parse(&with_tail).unwrap();
    assert_eq!(b.bytes(), &bytes[..]);
    assert_eq!(b.base_offset(), 42);
    assert_eq!(b.batch_length() as usize, bytes.len() - 12);
    assert_eq!(b.partition_leader_epoch(), 7);
    assert_eq!(b.magic(), 2);
    assert!(b.crc_is_valid());
    assert_eq!(b.attributes(), 0x18);
    assert_eq!(b.codec(), Some(Codec::None));
    assert!(b.is_transactional());
    assert!(!b.is_control());
    assert_eq!(b.last_offset_delta(), 4);
    assert_eq!(b.base_timestamp(), 1_763_780_000_000);
    assert_eq!(b.max_timestamp(), 1_763_780_000_004);
    assert_eq!(b.producer_id(), 9001);
    assert_eq!(b.producer_epoch(), 3);
    assert_eq!(b.base_sequence(), 100);
    assert_eq!(b.records_count(), 5);
    assert_eq!(b.records(), &encode_records(&records(5))[..]);
}

#[test]
fn parse_refuses_what_it_cannot_frame() {
    let bytes = builder(Codec::None).build(&records(2)).unwrap();
    for cut in [0, 5, 16, 17, 60, bytes.len() - 1] {
        assert!(
            matches!(
                RecordBatch::parse(&bytes[..cut]),
                Err(BatchError::Truncated { .. })
            ),
            "cut at {cut}"
        );
    }
    let mut short = bytes.clone();
    short[8..12].copy_from_slice(&40i32.to_be_bytes());
    assert_eq!(
        RecordBatch::parse(&short),
        Err(BatchError::BadLength { length: 40 })
    );
    short[8..12].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(
        RecordBatch::parse(&short),
        Err(BatchError::BadLength { length: -1 })
    );
    let legacy = legacy_message();
    assert_eq!(
        RecordBatch::parse(&legacy),
        Err(BatchError::NotMagicV2 {
            magic: 1,
            size: legacy.len()
        })
    );
}

/// A magic 1 message set entry: offset, size, crc, magic, attributes, timestamp,
/// null key, value.
fn legacy_message() -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&5i64.to_be_bytes());
    let value = b"old message";
    let size = 4 + 1 + 1 + 8 + 4 + 4 + value.len();
    m.extend_from_slice(&(size as i32).to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes());
    m.push(1);
    m.push(0);
    m.extend_from_slice(&0i64.to_be_bytes());
    m.extend_from_slice(&(-1i32).to_be_bytes());
    m.extend_from_slice(&(value.len() as i32).to_be_bytes());
    m.extend_from_slice(value);
    m
}

#[test]
fn iterator_walks_batches_steps_over_legacy_and_stops_at_garbage() {
    let a = builder(Codec::None).build(&records(3)).unwrap();
    let b = BatchBuilder::default().build(&records(1)).unwrap();
    let legacy = legacy_message();
    let mut seg = [a.clone(), legacy.clone(), b.clone()].concat();
    seg.extend_from_slice(&a[..30]);
    let mut it = batches(&seg);
    assert_eq!(it.next().unwrap().unwrap().bytes(), &a[..]);
    assert!(matches!(
        it.next(),
        Some(Err(BatchError::NotMagicV2 { magic: 1, .. }))
    ));
    assert_eq!(it.next().unwrap().unwrap().bytes(), &b[..]);
    assert!(matches!(it.next(), Some(Err(BatchError::Truncated { .. }))));
    assert_eq!(it.remainder(), &a[..30]);
    assert!(it.next().is_none());
    assert_eq!(batches(&[]).count(), 0);
}

#[test]
fn passes_through_with_a_reason() {
    let plain = builder(Codec::None).build(&records(10)).unwrap();
    let zstd = to(Codec::Zstd);

    assert_eq!(
        pass(&plain, &RewritePolicy::default()),
        PassReason::PolicyProducer
    );
    assert_eq!(pass(&plain, &to(Codec::None)), PassReason::SameCodec);
    let always_none = RewritePolicy {
        mode: RecompressMode::Always,
        ..to(Codec::None)
    };
    assert_eq!(pass(&plain, &always_none), PassReason::SameCodec);
    assert_eq!(pass(&legacy_message(), &zstd), PassReason::NotMagicV2);

    let control = BatchBuilder {
        extra_attributes: 0x20 | 0x10,
        ..builder(Codec::None)
    }
    .build(&records(1))
    .unwrap();
    assert_eq!(pass(&control, &zstd), PassReason::ControlBatch);

    let empty = builder(Codec::None).build_raw(&[], 0, -1).unwrap();
    assert_eq!(pass(&empty, &zstd), PassReason::EmptyBatch);

    let raw = encode_records(&records(3));
    let bad_delta = builder(Codec::None).build_raw(&raw, 3, 5).unwrap();
    assert_eq!(pass(&bad_delta, &zstd), PassReason::Malformed);
    let negative = builder(Codec::None).build_raw(&raw, -2, -3).unwrap();
    assert_eq!(pass(&negative, &zstd), PassReason::Malformed);
    assert_eq!(
        pass(&plain[..plain.len() - 1], &zstd),
        PassReason::Malformed
    );
    assert_eq!(pass(&plain[..20], &zstd), PassReason::Malformed);
    assert_eq!(pass(&[], &zstd), PassReason::Malformed);
    let mut trailing = plain.clone();
    trailing.push(0);
    assert_eq!(pass(&trailing, &zstd), PassReason::Malformed);

    let mut corrupt = plain.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    assert_eq!(pass(&corrupt, &zstd), PassReason::CrcMismatch);
    let mut bad_crc = plain.clone();
    bad_crc[17] ^= 0x80;
    assert_eq!(pass(&bad_crc, &zstd), PassReason::CrcMismatch);

    let mut codec7 = plain.clone();
    codec7[22] |= 0x07;
    seal(&mut codec7);
    assert_eq!(pass(&codec7, &zstd), PassReason::UnknownCodec);

    // No codec's framing starts with 0xff: gzip, lz4 and zstd want their magic, and
    // raw snappy's length varint would overflow.
    for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let mut garbage = builder(Codec::None).build_raw(&[0xff; 64], 1, 0).unwrap();
        garbage[22] = (garbage[22] & !0x07) | codec.id() as u8;
        seal(&mut garbage);
        let expected = if codec == Codec::Gzip {
            PassReason::SameCodec
        } else {
            PassReason::DecompressFailed
        };
        assert_eq!(pass(&garbage, &to(Codec::Gzip)), expected, "{codec}");
        let always = RewritePolicy {
            mode: RecompressMode::Always,
            ..to(Codec::Gzip)
        };
        assert_eq!(
            pass(&garbage, &always),
            PassReason::DecompressFailed,
            "{codec}"
        );
    }

    let limited = RewritePolicy {
        max_decompressed_bytes: plain.len() - HEADER_LEN - 1,
        ..zstd.clone()
    };
    assert_eq!(pass(&plain, &limited), PassReason::DecompressLimit);

    let miscounted = builder(Codec::None).build_raw(&raw, 4, 3).unwrap();
    assert_eq!(pass(&miscounted, &zstd), PassReason::RecordCountMismatch);
    let undercounted = builder(Codec::None).build_raw(&raw, 2, 1).unwrap();
    assert_eq!(pass(&undercounted, &zstd), PassReason::RecordCountMismatch);
}

#[test]
fn compressed_sources_pass_through_with_a_reason() {
    let recs = records(50);
    let gzip = builder(Codec::Gzip).build(&recs).unwrap();
    assert_eq!(pass(&gzip, &to(Codec::Gzip)), PassReason::SameCodec);

    // Decompressed size is bounded for compressed sources too.
    let plain_len = encode_records(&recs).len();
    let limited = RewritePolicy {
        max_decompressed_bytes: plain_len - 1,
        ..to(Codec::Zstd)
    };
    assert_eq!(pass(&gzip, &limited), PassReason::DecompressLimit);
    let exact = RewritePolicy {
        max_decompressed_bytes: plain_len,
        ..to(Codec::Zstd)
    };
    let mut out = Vec::new();
    assert!(matches!(
        Recompressor::new().rewrite_batch(&gzip, &exact, &mut out),
        Outcome::Rewritten { .. }
    ));

    // A compressed stream of 3 records in a batch that claims 4.
    let raw = encode_records(&recs[..3]);
    let miscounted = builder(Codec::Snappy).build_raw(&raw, 4, 3).unwrap();
    assert_eq!(
        pass(&miscounted, &to(Codec::Zstd)),
        PassReason::RecordCountMismatch
    );

    // One short incompressible record: any codec's framing makes it bigger.
    let noise: Vec<u8> = (0..40u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let tiny = builder(Codec::None).build(&[Record::value(noise)]).unwrap();
    for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        // The size guard is opt-in: with it the original stays.
        let smaller_only = RewritePolicy {
            only_if_smaller: true,
            ..to(codec)
        };
        assert_eq!(
            pass(&tiny, &smaller_only),
            PassReason::NotSmaller,
            "{codec}"
        );
        // By default the policy's codec is stored, as Kafka's compression.type does.
        let mut out = Vec::new();
        let grow = to(codec);
        let outcome = Recompressor::new().rewrite_batch(&tiny, &grow, &mut out);
        match outcome {
            Outcome::Rewritten {
                to: written,
                bytes_in,
                bytes_out,
                ..
            } => {
                assert_eq!(written, codec);
                assert!(bytes_out > bytes_in);
                assert!(outcome.grew(), "{codec}");
                assert_eq!(bytes_out, out.len());
            }
            other => panic!("{codec}: {other:?}"),
        }
        // Growth still stops at the batch limit.
        let capped = RewritePolicy {
            max_batch_bytes: tiny.len(),
            ..grow
        };
        assert_eq!(pass(&tiny, &capped), PassReason::OverBatchLimit, "{codec}");
    }

    // Decompressing to none grows the batch: wanted, but not past the limit, and
    // never held to only_if_smaller.
    let mut out = Vec::new();
    let smaller_only_none = RewritePolicy {
        only_if_smaller: true,
        ..to(Codec::None)
    };
    assert!(matches!(
        Recompressor::new().rewrite_batch(&gzip, &smaller_only_none, &mut out),
        Outcome::Rewritten {
            to: Codec::None,
            ..
        }
    ));
    let capped = RewritePolicy {
        max_batch_bytes: gzip.len() + 10,
        ..to(Codec::None)
    };
    assert_eq!(pass(&gzip, &capped), PassReason::OverBatchLimit);
    let mut out = Vec::new();
    assert!(matches!(
        Recompressor::new().rewrite_batch(&gzip, &to(Codec::None), &mut out),
        Outcome::Rewritten {
            to: Codec::None,
            ..
        }
    ));
}

#[test]
fn rewrites_every_codec_into_every_codec() {
    let recs = records(40);
    let expected = encode_records(&recs);
    let mut r = Recompressor::new();
    for from in Codec::ALL {
        let input = builder(from).build(&recs).unwrap();
        for target in Codec::ALL {
            let policy = RewritePolicy {
                mode: RecompressMode::Always,
                ..to(target)
            };
            let mut out = b"xy".to_vec();
            let outcome = r.rewrite_batch(&input, &policy, &mut out);
            if from == Codec::None && target == Codec::None {
                assert_eq!(outcome, Outcome::PassedThrough(PassReason::SameCodec));
                continue;
            }
            assert_eq!(
                outcome,
                Outcome::Rewritten {
                    from,
                    to: target,
                    bytes_in: input.len(),
                    bytes_out: out.len() - 2
                },
                "{from} -> {target}"
            );
            assert_eq!(&out[..2], b"xy");
            assert_rewrite(&input, &out[2..], target, &expected);
        }
    }
}

#[test]
fn always_mode_reencodes_same_codec_at_new_settings() {
    let recs = records(200);
    let mut fast = CompressionOptions::default();
    fast.set("compression.zstd.level", "1").unwrap();
    let input = BatchBuilder {
        options: fast,
        ..builder(Codec::Zstd)
    }
    .build(&recs)
    .unwrap();
    let mut best = CompressionOptions::default();
    best.set("compression.zstd.level", "19").unwrap();
    let policy = RewritePolicy {
        mode: RecompressMode::Always,
        ..RewritePolicy::to_codec(Codec::Zstd, best)
    };
    let mut out = Vec::new();
    match Recompressor::new().rewrite_batch(&input, &policy, &mut out) {
        Outcome::Rewritten {
            bytes_in,
            bytes_out,
            ..
        } => assert!(bytes_out < bytes_in),
        other => panic!("{other:?}"),
    }
    assert_rewrite(&input, &out, Codec::Zstd, &encode_records(&recs));
}

#[test]
fn rewrite_records_handles_a_whole_segment() {
    let recs = records(30);
    let gzip = builder(Codec::Gzip).build(&recs).unwrap();
    let plain = builder(Codec::None).build(&recs).unwrap();
    let control = BatchBuilder {
        extra_attributes: 0x30,
        ..builder(Codec::None)
    }
    .build(&records(1))
    .unwrap();
    let legacy = legacy_message();
    let tail = &plain[..50];
    let seg = [&gzip[..], &legacy, &control, &plain, tail].concat();

    let mut out = Vec::new();
    let mut stats = RewriteStats::default();
    Recompressor::new().rewrite_records(&seg, &to(Codec::Zstd), &mut out, &mut stats);
    assert_eq!(stats.batches_rewritten, 2);
    assert_eq!(stats.passed_for(PassReason::NotMagicV2), 1);
    assert_eq!(stats.passed_for(PassReason::ControlBatch), 1);
    assert_eq!(stats.passed_for(PassReason::Malformed), 1);
    assert_eq!(stats.batches(), 5);
    assert_eq!(stats.bytes_in, seg.len() as u64);
    assert_eq!(stats.bytes_out, out.len() as u64);

    let mut it = batches(&out);
    let first = it.next().unwrap().unwrap();
    assert_rewrite(&gzip, first.bytes(), Codec::Zstd, &encode_records(&recs));
    assert!(matches!(
        it.next(),
        Some(Err(BatchError::NotMagicV2 { .. }))
    ));
    assert_eq!(it.next().unwrap().unwrap().bytes(), &control[..]);
    let fourth = it.next().unwrap().unwrap();
    assert_rewrite(&plain, fourth.bytes(), Codec::Zstd, &encode_records(&recs));
    assert!(it.next().unwrap().is_err());
    assert_eq!(it.remainder(), tail);
}

/// Checks the contract for any input: passed through means copied; rewritten means
/// the input's CRC was valid and `out` holds exactly one valid batch.
fn check_contract(input: &[u8], policy: &RewritePolicy, r: &mut Recompressor) {
    let mut out = Vec::new();
    match r.rewrite_batch(input, policy, &mut out) {
        Outcome::PassedThrough(_) => assert_eq!(out, input),
        Outcome::Rewritten {
            bytes_in,
            bytes_out,
            to,
            ..
        } => {
            let original = RecordBatch::parse(input).unwrap();
            assert!(original.crc_is_valid());
            assert_eq!(bytes_in, input.len());
            assert_eq!(bytes_out, out.len());
            assert!(bytes_out <= policy.max_batch_bytes);
            if policy.only_if_smaller && to != Codec::None {
                assert!(
                    bytes_out < bytes_in,
                    "only_if_smaller kept a larger rewrite"
                );
            }
            let batch = RecordBatch::parse(&out).unwrap();
            assert_eq!(batch.bytes().len(), out.len());
            assert!(batch.crc_is_valid());
            assert_eq!(batch.codec(), Some(to));
            assert_eq!(plain_records(&batch), plain_records(&original));
        }
    }
    let mut seg_out = Vec::new();
    let mut stats = RewriteStats::default();
    r.rewrite_records(input, policy, &mut seg_out, &mut stats);
    assert_eq!(stats.bytes_in, input.len() as u64);
    assert_eq!(stats.bytes_out, seg_out.len() as u64);
}

fn codec_strategy() -> impl Strategy<Value = Codec> {
    prop::sample::select(Codec::ALL.to_vec())
}

fn policy_strategy() -> impl Strategy<Value = RewritePolicy> {
    (codec_strategy(), any::<bool>(), any::<bool>()).prop_map(|(codec, always, only_if_smaller)| {
        RewritePolicy {
            mode: if always {
                RecompressMode::Always
            } else {
                RecompressMode::CodecDiffers
            },
            only_if_smaller,
            max_decompressed_bytes: 1 << 20,
            ..to(codec)
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300), policy in policy_strategy()) {
        check_contract(&bytes, &policy, &mut Recompressor::new());
    }

    #[test]
    fn framed_garbage_never_panics(
        body in prop::collection::vec(any::<u8>(), 0..300),
        codec in 0u8..8,
        count in -2i32..20,
        policy in policy_strategy(),
    ) {
        // A valid header and CRC around arbitrary records reach the codecs and the walk.
        let mut batch = BatchBuilder::default().build_raw(&body, count, count - 1).unwrap();
        batch[22] = (batch[22] & !0x07) | codec;
        seal(&mut batch);
        check_contract(&batch, &policy, &mut Recompressor::new());
    }

    #[test]
    fn damaged_batches_never_panic_nor_launder(
        from in codec_strategy(),
        n in 1usize..30,
        flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
        reseal in any::<bool>(),
        policy in policy_strategy(),
    ) {
        let mut batch = builder(from).build(&records(n)).unwrap();
        for (at, bit) in &flips {
            let i = at.index(batch.len());
            batch[i] ^= 1 << bit;
        }
        if truncate {
            batch.truncate(cut.index(batch.len()));
        }
        // A valid length and CRC over damaged content reaches the decoders and the walk.
        if reseal && batch.len() >= HEADER_LEN {
            seal(&mut batch);
        }
        check_contract(&batch, &policy, &mut Recompressor::new());
    }
}

#[test]
fn recompressor_can_move_between_threads() {
    // The proxy keeps one per connection task, which a runtime may move.
    fn assert_send<T: Send>() {}
    assert_send::<Recompressor>();
}

#[test]
fn gzip_input_is_read_through_the_policy_provider() {
    let recs = records(60);
    let expected = encode_records(&recs);
    let gzip = builder(Codec::Gzip).build(&recs).unwrap();
    let snappy = builder(Codec::Snappy).build(&recs).unwrap();
    let mut r = Recompressor::new();
    // Only the built-in providers: the accelerators are optional on a test host.
    for provider in ["libdeflate", "zlib", "libdeflate"] {
        let mut options = CompressionOptions::default();
        options
            .set(kpress_codec::options::GZIP_PROVIDER, provider)
            .unwrap();
        let policy = RewritePolicy::to_codec(Codec::Zstd, options);
        let mut out = Vec::new();
        let outcome = r.rewrite_batch(&gzip, &policy, &mut out);
        assert!(matches!(outcome, Outcome::Rewritten { .. }), "{outcome:?}");
        assert_rewrite(&gzip, &out, Codec::Zstd, &expected);
        assert_eq!(r.decompressor.gzip_provider().name(), provider);
        // Non-gzip input does not need a provider of its own, nor change it.
        let mut out = Vec::new();
        r.rewrite_batch(&snappy, &policy, &mut out);
        assert_rewrite(&snappy, &out, Codec::Zstd, &expected);
        assert_eq!(r.decompressor.gzip_provider().name(), provider);
    }
    // One resolution per provider choice, reused: kpress-codec's
    // decompressor::tests::each_gzip_provider_choice_is_resolved_once.
}

/// Runs one partition through `rewrite_partition`; returns its single outcome.
fn partition(
    records: &[u8],
    policy: &RewritePolicy,
    request: &mut ProduceAllowance,
) -> (Outcome, Vec<u8>) {
    let mut out = Vec::new();
    let mut outcomes = Vec::new();
    Recompressor::new().rewrite_partition(records, policy, request, &mut out, |o, size| {
        outcomes.push((*o, size))
    });
    assert_eq!(outcomes.len(), 1, "one outcome per partition");
    assert_eq!(outcomes[0].1, records.len());
    (outcomes[0].0, out)
}

#[test]
fn a_partition_of_several_batches_is_passed_whole_without_decoding() {
    let gzip = builder(Codec::Gzip).build(&records(20)).unwrap();
    let two = [&gzip[..], &gzip[..]].concat();
    let mut request = ProduceAllowance::new(true, usize::MAX);
    let (outcome, out) = partition(&two, &to(Codec::Zstd), &mut request);
    assert_eq!(outcome, Outcome::PassedThrough(PassReason::MultipleBatches));
    assert_eq!(out, two);
    assert_eq!(
        request.decompressed_bytes_left(),
        usize::MAX,
        "nothing decoded"
    );
    // One batch is rewritten as usual.
    let (outcome, _) = partition(&gzip, &to(Codec::Zstd), &mut request);
    assert!(matches!(outcome, Outcome::Rewritten { .. }));
}

#[test]
fn zstd_is_not_written_where_the_request_does_not_allow_it() {
    let lz4 = builder(Codec::Lz4).build(&records(40)).unwrap();
    let mut request = ProduceAllowance::new(false, usize::MAX);
    let (outcome, out) = partition(&lz4, &to(Codec::Zstd), &mut request);
    assert_eq!(
        outcome,
        Outcome::PassedThrough(PassReason::ZstdNeedsProduceV7)
    );
    assert_eq!(out, lz4);
    // Other codecs are still written for old clients.
    let (outcome, _) = partition(&lz4, &to(Codec::Gzip), &mut request);
    assert!(matches!(
        outcome,
        Outcome::Rewritten {
            to: Codec::Gzip,
            ..
        }
    ));
    let mut request = ProduceAllowance::new(true, usize::MAX);
    let (outcome, _) = partition(&lz4, &to(Codec::Zstd), &mut request);
    assert!(matches!(
        outcome,
        Outcome::Rewritten {
            to: Codec::Zstd,
            ..
        }
    ));
}

#[test]
fn a_request_budget_bounds_what_all_its_batches_decompress_to() {
    let recs = records(50);
    let plain_len = encode_records(&recs).len();
    let zstd = builder(Codec::Zstd).build(&recs).unwrap();
    // Room for two batches' records and a bit: the third is refused undecoded.
    // zstd to gzip is not smaller; stored anyway, since size is not what this tests.
    let to_gzip = to(Codec::Gzip);
    let mut request = ProduceAllowance::new(true, 2 * plain_len + 10);
    for _ in 0..2 {
        let (outcome, _) = partition(&zstd, &to_gzip, &mut request);
        assert!(matches!(outcome, Outcome::Rewritten { .. }));
    }
    assert_eq!(request.decompressed_bytes_left(), 10);
    let (outcome, out) = partition(&zstd, &to_gzip, &mut request);
    assert_eq!(
        outcome,
        Outcome::PassedThrough(PassReason::RequestDecompressBudget)
    );
    assert_eq!(out, zstd);
    // A refused attempt used what it was allowed: nothing is left for the next.
    assert_eq!(request.decompressed_bytes_left(), 0);
}

#[test]
fn a_batch_inflating_past_the_ratio_cap_is_passed_through() {
    // 1 MiB of zeros in one record: zstd shrinks it by far more than 100x.
    let bomb = builder(Codec::Zstd)
        .build(&[Record::value(vec![0u8; 1 << 20])])
        .unwrap();
    let capped = RewritePolicy {
        max_decompression_ratio: 100,
        ..to(Codec::Gzip)
    };
    assert_eq!(pass(&bomb, &capped), PassReason::DecompressRatio);
    let mut request = ProduceAllowance::new(true, usize::MAX);
    let (outcome, _) = partition(&bomb, &capped, &mut request);
    assert_eq!(outcome, Outcome::PassedThrough(PassReason::DecompressRatio));
    // The default cap lets real data through.
    let logs = builder(Codec::Zstd).build(&records(200)).unwrap();
    let (outcome, _) = partition(
        &logs,
        &RewritePolicy {
            max_decompression_ratio: 1000,
            ..capped
        },
        &mut request,
    );
    assert!(matches!(outcome, Outcome::Rewritten { .. }));
}

#[test]
fn a_decode_failure_keeps_the_codecs_error_text_until_taken() {
    let mut recompressor = Recompressor::new();
    let mut out = Vec::new();
    let ok = builder(Codec::Gzip).build(&records(5)).unwrap();
    let outcome = recompressor.rewrite_batch(&ok, &to(Codec::Zstd), &mut out);
    assert!(matches!(outcome, Outcome::Rewritten { .. }), "{outcome:?}");
    assert_eq!(recompressor.take_codec_error(), None);

    let mut garbage = builder(Codec::None).build_raw(&[0xff; 64], 1, 0).unwrap();
    garbage[22] = (garbage[22] & !0x07) | Codec::Lz4.id() as u8;
    seal(&mut garbage);
    let outcome = recompressor.rewrite_batch(&garbage, &to(Codec::Zstd), &mut out);
    assert_eq!(
        outcome,
        Outcome::PassedThrough(PassReason::DecompressFailed)
    );
    let err = recompressor.take_codec_error().expect("the lz4 error");
    assert!(err.to_string().starts_with("corrupt lz4 payload"), "{err}");
    assert_eq!(recompressor.take_codec_error(), None, "taken once");
}
