//! The Fetch slice: the decision, one partition's re-encode, and the handler on a
//! connection served over in-memory streams (tests/consumers.rs runs real brokers and
//! a real kafka-clients 2.0.1 consumer).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kpress_batch::builder::{plain_records, BatchBuilder, Record};
use kpress_batch::{PassReason, Recompressor, RecordBatch, RewritePolicy, CRC_START};
use kpress_codec::{Codec, CompressionOptions};
use tokio::io::AsyncWriteExt;

use super::cache::ReencodedCache;
use super::reencode::{ReencodeLimits, Reencoder};
use super::report::CutReason;
use super::{client_reads, needs_reencode, readable_at, upgrades};
use crate::tests::*;
use kpress_config::ConsumerSettings;

const TRANSACTIONAL: u16 = 1 << 4;
const CONTROL: u16 = 1 << 5;

fn batch(codec: Codec, base_offset: i64, n: usize) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| {
            Record::value(format!(
                "record {i} at {base_offset}: a value worth compressing"
            ))
        })
        .collect();
    BatchBuilder {
        base_offset,
        partition_leader_epoch: 7,
        extra_attributes: TRANSACTIONAL,
        producer_id: 4242,
        producer_epoch: 3,
        base_sequence: 100,
        ..BatchBuilder::codec(codec)
    }
    .build(&records)
    .unwrap()
}

fn control_batch(base_offset: i64) -> Vec<u8> {
    // A commit marker: version 0, type 1 key; value version 0, coordinator epoch 0.
    let record = Record {
        key: Some(vec![0, 0, 0, 1]),
        ..Record::value(vec![0, 0, 0, 0, 0, 0])
    };
    BatchBuilder {
        base_offset,
        extra_attributes: TRANSACTIONAL | CONTROL,
        producer_id: 4242,
        producer_epoch: 3,
        ..BatchBuilder::codec(Codec::None)
    }
    .build(&[record])
    .unwrap()
}

fn consumer_policy(codec: Codec) -> RewritePolicy {
    RewritePolicy {
        max_batch_bytes: i32::MAX as usize,
        ..RewritePolicy::to_codec(codec, CompressionOptions::default())
    }
}

fn limits() -> ReencodeLimits {
    ReencodeLimits {
        response_decompressed_bytes: 64 << 20,
        deadline: None,
        max_frame_bytes: 100 << 20,
        overloaded: false,
    }
}

fn is_zstd(codec: Codec) -> bool {
    codec == Codec::Zstd
}

/// One batch as compared: its header without length, CRC and codec bits, its codec,
/// its plain records.
type SeenBatch = (Vec<u8>, Option<Codec>, Vec<u8>);

/// The batches of `records`, and the bytes after the last whole batch.
fn batches_of(records: &[u8]) -> (Vec<SeenBatch>, Vec<u8>) {
    let mut out = Vec::new();
    let mut iter = kpress_batch::batches(records);
    for batch in iter.by_ref() {
        let Ok(batch) = batch else { break };
        assert!(batch.crc_is_valid());
        let bytes = batch.bytes();
        let mut header = bytes[..8].to_vec();
        header.extend_from_slice(&bytes[12..17]);
        let mut attributes = u16::from_be_bytes([bytes[21], bytes[22]]);
        attributes &= !0x07;
        header.extend_from_slice(&attributes.to_be_bytes());
        header.extend_from_slice(&bytes[23..kpress_batch::HEADER_LEN]);
        out.push((header, batch.codec(), plain_records(&batch)));
    }
    (out, iter.remainder().to_vec())
}

#[test]
fn only_zstd_for_clients_before_v10_is_reencoded() {
    let consumers = ConsumerSettings::default();
    for version in 4..=9 {
        assert_eq!(
            needs_reencode(&consumers, readable_at(version), Codec::Zstd),
            Some(Codec::Lz4)
        );
        for codec in [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4] {
            assert_eq!(
                needs_reencode(&consumers, readable_at(version), codec),
                None
            );
        }
    }
    for version in 10..=18 {
        assert_eq!(
            needs_reencode(&consumers, readable_at(version), Codec::Zstd),
            None
        );
    }
    let off = ConsumerSettings {
        reencode: false,
        ..ConsumerSettings::default()
    };
    assert_eq!(needs_reencode(&off, readable_at(8), Codec::Zstd), None);
    assert!(!upgrades(&off, readable_at(8), 8));
    assert!(upgrades(&consumers, readable_at(4), 4) && upgrades(&consumers, readable_at(9), 9));
    assert!(!upgrades(&consumers, readable_at(3), 3) && !upgrades(&consumers, readable_at(10), 10));
    let none = ConsumerSettings {
        codec: Codec::None,
        ..ConsumerSettings::default()
    };
    assert_eq!(
        needs_reencode(&none, readable_at(8), Codec::Zstd),
        Some(Codec::None)
    );
    // zstd is no codec for these clients: they get the first they read of lz4, ...
    let zstd = ConsumerSettings {
        codec: Codec::Zstd,
        ..ConsumerSettings::default()
    };
    assert_eq!(
        needs_reencode(&zstd, readable_at(8), Codec::Zstd),
        Some(Codec::Lz4)
    );
}

#[test]
fn client_rules_narrow_what_the_version_allows() {
    let gzip_only = kpress_config::ClientRule {
        client_id: Some(
            kpress_config::NamePattern::parse("gzip-only*", |_| true, "client.id").unwrap(),
        ),
        software: None,
        listener: None,
        accept: kpress_config::CodecSet::of([Codec::Gzip]),
        line: 1,
    };
    let consumers = ConsumerSettings {
        clients: kpress_config::ClientRules::new(vec![gzip_only]),
        ..ConsumerSettings::default()
    };
    let reads = |version, id| client_reads(&consumers, version, Some(id), || None, "bootstrap");
    // A client no rule matches reads what its version allows.
    assert_eq!(reads(12, "other"), kpress_config::CodecSet::ALL);
    assert_eq!(reads(8, "other"), readable_at(8));
    for version in [8, 11, 16] {
        let gzip = reads(version, "gzip-only-1");
        assert_eq!(gzip, kpress_config::CodecSet::of([Codec::Gzip]));
        for codec in [Codec::Lz4, Codec::Snappy, Codec::Zstd] {
            assert_eq!(needs_reencode(&consumers, gzip, codec), Some(Codec::Gzip));
        }
        assert_eq!(needs_reencode(&consumers, gzip, Codec::Gzip), None);
        assert_eq!(needs_reencode(&consumers, gzip, Codec::None), None);
    }
    // Upgraded only below v10; v10 and v11 answers are rewritten at their version.
    assert!(upgrades(&consumers, reads(8, "gzip-only-1"), 8));
    assert!(!upgrades(&consumers, reads(11, "gzip-only-1"), 11));

    // The software the connection announced, on a listener.
    let no_lz4 = kpress_config::ClientRule {
        client_id: None,
        software: Some(kpress_config::SoftwarePattern::parse("kafka-python/2.*").unwrap()),
        listener: Some(kpress_config::NamePattern::parse("node *", |_| true, "listener").unwrap()),
        accept: kpress_config::CodecSet::of([Codec::Gzip, Codec::Snappy, Codec::Zstd]),
        line: 1,
    };
    let consumers = ConsumerSettings {
        clients: kpress_config::ClientRules::new(vec![no_lz4]),
        ..ConsumerSettings::default()
    };
    let python = || crate::handler::ClientSoftware::new(b"kafka-python", b"2.0.2");
    let reads = client_reads(&consumers, 11, None, python, "node 1");
    assert_eq!(
        needs_reencode(&consumers, reads, Codec::Lz4),
        Some(Codec::Snappy)
    );
    assert_eq!(needs_reencode(&consumers, reads, Codec::Zstd), None);
    let on_bootstrap = client_reads(&consumers, 11, None, python, "bootstrap");
    assert_eq!(on_bootstrap, kpress_config::CodecSet::ALL);
    let unnamed = client_reads(&consumers, 11, None, || None, "node 1");
    assert_eq!(unnamed, kpress_config::CodecSet::ALL);
}

#[test]
fn zstd_batches_are_reencoded_and_everything_else_kept_as_stored() {
    let zstd_a = batch(Codec::Zstd, 100, 40);
    let gzip = batch(Codec::Gzip, 140, 10);
    let control = control_batch(150);
    let zstd_b = batch(Codec::Zstd, 151, 25);
    // A batch cut by the fetch size: passed as it came, whatever its codec.
    let partial = &batch(Codec::Zstd, 176, 30)[..70];
    let records = [&zstd_a[..], &gzip, &control, &zstd_b, partial].concat();
    let mut recompressor = Recompressor::new();
    for target in [Codec::Lz4, Codec::None, Codec::Gzip, Codec::Snappy] {
        let mut reencoder = Reencoder::new(&mut recompressor, limits(), records.len());
        let out = reencoder
            .partition("orders", 0, &records, &consumer_policy(target), is_zstd)
            .expect("changed");
        let (before, before_tail) = batches_of(&records);
        let (after, after_tail) = batches_of(&out);
        assert_eq!(before.len(), after.len());
        for (i, (b, a)) in before.iter().zip(&after).enumerate() {
            assert_eq!(
                b.0, a.0,
                "batch {i}: header fields other than codec, length, crc"
            );
            assert_eq!(b.2, a.2, "batch {i}: records");
            let expected = if b.1 == Some(Codec::Zstd) {
                Some(target)
            } else {
                b.1
            };
            assert_eq!(a.1, expected, "batch {i}");
        }
        assert!(out.windows(gzip.len()).any(|w| w == gzip), "gzip as stored");
        assert!(
            out.windows(control.len()).any(|w| w == control),
            "control as stored"
        );
        assert_eq!(before_tail, partial);
        assert_eq!(after_tail, partial);
        let report = &reencoder.report.partitions[0];
        assert_eq!(report.cut, None);
        assert_eq!(
            report.reencoded,
            [(Codec::Zstd, target), (Codec::Zstd, target)]
        );
        assert_eq!(
            (report.bytes_in, report.bytes_out),
            (records.len(), out.len())
        );
    }
}

#[test]
fn the_same_response_reencoded_twice_costs_one_reencoding() {
    let records = [
        batch(Codec::Zstd, 0, 20),
        batch(Codec::Gzip, 20, 5),
        batch(Codec::Zstd, 25, 20),
    ]
    .concat();
    let cache = ReencodedCache::new(1 << 20);
    let mut recompressor = Recompressor::new();
    let mut outs = Vec::new();
    for _ in 0..2 {
        let mut reencoder =
            Reencoder::new(&mut recompressor, limits(), records.len()).with_cache(&cache);
        let out = reencoder
            .partition("orders", 3, &records, &consumer_policy(Codec::Lz4), is_zstd)
            .expect("changed");
        outs.push((out, reencoder.report.partitions.remove(0)));
    }
    let (first, first_report) = &outs[0];
    let (second, second_report) = &outs[1];
    assert_eq!(first, second, "the cached batches are the re-encoded ones");
    assert_eq!(first_report.reencoded, [(Codec::Zstd, Codec::Lz4); 2]);
    assert!(
        second_report.reencoded.is_empty(),
        "no re-encoding the second time"
    );
    assert_eq!(
        (second_report.bytes_in, second_report.bytes_out),
        (records.len(), second.len())
    );
    let stats = cache.stats();
    assert_eq!((stats.misses, stats.hits, stats.entries), (2, 2, 2));

    // Another partition, or another target codec, is another batch.
    let mut reencoder =
        Reencoder::new(&mut recompressor, limits(), records.len()).with_cache(&cache);
    reencoder.partition("orders", 4, &records, &consumer_policy(Codec::Lz4), is_zstd);
    reencoder.partition(
        "orders",
        3,
        &records,
        &consumer_policy(Codec::Gzip),
        is_zstd,
    );
    assert_eq!(cache.stats().misses, 6);
    // So is the same codec at another level.
    let mut gzip_1 = CompressionOptions::default();
    gzip_1.set_int("compression.gzip.level", 1).unwrap();
    let gzip_1 = RewritePolicy {
        max_batch_bytes: i32::MAX as usize,
        ..RewritePolicy::to_codec(Codec::Gzip, gzip_1)
    };
    let mut reencoder =
        Reencoder::new(&mut recompressor, limits(), records.len()).with_cache(&cache);
    reencoder.partition("orders", 3, &records, &gzip_1, is_zstd);
    assert_eq!(
        reencoder.report.partitions[0].reencoded,
        [(Codec::Zstd, Codec::Gzip); 2],
        "re-encoded at level 1, not copied from the default level's entries"
    );
    assert_eq!(cache.stats().misses, 8);

    // With no work slot, batches already re-encoded are served from the cache.
    let overloaded = ReencodeLimits {
        overloaded: true,
        ..limits()
    };
    let mut reencoder =
        Reencoder::new(&mut recompressor, overloaded, records.len()).with_cache(&cache);
    let out = reencoder
        .partition("orders", 3, &records, &consumer_policy(Codec::Lz4), is_zstd)
        .expect("changed");
    assert_eq!(out, first, "every batch from the cache");
    assert_eq!(reencoder.report.partitions[0].cut, None);
}

#[test]
fn records_without_zstd_are_left_alone() {
    let records = [batch(Codec::Gzip, 0, 5), batch(Codec::Lz4, 5, 5)].concat();
    let mut recompressor = Recompressor::new();
    let mut reencoder = Reencoder::new(&mut recompressor, limits(), records.len());
    assert!(reencoder
        .partition("t", 0, &records, &consumer_policy(Codec::Lz4), is_zstd)
        .is_none());
    assert!(reencoder.report.partitions.is_empty());
}

#[test]
fn batches_before_the_first_to_reencode_are_kept_byte_for_byte() {
    let stored = [batch(Codec::Gzip, 0, 5), control_batch(5)].concat();
    let records = [&stored[..], &batch(Codec::Zstd, 6, 5)].concat();
    let mut recompressor = Recompressor::new();
    let mut reencoder = Reencoder::new(&mut recompressor, limits(), records.len());
    let out = reencoder
        .partition("t", 0, &records, &consumer_policy(Codec::Lz4), is_zstd)
        .expect("changed");
    assert_eq!(&out[..stored.len()], &stored[..]);
    let last = RecordBatch::parse(&out[stored.len()..]).unwrap();
    assert_eq!(last.codec(), Some(Codec::Lz4));
    assert_eq!(last.bytes().len(), out.len() - stored.len());
    assert_eq!(reencoder.report.partitions[0].bytes_in, records.len());
    assert_eq!(reencoder.report.partitions[0].reencoded.len(), 1);

    // A zstd batch cut by the fetch size is never reached: nothing to do.
    let partial = &batch(Codec::Zstd, 6, 30)[..70];
    let records = [&stored[..], partial].concat();
    assert!(reencoder
        .partition("t", 1, &records, &consumer_policy(Codec::Lz4), is_zstd)
        .is_none());
}

#[test]
fn a_damaged_zstd_batch_is_passed_as_stored_counted() {
    let good = batch(Codec::Zstd, 0, 20);
    let mut corrupt = batch(Codec::Zstd, 20, 20);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x55;
    let after = batch(Codec::Zstd, 40, 20);
    let policy = consumer_policy(Codec::Lz4);
    let mut recompressor = Recompressor::new();

    // First: passed as the broker stored it, the batch after it re-encoded.
    let records = [&corrupt[..], &after].concat();
    let mut reencoder = Reencoder::new(&mut recompressor, limits(), records.len());
    let out = reencoder
        .partition("t", 0, &records, &policy, is_zstd)
        .unwrap();
    assert_eq!(&out[..corrupt.len()], &corrupt[..]);
    let (batches, tail) = batches_of(&out[corrupt.len()..]);
    assert_eq!(batches.len(), 1);
    assert!(tail.is_empty());
    assert_eq!(batches[0].1, Some(Codec::Lz4));
    assert_eq!(
        batches,
        batches_of(&after)
            .0
            .into_iter()
            .map(|(h, _, r)| (h, Some(Codec::Lz4), r))
            .collect::<Vec<_>>()
    );
    let report = &reencoder.report.partitions[0];
    assert_eq!(report.passed, [PassReason::CrcMismatch]);
    assert_eq!(report.passed[0].as_str(), "crc_mismatch");
    assert_eq!(report.cut, None);
    assert_eq!(report.reencoded, [(Codec::Zstd, Codec::Lz4)]);

    // Between good batches: both re-encoded, the damaged one byte for byte.
    let records = [&good[..], &corrupt, &after].concat();
    let mut reencoder = Reencoder::new(&mut recompressor, limits(), records.len());
    let out = reencoder
        .partition("t", 0, &records, &policy, is_zstd)
        .unwrap();
    let first = RecordBatch::parse(&out).unwrap();
    assert_eq!(first.codec(), Some(Codec::Lz4));
    assert_eq!(first.base_offset(), 0);
    let rest = &out[first.bytes().len()..];
    assert_eq!(&rest[..corrupt.len()], &corrupt[..]);
    let last = RecordBatch::parse(&rest[corrupt.len()..]).unwrap();
    assert_eq!((last.codec(), last.base_offset()), (Some(Codec::Lz4), 40));
    assert_eq!(rest.len(), corrupt.len() + last.bytes().len());
    assert_eq!(reencoder.report.partitions[0].reencoded.len(), 2);
    assert_eq!(
        reencoder.report.partitions[0].passed,
        [PassReason::CrcMismatch]
    );

    // A payload that no longer decompresses, resealed: passed as stored too.
    let mut garbage = batch(Codec::Zstd, 0, 20);
    for byte in &mut garbage[kpress_batch::HEADER_LEN..] {
        *byte = 0xAB;
    }
    kpress_batch::builder::seal(&mut garbage);
    assert!(RecordBatch::parse(&garbage).unwrap().crc_is_valid());
    let mut reencoder = Reencoder::new(&mut recompressor, limits(), garbage.len());
    let out = reencoder
        .partition("t", 0, &garbage, &policy, is_zstd)
        .unwrap();
    assert_eq!(&out[..], &garbage[..]);
    let report = &reencoder.report.partitions[0];
    assert_eq!(report.passed, [PassReason::DecompressFailed]);
    assert_eq!(report.cut, None);
}

#[test]
fn a_decompression_bomb_is_passed_as_stored_counted() {
    // 4 MiB of zeros in a few hundred bytes: far over the default ratio cap.
    let bomb = BatchBuilder {
        base_offset: 0,
        ..BatchBuilder::codec(Codec::Zstd)
    }
    .build(&[Record::value(vec![0u8; 4 << 20])])
    .unwrap();
    let policy = consumer_policy(Codec::Lz4);
    assert!(bomb.len() * policy.max_decompression_ratio < 4 << 20);
    let after = batch(Codec::Zstd, 1, 20);
    let records = [&bomb[..], &after].concat();
    let mut recompressor = Recompressor::new();
    let mut reencoder = Reencoder::new(&mut recompressor, limits(), records.len());
    let out = reencoder
        .partition("t", 0, &records, &policy, is_zstd)
        .unwrap();
    assert_eq!(&out[..bomb.len()], &bomb[..]);
    let next = RecordBatch::parse(&out[bomb.len()..]).unwrap();
    assert_eq!((next.codec(), next.base_offset()), (Some(Codec::Lz4), 1));
    let report = &reencoder.report.partitions[0];
    assert_eq!(report.passed, [PassReason::DecompressRatio]);
    assert_eq!(report.passed[0].as_str(), "decompress_ratio");
    assert_eq!(report.cut, None);

    // Over `max_decompressed_bytes` under a looser ratio: passed as stored too.
    let capped = RewritePolicy {
        max_decompressed_bytes: 1 << 20,
        max_decompression_ratio: usize::MAX,
        ..consumer_policy(Codec::Lz4)
    };
    let mut reencoder = Reencoder::new(&mut recompressor, limits(), records.len());
    let out = reencoder
        .partition("t", 0, &records, &capped, is_zstd)
        .unwrap();
    assert_eq!(&out[..bomb.len()], &bomb[..]);
    assert_eq!(out.len(), bomb.len() + next.bytes().len());
    assert_eq!(
        reencoder.report.partitions[0].passed,
        [PassReason::DecompressLimit]
    );

    // With no work slot nothing is tried: the partition is cut before it, as before.
    let overloaded = ReencodeLimits {
        overloaded: true,
        ..limits()
    };
    let mut reencoder = Reencoder::new(&mut recompressor, overloaded, records.len());
    let out = reencoder
        .partition("t", 0, &records, &policy, is_zstd)
        .unwrap();
    assert!(out.is_empty());
    let report = &reencoder.report.partitions[0];
    assert!(report.passed.is_empty());
    assert_eq!(report.cut, Some(CutReason::Overloaded));
}

#[test]
fn limits_cut_partitions_before_the_batches_they_stop() {
    let records = [batch(Codec::Zstd, 0, 200), batch(Codec::Zstd, 200, 200)].concat();
    let plain = plain_records(&RecordBatch::parse(&records).unwrap()).len();
    let mut recompressor = Recompressor::new();
    let policy = consumer_policy(Codec::Lz4);

    // The response's budget covers the first batch of the first partition only.
    let budget = ReencodeLimits {
        response_decompressed_bytes: plain + 10,
        ..limits()
    };
    let mut reencoder = Reencoder::new(&mut recompressor, budget, records.len() * 2);
    let first = reencoder
        .partition("a", 0, &records, &policy, is_zstd)
        .unwrap();
    let second = reencoder
        .partition("b", 0, &records, &policy, is_zstd)
        .unwrap();
    assert_eq!(batches_of(&first).0.len(), 1);
    assert!(second.is_empty());
    let cuts: Vec<_> = reencoder
        .report
        .partitions
        .iter()
        .map(|p| p.cut.map(CutReason::as_str))
        .collect();
    assert_eq!(cuts, [Some("response_budget"), Some("response_budget")]);

    // Past the deadline, or with no work slot, nothing is re-encoded.
    for (limits, reason) in [
        (
            ReencodeLimits {
                deadline: Some(std::time::Instant::now()),
                ..limits()
            },
            "deadline",
        ),
        (
            ReencodeLimits {
                overloaded: true,
                ..limits()
            },
            "overloaded",
        ),
        (
            ReencodeLimits {
                max_frame_bytes: records.len(),
                ..limits()
            },
            "max_frame_bytes",
        ),
    ] {
        let mut reencoder = Reencoder::new(&mut recompressor, limits, records.len());
        let out = reencoder
            .partition("a", 0, &records, &policy, is_zstd)
            .unwrap();
        if reason == "max_frame_bytes" {
            // lz4 of these records is larger than zstd: the frame would outgrow it.
            assert!(batches_of(&out).0.is_empty(), "{reason}");
        } else {
            assert!(out.is_empty(), "{reason}");
        }
        assert_eq!(
            reencoder.report.partitions[0].cut.map(CutReason::as_str),
            Some(reason)
        );
    }
}

// The handler on a connection.

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn fetch_request(version: i16, correlation_id: i32) -> Vec<u8> {
    let request = FetchRequest::default()
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name("orders"))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let mut body = BytesMut::new();
    request.encode(&mut body, version).unwrap();
    crate::tests::request(
        kpress_protocol::api_key::FETCH,
        version,
        correlation_id,
        &body,
    )
}

fn fetch_response(version: i16, correlation_id: i32, records: &[&[u8]]) -> Vec<u8> {
    let partitions = records
        .iter()
        .enumerate()
        .map(|(i, records)| {
            PartitionData::default()
                .with_partition_index(i as i32)
                .with_high_watermark(1000)
                .with_last_stable_offset(900)
                .with_log_start_offset(0)
                .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                    .with_producer_id(ProducerId(4242))
                    .with_first_offset(20)]))
                .with_records(Some(Bytes::copy_from_slice(records)))
        })
        .collect();
    let response = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
        .with_topic(name("orders"))
        .with_partitions(partitions)]);
    let mut body = BytesMut::new();
    response.encode(&mut body, version).unwrap();
    crate::tests::response(correlation_id, &body)
}

fn decode_response(version: i16, frame: &[u8]) -> FetchResponse {
    let mut body = &frame[8..];
    let response = FetchResponse::decode(&mut body, version).unwrap();
    assert!(body.is_empty());
    response
}

#[tokio::test]
async fn a_v8_consumer_gets_the_zstd_batches_in_lz4() {
    let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
    h.client.write_all(&fetch_request(8, 5)).await.unwrap();
    let upstream = next_frame(&mut h.broker).await;
    assert_eq!(
        i16::from_be_bytes([upstream[6], upstream[7]]),
        10,
        "sent at v10"
    );
    let mut body = &upstream[4 + 10..];
    let sent = FetchRequest::decode(&mut body, 10).unwrap();
    assert_eq!(sent.isolation_level, 1);
    assert_eq!((sent.session_id, sent.session_epoch), (0, -1));

    let zstd = batch(Codec::Zstd, 0, 40);
    let gzip = batch(Codec::Gzip, 40, 10);
    let records = [&zstd[..], &gzip].concat();
    h.broker
        .write_all(&fetch_response(10, 5, &[&records, &gzip]))
        .await
        .unwrap();
    let got = decode_response(8, &next_frame(&mut h.client).await);
    let partitions = &got.responses[0].partitions;
    let first = partitions[0].records.as_ref().unwrap();
    let (batches, tail) = batches_of(first);
    assert!(tail.is_empty());
    assert_eq!(
        batches.iter().map(|b| b.1).collect::<Vec<_>>(),
        [Some(Codec::Lz4), Some(Codec::Gzip)]
    );
    assert_eq!(
        batches_of(&records).0[0].2,
        batches[0].2,
        "records as stored"
    );
    assert_eq!(partitions[1].records.as_deref(), Some(&gzip[..]));
    assert_eq!(partitions[0].high_watermark, 1000);
    assert_eq!(partitions[0].last_stable_offset, 900);
    let aborted = partitions[0].aborted_transactions.as_ref().unwrap();
    assert_eq!(
        (aborted[0].producer_id.0, aborted[0].first_offset),
        (4242, 20)
    );
}

#[tokio::test]
async fn old_envelopes_are_written_at_the_clients_version() {
    let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
    // v7: v10 on the wire, relayed as read when nothing needs re-encoding.
    let gzip = batch(Codec::Gzip, 0, 10);
    h.client.write_all(&fetch_request(7, 1)).await.unwrap();
    next_frame(&mut h.broker).await;
    let answer = fetch_response(10, 1, &[&gzip]);
    h.broker.write_all(&answer).await.unwrap();
    assert_eq!(next_frame(&mut h.client).await, answer);
    // v4: no session fields, no log start offset.
    h.client.write_all(&fetch_request(4, 2)).await.unwrap();
    next_frame(&mut h.broker).await;
    h.broker
        .write_all(&fetch_response(10, 2, &[&gzip]))
        .await
        .unwrap();
    let relayed = next_frame(&mut h.client).await;
    assert_eq!(relayed, fetch_response(4, 2, &[&gzip]));
    // A corrupt zstd batch: passed as stored, as the consumer would get it directly.
    let mut corrupt = batch(Codec::Zstd, 0, 10);
    corrupt[CRC_START + 5] ^= 1;
    h.client.write_all(&fetch_request(5, 3)).await.unwrap();
    next_frame(&mut h.broker).await;
    h.broker
        .write_all(&fetch_response(10, 3, &[&corrupt, &gzip]))
        .await
        .unwrap();
    let got = decode_response(5, &next_frame(&mut h.client).await);
    let partitions = &got.responses[0].partitions;
    assert_eq!(partitions[0].records.as_deref(), Some(&corrupt[..]));
    assert_eq!(partitions[1].records.as_deref(), Some(&gzip[..]));
}

#[tokio::test]
async fn v10_and_later_go_as_read_both_ways() {
    let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
    let zstd = batch(Codec::Zstd, 0, 10);
    for version in [10, 11] {
        let request = fetch_request(version, version.into());
        h.client.write_all(&request).await.unwrap();
        assert_eq!(next_frame(&mut h.broker).await, request);
        let answer = fetch_response(version, version.into(), &[&zstd]);
        h.broker.write_all(&answer).await.unwrap();
        assert_eq!(next_frame(&mut h.client).await, answer);
    }
}

// Flexible versions (v12 on): the answer walked, not decoded, and written back at its
// own version with only the re-encoded records changed.

const GZIP_ONLY: &str = "gzip-only-1";
const TOPIC_ID: [u8; 16] = [0x7e; 16];
/// The node the broker names in KIP-951 node endpoints; kpress serves it already.
const NEW_LEADER: i32 = 2;
const NODE_PORT_BASE: u16 = 30000;

/// A proxy whose `[[clients]]` rule says clients called `gzip-only*` read only gzip.
fn shared_with_gzip_only_rule() -> crate::tests::Proxy {
    let rule = kpress_config::ClientRule {
        client_id: Some(
            kpress_config::NamePattern::parse("gzip-only*", |_| true, "client ids").unwrap(),
        ),
        software: None,
        listener: None,
        accept: kpress_config::CodecSet::of([Codec::Gzip]),
        line: 1,
    };
    let snapshot = crate::policy::PolicySnapshot {
        consumers: std::sync::Arc::new(ConsumerSettings {
            clients: kpress_config::ClientRules::new(vec![rule]),
            ..ConsumerSettings::default()
        }),
        ..crate::policy::PolicySnapshot::rules_only(std::sync::Arc::new(RewritePolicy::default()))
    };
    let config = crate::shared::SharedConfig {
        policies: tokio::sync::watch::channel(snapshot).1,
        status: std::sync::Arc::default(),
        topic_configs: std::sync::Arc::new(crate::topic_configs::TopicConfigCache::new(
            std::time::Duration::from_secs(30),
        )),
        settings: crate::tests::settings(1 << 22, NODE_PORT_BASE),
    };
    let (shared, control) = crate::shared::Shared::new(config).unwrap();
    std::mem::forget(control);
    std::sync::Arc::new(crate::listeners::Listeners {
        shared,
        handlers: std::sync::Arc::new(crate::Handlers::kpress()),
    })
}

/// A Fetch request at flexible `version` (request header v2) from `client_id`.
fn flexible_fetch_request(version: i16, correlation_id: i32, client_id: &str) -> Vec<u8> {
    let topic = FetchTopic::default().with_partitions(vec![FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(0)
        .with_partition_max_bytes(1 << 20)]);
    let topic = if version >= kpress_protocol::FETCH_FIRST_TOPIC_ID_VERSION {
        topic.with_topic_id(uuid::Uuid::from_bytes(TOPIC_ID))
    } else {
        topic.with_topic(name("orders"))
    };
    let request = FetchRequest::default()
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![topic]);
    let mut out = Vec::new();
    out.extend_from_slice(&kpress_protocol::api_key::FETCH.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    out.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    out.extend_from_slice(client_id.as_bytes());
    out.push(0); // header tagged fields
    let mut body = BytesMut::new();
    request.encode(&mut body, version).unwrap();
    out.extend_from_slice(&body);
    crate::tests::frame(&out)
}

/// The broker's answer at flexible `version`: one partition per entry of `records`,
/// with tagged fields no Fetch version defines (kept as sent) and, from v16, a new
/// leader's node endpoint.
fn flexible_fetch_response(version: i16, correlation_id: i32, records: &[&[u8]]) -> FetchResponse {
    let unknown =
        |tag| std::collections::BTreeMap::from([(tag, Bytes::from_static(b"a newer broker's"))]);
    let partitions = records
        .iter()
        .enumerate()
        .map(|(i, records)| {
            PartitionData::default()
                .with_partition_index(i as i32)
                .with_high_watermark(1000)
                .with_last_stable_offset(900)
                .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                    .with_producer_id(ProducerId(4242))
                    .with_first_offset(20)]))
                .with_records(Some(Bytes::copy_from_slice(records)))
                .with_unknown_tagged_fields(unknown(40))
        })
        .collect();
    let topic = FetchableTopicResponse::default().with_partitions(partitions);
    let topic = if version >= kpress_protocol::FETCH_FIRST_TOPIC_ID_VERSION {
        topic.with_topic_id(uuid::Uuid::from_bytes(TOPIC_ID))
    } else {
        topic.with_topic(name("orders"))
    };
    let response = FetchResponse::default()
        .with_session_id(correlation_id)
        .with_responses(vec![topic])
        .with_unknown_tagged_fields(unknown(30));
    if version >= 16 {
        response.with_node_endpoints(vec![
            kafka_protocol::messages::fetch_response::NodeEndpoint::default()
                .with_node_id(kafka_protocol::messages::BrokerId(NEW_LEADER))
                .with_host(StrBytes::from_static_str("broker-2.internal"))
                .with_port(9092),
        ])
    } else {
        response
    }
}

/// `response` as the broker's frame: response header v1, then the body.
fn flexible_frame(version: i16, correlation_id: i32, response: &FetchResponse) -> Vec<u8> {
    let mut out = correlation_id.to_be_bytes().to_vec();
    out.push(0); // header tagged fields
    let mut body = BytesMut::new();
    response.encode(&mut body, version).unwrap();
    out.extend_from_slice(&body);
    crate::tests::frame(&out)
}

fn decode_flexible(version: i16, frame: &[u8]) -> FetchResponse {
    assert_eq!(frame[8], 0, "no header tagged fields");
    let mut body = &frame[9..];
    let response = FetchResponse::decode(&mut body, version).unwrap();
    assert!(body.is_empty());
    response
}

#[tokio::test]
async fn a_flexible_answer_is_reencoded_for_a_rule_limited_client_and_its_addresses_rewritten() {
    let proxy = shared_with_gzip_only_rule();
    proxy.cluster.listeners().insert(NEW_LEADER);
    let mut h = start(proxy);
    let lz4 = batch(Codec::Lz4, 0, 30);
    let zstd = batch(Codec::Zstd, 30, 20);
    let gzip = batch(Codec::Gzip, 50, 10);
    let records = [&lz4[..], &zstd, &gzip].concat();
    for version in
        kpress_protocol::FETCH_FIRST_FLEXIBLE_VERSION..=kpress_protocol::FETCH_MAX_VERSION
    {
        let correlation_id = i32::from(version);
        let request = flexible_fetch_request(version, correlation_id, GZIP_ONLY);
        h.client.write_all(&request).await.unwrap();
        assert_eq!(
            next_frame(&mut h.broker).await,
            request,
            "v{version} sent as read"
        );
        let sent = flexible_fetch_response(version, correlation_id, &[&records, &gzip]);
        h.broker
            .write_all(&flexible_frame(version, correlation_id, &sent))
            .await
            .unwrap();
        let frame = next_frame(&mut h.client).await;
        assert_eq!(frame[4..8], correlation_id.to_be_bytes());
        let got = decode_flexible(version, &frame);
        let first = got.responses[0].partitions[0].records.as_ref().unwrap();
        let (batches, tail) = batches_of(first);
        assert!(tail.is_empty());
        assert_eq!(
            batches.iter().map(|b| b.1).collect::<Vec<_>>(),
            [Some(Codec::Gzip); 3],
            "v{version}"
        );
        // Headers and records as stored, only the codec changed.
        let stored = batches_of(&records).0;
        assert_eq!(batches.len(), stored.len());
        for (got, stored) in batches.iter().zip(&stored) {
            assert_eq!((&got.0, &got.2), (&stored.0, &stored.2), "v{version}");
        }
        // Everything else as the broker sent it but the addresses, which are kpress's.
        let mut expected = sent.clone();
        expected.responses[0].partitions[0].records = Some(Bytes::copy_from_slice(first));
        for endpoint in &mut expected.node_endpoints {
            endpoint.host = StrBytes::from_static_str("kpress.test");
            endpoint.port = i32::from(NODE_PORT_BASE) + NEW_LEADER;
        }
        assert_eq!(got, expected, "v{version}");
        assert_eq!(
            got.responses[0].partitions[1].records.as_deref(),
            Some(&gzip[..])
        );
        if version >= 16 {
            assert_eq!(got.node_endpoints.len(), 1);
        }
    }
}

#[tokio::test]
async fn flexible_answers_to_clients_no_rule_limits_go_as_read_records_unread() {
    let proxy = shared_with_gzip_only_rule();
    let mut h = start(proxy);
    // Bytes that are no batches at all: kpress never looks at them on this path.
    let not_batches = b"\x00\x00\x00\x00\x00\x00\x00\x00not a batch, never decoded".to_vec();
    let zstd = batch(Codec::Zstd, 0, 10);
    for version in kpress_protocol::FETCH_FIRST_FLEXIBLE_VERSION..16 {
        let correlation_id = i32::from(version);
        let request = flexible_fetch_request(version, correlation_id, "any-reader");
        h.client.write_all(&request).await.unwrap();
        assert_eq!(next_frame(&mut h.broker).await, request);
        let answer = flexible_frame(
            version,
            correlation_id,
            &flexible_fetch_response(version, correlation_id, &[&not_batches, &zstd]),
        );
        h.broker.write_all(&answer).await.unwrap();
        assert_eq!(next_frame(&mut h.client).await, answer, "v{version}");
    }
}

#[test]
fn topic_ids_kpress_has_no_name_for_are_keyed_apart_from_every_topic_name() {
    let key = super::response::unnamed_topic(&[0xab; 16]);
    assert_eq!(&*key, &format!("id:{}", "ab".repeat(16)));
    // ':' is no topic name character, so no topic's name is such a key.
    assert!(kpress_config::is_legal_topic_char('a') && !kpress_config::is_legal_topic_char(':'));
}
