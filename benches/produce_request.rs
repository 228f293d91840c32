//! The whole per-request path of a Produce request through kpress, on requests real
//! clients sent (`benches/captured/`, written by `tests/capture_requests.rs`): the
//! request header read, `kpress_protocol::rewrite_produce_with` walking the body and
//! splicing each partition's records through `Recompressor::rewrite_partition` within
//! the request's `ProduceAllowance`, and the new frame built — as kpress-proxy's
//! Produce handler (`apis/produce/rewrite.rs`) composes them, without its metrics
//! bookkeeping. Against it: the bare decompress and compress calls on the same
//! batches' payloads, run in turn with it.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kpress_batch::{
    Outcome, PassReason, ProduceAllowance, RecompressMode, Recompressor, RecordBatch,
    RewritePolicy, Target,
};
use kpress_benches::{bench_against_floor, ratio_log, requests_log, short_runs, BareCodecs};
use kpress_codec::{Codec, CompressionOptions};
use kpress_config::MAX_REQUEST_DECOMPRESSED_BYTES_DEFAULT;
use kpress_protocol::api_key;
use kpress_protocol::frame::peek_request_header;
use kpress_protocol::{produce_allows_zstd, rewrite_produce_with, RecordsRewriter};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One captured Produce request: its frame body (size prefix removed), header length
/// and version.
struct Request {
    body: Vec<u8>,
    header_len: usize,
    api_version: i16,
}

/// The Produce requests of `benches/captured/<name>.bin` (frames back to back).
fn captured(name: &str) -> Vec<Request> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("captured")
        .join(format!("{name}.bin"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e} (tests/capture_requests.rs writes it)",
            path.display()
        )
    });
    let mut requests = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let size = i32::from_be_bytes(rest[..4].try_into().expect("a size prefix"));
        let size = usize::try_from(size).expect("a frame size");
        let body = &rest[4..4 + size];
        let header = peek_request_header(body).expect("a request header");
        assert_eq!(
            header.api_key,
            api_key::PRODUCE,
            "{name}: a Produce request"
        );
        requests.push(Request {
            body: body.to_vec(),
            header_len: header.header_len.expect("Produce's header length"),
            api_version: header.api_version,
        });
        rest = &rest[4 + size..];
    }
    requests
}

/// Names every v13 topic id (Java 4.1 sends ids): the proxy asks the brokers' metadata.
fn any_topic(_: &[u8; 16]) -> Option<Arc<str>> {
    Some(Arc::from("captured"))
}

/// Every partition's records field of `request`, as the rewrite sees them.
fn records_fields(request: &Request) -> Vec<Vec<u8>> {
    struct Collect(Vec<Vec<u8>>);
    impl RecordsRewriter for Collect {
        fn rewrite_records(&mut self, _: &str, records: &[u8], _: &mut Vec<u8>) -> bool {
            self.0.push(records.to_vec());
            false
        }
    }
    let mut collect = Collect(Vec::new());
    rewrite_produce_with(
        &request.body,
        request.header_len,
        request.api_version,
        &any_topic,
        &mut collect,
    )
    .expect("a valid Produce request");
    collect.0
}

/// Each partition through the policy, as kpress-proxy's `PolicyRewriter` does it.
struct Rewriter<'a> {
    recompressor: &'a mut Recompressor,
    policy: &'a RewritePolicy,
    request: ProduceAllowance,
    outcomes: Vec<Outcome>,
}

impl RecordsRewriter for Rewriter<'_> {
    fn rewrite_records(&mut self, _topic: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        let mut outcome = None;
        self.recompressor.rewrite_partition(
            records,
            self.policy,
            &mut self.request,
            out,
            |o, _| outcome = Some(*o),
        );
        self.outcomes.extend(outcome);
        matches!(outcome, Some(Outcome::Rewritten { .. }))
    }
}

/// Rewrites one request; the new frame's length (0: the original goes on) and outcomes.
fn rewrite(
    recompressor: &mut Recompressor,
    policy: &RewritePolicy,
    request: &Request,
) -> (usize, Vec<Outcome>) {
    let mut rewriter = Rewriter {
        recompressor,
        policy,
        request: ProduceAllowance::new(
            produce_allows_zstd(request.api_version),
            MAX_REQUEST_DECOMPRESSED_BYTES_DEFAULT,
        ),
        outcomes: Vec::new(),
    };
    let splice = rewrite_produce_with(
        &request.body,
        request.header_len,
        request.api_version,
        &any_topic,
        &mut rewriter,
    )
    .expect("a valid Produce request");
    (splice.frame.map_or(0, |f| f.len()), rewriter.outcomes)
}

fn policy(to: Codec, options: &CompressionOptions) -> RewritePolicy {
    RewritePolicy {
        target: Target::Codec {
            codec: to,
            options: options.clone(),
        },
        mode: RecompressMode::CodecDiffers,
        ..RewritePolicy::default()
    }
}

/// Captured files and the target each is rewritten into; the label says the pair.
fn cases() -> Vec<(String, String, Codec)> {
    let mut cases = Vec::new();
    for dataset in ["apache", "nginx"] {
        for client in ["java", "kcat"] {
            let files = [
                ("gzip-to-zstd", "gzip", Codec::Zstd),
                ("lz4-to-zstd", "lz4", Codec::Zstd),
                ("lz4-to-gzip", "lz4", Codec::Gzip),
                ("none-to-lz4", "none", Codec::Lz4),
                ("pass-through-lz4", "lz4", Codec::Lz4),
            ];
            let java_zstd = [("pass-through-zstd", "zstd", Codec::Zstd)];
            let extra: &[_] = if client == "java" { &java_zstd } else { &[] };
            for &(label, source, to) in files.iter().chain(extra) {
                cases.push((
                    format!("{client}-{source}-{dataset}"),
                    format!("{client}-{dataset}/{label}"),
                    to,
                ));
            }
        }
    }
    cases
}

fn produce_request(c: &mut Criterion) {
    let options = CompressionOptions::default();
    for (name, label, to) in cases() {
        let requests = captured(&name);
        let policy = policy(to, &options);
        let fields: Vec<Vec<u8>> = requests.iter().flat_map(records_fields).collect();
        assert!(!fields.is_empty(), "{label}: no records found");
        let batches: Vec<RecordBatch<'_>> = fields
            .iter()
            .map(|f| RecordBatch::parse(f).expect("one batch per partition"))
            .collect();
        let request_bytes: usize = requests.iter().map(|r| r.body.len() + 4).sum();

        let mut recompressor = Recompressor::new();
        let (mut frames_out, mut rewritten) = (0, 0);
        for request in &requests {
            let (frame_len, outcomes) = rewrite(&mut recompressor, &policy, request);
            frames_out += if frame_len == 0 {
                request.body.len() + 4
            } else {
                frame_len
            };
            for outcome in outcomes {
                match outcome {
                    Outcome::Rewritten { .. } => rewritten += 1,
                    Outcome::PassedThrough(PassReason::SameCodec) => {}
                    other => panic!("{label}: {other:?}"),
                }
            }
        }
        let pass_through = batches.iter().all(|b| b.codec() == Some(to));
        assert!(
            pass_through || rewritten == batches.len(),
            "{label}: every batch rewritten"
        );
        ratio_log("produce_request", &label, request_bytes, frames_out);
        requests_log("produce_request", &label, requests.len());

        let mut group = c.benchmark_group("produce_request");
        group.throughput(Throughput::Bytes(request_bytes as u64));
        eprintln!(
            "{label}: {} requests, {} batches, {request_bytes} bytes",
            requests.len(),
            batches.len()
        );
        let mut kpress = || {
            for request in &requests {
                black_box(rewrite(&mut recompressor, &policy, black_box(request)));
            }
        };
        if pass_through {
            group.bench_function(BenchmarkId::new("kpress", &label), |b| b.iter(&mut kpress));
        } else {
            // The floor: the same two codec calls on the batches' payloads alone, run in
            // turn with the rewrite within each sample, in CPU time (`alternating`).
            let mut codecs = BareCodecs::new(to, &options);
            let mut bare = || {
                for batch in &batches {
                    codecs.recode(batch.codec().expect("a known codec"), batch.bytes());
                }
            };
            bench_against_floor(&mut group, "kpress", &label, &mut kpress, &mut bare);
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = short_runs(Duration::from_secs(2));
    targets = produce_request
}
criterion_main!(benches);
