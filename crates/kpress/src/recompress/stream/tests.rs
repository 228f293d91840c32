use super::*;
use kpress_batch::builder::{seal, BatchBuilder, Record};
use kpress_batch::{RecompressMode, Target};
use kpress_codec::{Codec, CompressionOptions};
use std::path::PathBuf;

/// Batches real clients produced and a real broker stored: the fuzz corpus seeds
/// `tests/capture_corpus.rs` wrote (each behind a policy byte and a request byte),
/// with the inputs fuzzing found beside them, back to back.
fn corpus_segment() -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/batch_rewrite");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let mut segment = Vec::new();
    for file in files {
        let seed = std::fs::read(&file).unwrap();
        if let [_, _, batch @ ..] = &seed[..] {
            segment.extend_from_slice(batch);
        }
    }
    assert!(segment.len() > 100_000, "the corpus holds real batches");
    segment
}

fn records(n: usize, salt: usize) -> Vec<Record> {
    (0..n)
        .map(|i| {
            Record::value(format!(
                "10.0.{salt}.{i} - - [24/Nov/2026:11:{:02}:00 +0000] \"GET /a/{i} HTTP/1.1\" 200 {}",
                i % 60,
                i * salt
            ))
        })
        .collect()
}

/// A magic 1 message set entry of `size` bytes in all (at least 34).
fn legacy_entry(size: usize) -> Vec<u8> {
    let value_len = size - 34;
    let mut m = Vec::with_capacity(size);
    m.extend_from_slice(&7i64.to_be_bytes());
    m.extend_from_slice(&((size - 12) as i32).to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes());
    m.push(1);
    m.push(0);
    m.extend_from_slice(&0i64.to_be_bytes());
    m.extend_from_slice(&(-1i32).to_be_bytes());
    m.extend_from_slice(&(value_len as i32).to_be_bytes());
    m.resize(size, b'v');
    m
}

/// Batches of every codec, a control batch, a corrupt CRC and legacy entries (one too
/// large to be held), as a broker's segment could hold them.
fn built_segment() -> Vec<u8> {
    let mut segment = Vec::new();
    for (i, codec) in Codec::ALL.into_iter().cycle().take(23).enumerate() {
        let batch = BatchBuilder {
            base_offset: i as i64 * 100,
            ..BatchBuilder::codec(codec)
        }
        .build(&records(1 + i * 37 % 300, i))
        .unwrap();
        segment.extend_from_slice(&batch);
        match i {
            3 => segment.extend(legacy_entry(200)),
            5 => segment.extend(
                BatchBuilder {
                    extra_attributes: 0x30,
                    ..BatchBuilder::codec(Codec::None)
                }
                .build(&records(1, 0))
                .unwrap(),
            ),
            8 => {
                let mut bad = batch.clone();
                let last = bad.len() - 1;
                bad[last] ^= 0x40;
                segment.extend(bad);
            }
            11 => segment.extend(legacy_entry(MAX_HELD_COPY_BYTES + 4096)),
            _ => {}
        }
    }
    segment
}

/// Ways a segment is damaged: cut anywhere, a bad length, garbage after it.
fn damaged(segment: &[u8]) -> Vec<Vec<u8>> {
    let mut inputs = Vec::new();
    for cut in [
        0,
        1,
        16,
        17,
        60,
        61,
        62,
        1000,
        segment.len() / 3,
        segment.len() - 1,
    ] {
        inputs.push(segment[..cut.min(segment.len())].to_vec());
    }
    let mut negative = segment[..segment.len() / 2].to_vec();
    negative.extend_from_slice(&[
        0, 0, 0, 0, 0, 0, 0, 9, 0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 0, 2,
    ]);
    negative.extend_from_slice(&segment[..5000]);
    inputs.push(negative);
    let mut huge = segment.to_vec();
    huge.extend_from_slice(&[
        0, 0, 0, 0, 0, 0, 0, 9, 0x7f, 0xff, 0xff, 0xf0, 0, 0, 0, 0, 2,
    ]);
    huge.extend_from_slice(&[0xab; 300]);
    inputs.push(huge);
    let mut short_v2 = segment[..segment.len() / 4].to_vec();
    short_v2.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 20, 0, 0, 0, 0, 2, 1, 2, 3]);
    short_v2.extend_from_slice(&[1; 40]);
    inputs.push(short_v2);
    // A valid CRC over damaged records reaches the codecs and the record walk.
    let mut resealed = BatchBuilder::codec(Codec::Gzip)
        .build(&records(50, 3))
        .unwrap();
    let mid = resealed.len() / 2;
    resealed[mid] ^= 0x10;
    seal(&mut resealed);
    inputs.push([&segment[..2000.min(segment.len())], &resealed, segment].concat());
    inputs
}

fn policies() -> Vec<RewritePolicy> {
    let to = |codec, mode, only_if_smaller| RewritePolicy {
        target: Target::Codec {
            codec,
            options: CompressionOptions::default(),
        },
        mode,
        only_if_smaller,
        ..RewritePolicy::default()
    };
    vec![
        to(Codec::Zstd, RecompressMode::CodecDiffers, false),
        to(Codec::Lz4, RecompressMode::Always, true),
        to(Codec::None, RecompressMode::CodecDiffers, false),
        RewritePolicy {
            target: Target::Producer,
            ..RewritePolicy::default()
        },
    ]
}

/// Reads at most a few bytes per call, as a pipe may.
struct Trickle<'a>(&'a [u8]);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.0.len()).min(7);
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

fn pipelines() -> Vec<Pipeline> {
    vec![
        Pipeline::for_threads(1),
        Pipeline::for_threads(2),
        // One entry per job in a window narrower than one batch; jobs of several
        // entries in a window of several jobs.
        Pipeline {
            threads: 3,
            job_bytes: 1,
            window_jobs: 1,
            window_bytes: 1,
        },
        Pipeline {
            threads: 3,
            job_bytes: 20_000,
            window_jobs: 5,
            window_bytes: 50_000,
        },
    ]
}

fn whole(input: &[u8], policy: &RewritePolicy) -> (Vec<u8>, RewriteStats) {
    let mut out = Vec::new();
    let mut stats = RewriteStats::default();
    Recompressor::new().rewrite_records(input, policy, &mut out, &mut stats);
    (out, stats)
}

/// The streamed output and counts are exactly `rewrite_records`' over the whole input.
fn assert_same_as_whole(input: &[u8], policy: &RewritePolicy, pipeline: Pipeline, trickle: bool) {
    let (whole, whole_stats) = whole(input, policy);
    let mut streamed = Vec::new();
    let len = input.len() as u64;
    let stats = if trickle {
        recompress_stream(&mut Trickle(input), len, &mut streamed, policy, pipeline)
    } else {
        recompress_stream(&mut &input[..], len, &mut streamed, policy, pipeline)
    }
    .unwrap();
    assert!(
        streamed == whole,
        "{pipeline:?} {}: {} bytes streamed, {} whole",
        policy.target.name(),
        streamed.len(),
        whole.len()
    );
    assert_eq!(stats, whole_stats, "{pipeline:?} {}", policy.target.name());
}

#[test]
fn streams_real_segments_as_rewrite_records_does() {
    let segment = corpus_segment();
    for policy in policies() {
        for pipeline in pipelines() {
            assert_same_as_whole(&segment, &policy, pipeline, false);
        }
    }
}

#[test]
fn streams_damaged_segments_as_rewrite_records_does() {
    let real = corpus_segment();
    let built = built_segment();
    let policy = &policies()[0];
    for input in damaged(&real).iter().chain(&damaged(&built)) {
        for pipeline in pipelines() {
            assert_same_as_whole(input, policy, pipeline, false);
        }
    }
    for policy in policies() {
        assert_same_as_whole(&built, &policy, pipelines()[3], false);
    }
}

#[test]
fn short_reads_and_a_wrong_length_hint_change_nothing() {
    let built = built_segment();
    let policy = &policies()[0];
    assert_same_as_whole(&built, policy, pipelines()[1], true);
    assert_same_as_whole(&built[..built.len() - 3], policy, pipelines()[0], true);
    // The hint only bounds what is reserved ahead of reading.
    let (whole, whole_stats) = whole(&built, policy);
    for hint in [0, 10, u64::MAX] {
        let mut streamed = Vec::new();
        let stats = recompress_stream(&mut &built[..], hint, &mut streamed, policy, pipelines()[1])
            .unwrap();
        assert!(streamed == whole, "hint {hint}");
        assert_eq!(stats, whole_stats);
    }
}

#[test]
fn an_empty_input_writes_nothing() {
    let mut out = Vec::new();
    let stats = recompress_stream(
        &mut &b""[..],
        0,
        &mut out,
        &policies()[0],
        Pipeline::for_threads(2),
    )
    .unwrap();
    assert!(out.is_empty());
    assert_eq!(stats, RewriteStats::default());
}

/// A writer that fails after a few bytes, as a full disk does.
struct FailingWriter(usize);

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.0 == 0 {
            return Err(io::Error::other("disk full"));
        }
        let n = buf.len().min(self.0);
        self.0 -= n;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_write_error_ends_the_stream_with_it() {
    let built = built_segment();
    for pipeline in pipelines() {
        let err = recompress_stream(
            &mut &built[..],
            built.len() as u64,
            &mut FailingWriter(10_000),
            &policies()[0],
            pipeline,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full", "{pipeline:?}");
    }
}
