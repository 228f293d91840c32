//! The Produce handler on a connection served over in-memory streams: what reaches
//! the broker for each request (tests/proxy.rs runs a real broker).

use std::sync::Arc;
use std::time::Duration;

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_batch::{PolicyLookup, RewritePolicy};
use kpress_codec::{Codec, CompressionOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::tests::*;

#[tokio::test]
async fn produce_is_rewritten_to_the_policy_codec() {
    let policy = RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default());
    let mut h = start(shared_with(policy, 1 << 22, 30000));
    let batch = gzip_batch();
    let produce = produce_v7(9, -1, &batch);
    h.client.write_all(&produce).await.unwrap();
    let forwarded = read_exact_frame(&mut h.broker).await;
    assert_ne!(forwarded, produce);
    // Same header; the records field now holds one zstd batch.
    let records_at = produce.len() - batch.len();
    assert_eq!(forwarded[4..records_at - 4], produce[4..records_at - 4]);
    let new_records = &forwarded[records_at..];
    let stored = kpress_batch::RecordBatch::parse(new_records).unwrap();
    assert_eq!(stored.codec(), Some(Codec::Zstd));
    assert_eq!(stored.records_count(), 50);
    assert!(stored.crc_is_valid());
    h.broker.write_all(&response(9, b"ok")).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.client).await, response(9, b"ok"));
}

#[tokio::test]
async fn produce_v2_is_relayed_untouched_and_its_acks_honoured() {
    let policy = RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default());
    let mut h = start(shared_with(policy, 1 << 22, 30000));
    // v0-v2 body: acks, timeout, then topics (content irrelevant to kpress).
    let mut acks0 = 0i16.to_be_bytes().to_vec();
    acks0.extend_from_slice(b"rest of a v2 body");
    let mut acks1 = 1i16.to_be_bytes().to_vec();
    acks1.extend_from_slice(b"rest of a v2 body");
    let first = request(0, 2, 1, &acks0);
    let second = request(0, 2, 2, &acks1);
    h.client.write_all(&first).await.unwrap();
    h.client.write_all(&second).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.broker).await, first);
    assert_eq!(read_exact_frame(&mut h.broker).await, second);
    h.broker.write_all(&response(2, b"ok")).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.client).await, response(2, b"ok"));
}

#[tokio::test]
async fn zstd_is_not_written_into_produce_v3_to_v6() {
    let policy = RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default());
    let mut h = start(shared_with(policy, 1 << 22, 30000));
    let batch = gzip_batch();
    for version in 3..=6 {
        let produce = produce(version, version.into(), -1, &batch);
        h.client.write_all(&produce).await.unwrap();
        // Forwarded as sent: the broker refuses zstd below v7.
        assert_eq!(read_exact_frame(&mut h.broker).await, produce, "v{version}");
    }
    let v7 = produce_v7(7, -1, &batch);
    h.client.write_all(&v7).await.unwrap();
    assert_ne!(read_exact_frame(&mut h.broker).await, v7, "v7 gets zstd");
}

#[tokio::test]
async fn a_partition_of_two_batches_is_forwarded_untouched() {
    let policy = RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default());
    let mut h = start(shared_with(policy, 1 << 22, 30000));
    let batch = gzip_batch();
    let produce = produce_v7(1, -1, &[&batch[..], &batch[..]].concat());
    h.client.write_all(&produce).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.broker).await, produce);
}

#[tokio::test]
async fn a_rewrite_over_max_frame_bytes_forwards_the_original() {
    // 40 KiB frames: a gzip batch of random data grows when stored uncompressed.
    let mut settings = settings(1 << 22, 30000);
    settings.limits.max_frame_bytes = 40 << 10;
    let policy = RewritePolicy::to_codec(Codec::None, CompressionOptions::default());
    let mut h = start(shared_from(policy, settings));
    let text: Vec<Record> = (0..2000)
        .map(|i| Record::value(format!("{i:08} the same words again and again")))
        .collect();
    let batch = BatchBuilder::codec(Codec::Gzip).build(&text).unwrap();
    let produce = produce_v7(1, -1, &batch);
    assert!(produce.len() < 40 << 10, "the request itself fits");
    h.client.write_all(&produce).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.broker).await, produce);
}

#[tokio::test(start_paused = true)]
async fn a_produce_with_no_slot_within_the_wait_limit_goes_on_as_sent() {
    let mut settings = settings(1 << 22, 30000);
    settings.produce.max_rewrite_wait = Duration::from_millis(500);
    let policy = RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default());
    let shared = shared_from(policy, settings);
    // Every rewrite slot taken for longer than a request may wait.
    let held = shared.work_slots.hold_all().await;
    let mut h = start(Arc::clone(&shared));
    let sent = produce_v7(1, 0, &gzip_batch());
    h.client.write_all(&sent).await.unwrap();
    let forwarded = tokio::time::timeout(Duration::from_secs(2), read_exact_frame(&mut h.broker))
        .await
        .expect("forwarded once the wait limit passed");
    assert_eq!(forwarded, sent, "forwarded byte for byte");
    drop(held);
    // With a slot free, the next one is rewritten.
    h.client
        .write_all(&produce_v7(2, 0, &gzip_batch()))
        .await
        .unwrap();
    let rewritten = read_exact_frame(&mut h.broker).await;
    assert_eq!(forwarded_codec(&rewritten), Some(Codec::Zstd));
    drop(h.client);
    h.task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_produce_past_the_wait_limit_takes_the_fallback_on_an_express_slot() {
    let mut settings = settings(1 << 22, 30000);
    settings.produce.max_rewrite_wait = Duration::from_millis(500);
    let policies: Arc<dyn PolicyLookup> = Arc::new(crate::test_policies::WithFallback::codecs(
        Codec::Zstd,
        Codec::Lz4,
    ));
    let shared = shared_with_handlers(policies, settings, crate::Handlers::kpress());
    // Every regular slot taken for longer than a request may wait.
    let held = shared.work_slots.hold_regular().await;
    let mut h = start(Arc::clone(&shared));
    h.client
        .write_all(&produce_v7(1, 0, &gzip_batch()))
        .await
        .unwrap();
    let forwarded = tokio::time::timeout(Duration::from_secs(2), read_exact_frame(&mut h.broker))
        .await
        .expect("forwarded once the wait limit passed");
    assert_eq!(
        forwarded_codec(&forwarded),
        Some(Codec::Lz4),
        "the fallback"
    );
    // No express slot free either: as sent.
    let express = shared.work_slots.hold_express();
    let sent = produce_v7(2, 0, &gzip_batch());
    h.client.write_all(&sent).await.unwrap();
    let forwarded = tokio::time::timeout(Duration::from_secs(2), read_exact_frame(&mut h.broker))
        .await
        .expect("forwarded once the wait limit passed");
    assert_eq!(forwarded, sent, "forwarded byte for byte");
    drop((held, express));
    drop(h.client);
    h.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_produce_without_codec_work_skips_the_rewrite_slots() {
    // Into gzip: a gzip batch takes no codec work, an uncompressed one does.
    let policy = RewritePolicy::to_codec(Codec::Gzip, CompressionOptions::default());
    let shared = shared_with(policy, 1 << 22, 30000);
    // Every rewrite slot taken: only a request that needs none goes on.
    let held = shared.work_slots.hold_all().await;
    let mut h = start(Arc::clone(&shared));
    let passing = produce_v7(1, 0, &gzip_batch());
    h.client.write_all(&passing).await.unwrap();
    assert_eq!(
        read_exact_frame(&mut h.broker).await,
        passing,
        "forwarded byte for byte"
    );
    let values: Vec<Record> = (0..50)
        .map(|i| Record::value(format!("value {i} value value value value")))
        .collect();
    let plain = BatchBuilder::codec(Codec::None).build(&values).unwrap();
    h.client.write_all(&produce_v7(2, 0, &plain)).await.unwrap();
    // Nothing arrives while the slots are held (nothing read, so nothing lost).
    let mut first = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(200), h.broker.read(&mut first))
            .await
            .is_err(),
        "a rewrite waits for a slot"
    );
    drop(held);
    let rewritten = read_exact_frame(&mut h.broker).await;
    assert_eq!(rewritten[8..12], 2i32.to_be_bytes(), "correlation id");
    assert_eq!(forwarded_codec(&rewritten), Some(Codec::Gzip));
    drop(h.client);
    h.task.await.unwrap().unwrap();
}
