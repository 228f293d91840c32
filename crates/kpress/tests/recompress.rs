//! `kpress recompress` on files of batches built here: the binary as an operator runs it.

mod common;

use common::recompress;
use kpress_batch::batches;
use kpress_batch::builder::{encode_records, plain_records, BatchBuilder, Record};
use kpress_codec::Codec;

fn records(n: usize, salt: usize) -> Vec<Record> {
    (0..n)
        .map(|i| {
            Record::value(format!(
                "{{\"host\":\"web-{}\",\"status\":200,\"bytes\":{},\"path\":\"/api/v1/items/{}\"}}",
                i % 5,
                i * 37 + salt,
                i + salt
            ))
        })
        .collect()
}

/// A segment of gzip, lz4, none and zstd batches plus a control batch, and the
/// records of each.
fn segment() -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut seg = Vec::new();
    let mut expected = Vec::new();
    let mut offset = 0;
    for (i, codec) in [Codec::Gzip, Codec::Lz4, Codec::None, Codec::Zstd]
        .into_iter()
        .enumerate()
    {
        let recs = records(100, i);
        let batch = BatchBuilder {
            base_offset: offset,
            ..BatchBuilder::codec(codec)
        }
        .build(&recs)
        .unwrap();
        offset += recs.len() as i64;
        seg.extend_from_slice(&batch);
        expected.push(encode_records(&recs));
    }
    let control = BatchBuilder {
        base_offset: offset,
        extra_attributes: 0x30,
        ..BatchBuilder::default()
    }
    .build(&[Record::value(vec![0, 0, 0, 0, 0, 0])])
    .unwrap();
    seg.extend_from_slice(&control);
    (seg, expected)
}

#[test]
fn rewrites_a_segment_into_zstd_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("00000000000000000000.log");
    let output = dir.path().join("out.log");
    let (seg, expected) = segment();
    std::fs::write(&input, &seg).unwrap();

    let run = recompress(
        &input,
        &output,
        &[
            "--compression",
            "zstd",
            "--property",
            "compression.zstd.level=19",
        ],
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("batches rewritten: 3"), "{stdout}");
    assert!(stdout.contains("same_codec: 1"), "{stdout}");
    assert!(stdout.contains("control_batch: 1"), "{stdout}");
    assert!(
        stdout.contains(&format!("bytes in: {}", seg.len())),
        "{stdout}"
    );
    assert!(
        stdout.contains("ratio: ") && stdout.contains("elapsed: "),
        "{stdout}"
    );

    let out = std::fs::read(&output).unwrap();
    assert!(
        stdout.contains(&format!("bytes out: {}", out.len())),
        "{stdout}"
    );
    assert!(out.len() < seg.len());
    let rewritten: Vec<_> = batches(&out).map(|b| b.unwrap()).collect();
    assert_eq!(rewritten.len(), 5);
    let originals: Vec<_> = batches(&seg).map(|b| b.unwrap()).collect();
    for (i, (new, old)) in rewritten.iter().zip(&originals).enumerate() {
        assert!(new.crc_is_valid());
        assert_eq!(new.base_offset(), old.base_offset());
        if i < 4 {
            assert_eq!(new.codec(), Some(Codec::Zstd));
            assert_eq!(plain_records(new), expected[i]);
        } else {
            assert_eq!(new.bytes(), old.bytes(), "the control batch is untouched");
        }
    }

    // `always` re-encodes the zstd batch too.
    let run = recompress(
        &input,
        &output,
        &["--compression", "zstd", "--recompress", "always"],
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success());
    assert!(stdout.contains("batches rewritten: 4"), "{stdout}");

    // --allow-growth is not taken: a usage error naming what to write instead.
    for extra in [
        &["--allow-growth"][..],
        &["--allow-growth", "--only-if-smaller"],
    ] {
        let args = [
            &["--compression", "zstd", "--recompress", "always"][..],
            extra,
        ]
        .concat();
        let run = recompress(&input, &output, &args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("unexpected argument '--allow-growth'")
                && stderr.contains("--only-if-smaller"),
            "{stderr}"
        );
        assert!(run.stdout.is_empty());
    }
}

#[test]
fn producer_passes_everything_through() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.log");
    let output = dir.path().join("out.log");
    let (mut seg, _) = segment();
    seg.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]); // truncated tail
    std::fs::write(&input, &seg).unwrap();
    let run = recompress(&input, &output, &["--compression", "producer"]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}");
    assert!(stdout.contains("batches rewritten: 0"), "{stdout}");
    assert!(stdout.contains("policy_producer: 4"), "{stdout}");
    assert!(stdout.contains("malformed: 1"), "{stdout}");
    assert_eq!(std::fs::read(&output).unwrap(), seg);
}

#[test]
fn bad_options_are_named_with_their_allowed_range() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.log");
    let output = dir.path().join("out.log");
    std::fs::write(&input, segment().0).unwrap();
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &[
                "--compression",
                "zstd",
                "--property",
                "compression.zstd.level=23",
            ],
            &["compression.zstd.level", "23", "-131072..22"],
        ),
        (
            &[
                "--compression",
                "lz4",
                "--property",
                "compression.lz4.block=9",
            ],
            &["compression.lz4.block", "9", "4..7"],
        ),
        (
            &[
                "--compression",
                "zstd",
                "--property",
                "compression.zstd.levle=3",
            ],
            &["compression.zstd.levle"],
        ),
        (&["--compression", "brotli"], &["brotli", "producer"]),
        (
            &["--compression", "gzip", "--recompress", "sometimes"],
            &["sometimes", "codec-differs"],
        ),
    ];
    for (args, needles) in cases {
        let run = recompress(&input, &output, args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?}");
        for needle in needles {
            assert!(stderr.contains(needle), "{args:?}: {stderr}");
        }
        assert!(!output.exists(), "nothing is written on a bad option");
    }
}
