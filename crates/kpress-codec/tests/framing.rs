//! Each option changes the output the way its name says, and the framing is the one
//! Kafka's clients expect (parsed here byte by byte).

mod common;

use common::{compress, decompress, log_payload, options};
use kpress_codec::options::*;
use kpress_codec::Codec;

fn be_i32(bytes: &[u8]) -> usize {
    i32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().unwrap())
}

#[test]
fn gzip_levels_trade_size_and_header_is_one_plain_member() {
    let input = log_payload(1 << 20);
    let sizes: Vec<usize> = [1, 6, 9]
        .iter()
        .map(|&level| {
            let gz = compress(Codec::Gzip, &options(&[(GZIP_LEVEL, level)]), &input);
            // ID1 ID2 CM=8, no flags, MTIME 0, then the 8-byte trailer ends the payload.
            assert_eq!(gz[..8], [0x1f, 0x8b, 8, 0, 0, 0, 0, 0]);
            let trailer = &gz[gz.len() - 8..];
            assert_eq!(le_u32(trailer), crc32fast::hash(&input));
            assert_eq!(le_u32(&trailer[4..]) as usize, input.len());
            gz.len()
        })
        .collect();
    eprintln!("gzip sizes at levels 1/6/9: {sizes:?} of {}", input.len());
    assert!(sizes[0] > sizes[1] && sizes[1] >= sizes[2], "{sizes:?}");
    // -1 is Kafka's name for zlib's default, level 6.
    assert_eq!(
        compress(Codec::Gzip, &options(&[(GZIP_LEVEL, -1)]), &input),
        compress(Codec::Gzip, &options(&[(GZIP_LEVEL, 6)]), &input)
    );
}

#[test]
fn gzip_buffer_leaves_the_deflate_stream_identical() {
    let input = log_payload(300_000);
    for level in [1, 6, 9] {
        let reference = compress(
            Codec::Gzip,
            &options(&[(GZIP_LEVEL, level), (GZIP_BUFFER, 8192)]),
            &input,
        );
        for buffer in [512, 777, 65536, 1 << 20] {
            let gz = compress(
                Codec::Gzip,
                &options(&[(GZIP_LEVEL, level), (GZIP_BUFFER, buffer)]),
                &input,
            );
            assert!(gz == reference, "level {level}, buffer {buffer}");
        }
    }
}

/// The compressed length of every xerial chunk after the 16-byte header.
fn xerial_chunks(stream: &[u8]) -> Vec<usize> {
    assert_eq!(
        stream[..16],
        [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1]
    );
    let mut chunks = Vec::new();
    let mut rest = &stream[16..];
    while !rest.is_empty() {
        let len = be_i32(rest);
        chunks.push(len);
        rest = &rest[4 + len..];
    }
    chunks
}

#[test]
fn snappy_block_sets_the_xerial_chunk_count() {
    let input = log_payload(200_000);
    for block in [1024usize, 4096, 32768, 1 << 20] {
        let stream = compress(
            Codec::Snappy,
            &options(&[(SNAPPY_BLOCK, block as i64)]),
            &input,
        );
        let chunks = xerial_chunks(&stream);
        assert_eq!(chunks.len(), input.len().div_ceil(block), "block {block}");
        // Each chunk is a raw snappy block declaring its share of the input.
        let mut rest = &stream[16..];
        for (i, &len) in chunks.iter().enumerate() {
            let raw = &rest[4..4 + len];
            let expected = block.min(input.len() - i * block);
            assert_eq!(snap::raw::decompress_len(raw).unwrap(), expected);
            rest = &rest[4 + len..];
        }
    }
}

/// An LZ4 frame's BD byte and its blocks as (stored, size).
fn lz4_blocks(frame: &[u8]) -> (u8, Vec<(bool, usize)>) {
    assert_eq!(frame[..5], [0x04, 0x22, 0x4D, 0x18, 0x60]);
    let bd = frame[5];
    let mut blocks = Vec::new();
    let mut pos = 7;
    loop {
        let size = le_u32(&frame[pos..]);
        pos += 4;
        if size == 0 {
            break;
        }
        let len = (size & 0x7FFF_FFFF) as usize;
        blocks.push((size & 0x8000_0000 != 0, len));
        pos += len;
    }
    assert_eq!(pos, frame.len(), "nothing after the end mark");
    (bd, blocks)
}

#[test]
fn lz4_block_sets_the_descriptor_and_block_count() {
    let input = log_payload(5 << 20);
    for code in 4..=7u8 {
        let frame = compress(Codec::Lz4, &options(&[(LZ4_BLOCK, code.into())]), &input);
        let (bd, blocks) = lz4_blocks(&frame);
        assert_eq!(bd, code << 4);
        // HC byte: second byte of xxh32 over FLG and BD, as Java computes it.
        let block_bytes = 1usize << (8 + 2 * code);
        assert_eq!(
            blocks.len(),
            input.len().div_ceil(block_bytes),
            "code {code}"
        );
        assert!(blocks.iter().all(|&(stored, _)| !stored));
    }
}

#[test]
fn lz4_hc_levels_differ_from_the_fast_level_and_compress_smaller() {
    let input = log_payload(1 << 20);
    let fast = compress(Codec::Lz4, &options(&[(LZ4_LEVEL, 9)]), &input);
    let mut sizes = vec![(9, fast.len())];
    for level in [1, 3, 12, 17] {
        let hc = compress(Codec::Lz4, &options(&[(LZ4_LEVEL, level)]), &input);
        assert_ne!(hc, fast, "level {level}");
        sizes.push((level, hc.len()));
        if level >= 3 {
            assert!(hc.len() < fast.len(), "level {level}: {sizes:?}");
        }
        assert_eq!(decompress(Codec::Lz4, &hc, input.len()).unwrap(), input);
    }
    eprintln!("lz4 sizes (level, bytes) of {}: {sizes:?}", input.len());
}

#[test]
fn lz4_stores_blocks_that_do_not_shrink() {
    let mut x = 7u32;
    let noise: Vec<u8> = (0..100_000)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect();
    for level in [9, 12] {
        let frame = compress(Codec::Lz4, &options(&[(LZ4_LEVEL, level)]), &noise);
        let (_, blocks) = lz4_blocks(&frame);
        assert_eq!(blocks, vec![(true, 65536), (true, 100_000 - 65536)]);
    }
}

/// What a zstd frame header says: (window log if a window descriptor is present,
/// single segment, declared content size).
fn zstd_header(frame: &[u8]) -> (Option<u32>, bool, Option<u64>) {
    assert_eq!(frame[..4], [0x28, 0xB5, 0x2F, 0xFD]);
    let fhd = frame[4];
    let fcs_flag = fhd >> 6;
    let single_segment = fhd & 0x20 != 0;
    assert_eq!(fhd & 0x03, 0, "no dictionary id");
    let mut pos = 5;
    let window_log = if single_segment {
        None
    } else {
        let wd = frame[pos];
        pos += 1;
        assert_eq!(wd & 7, 0, "zstd writes power-of-two windows");
        Some(10 + u32::from(wd >> 3))
    };
    let fcs_len = match (fcs_flag, single_segment) {
        (0, false) => 0,
        (0, true) => 1,
        (1, _) => 2,
        (2, _) => 4,
        _ => 8,
    };
    let content_size = (fcs_len > 0).then(|| {
        let mut bytes = [0u8; 8];
        bytes[..fcs_len].copy_from_slice(&frame[pos..pos + fcs_len]);
        u64::from_le_bytes(bytes) + if fcs_len == 2 { 256 } else { 0 }
    });
    (window_log, single_segment, content_size)
}

#[test]
fn zstd_frames_declare_their_content_size() {
    for size in [0, 100, 300, 70_000, 1 << 20] {
        let input = log_payload(size);
        let frame = compress(Codec::Zstd, &options(&[]), &input);
        let (_, _, content_size) = zstd_header(&frame);
        assert_eq!(content_size, Some(size as u64));
    }
}

#[test]
fn zstd_levels_trade_size() {
    let input = log_payload(256 * 1024);
    let sizes: Vec<usize> = [-50, 1, 3, 9]
        .iter()
        .map(|&level| compress(Codec::Zstd, &options(&[(ZSTD_LEVEL, level)]), &input).len())
        .collect();
    eprintln!(
        "zstd sizes at levels -50/1/3/9: {sizes:?} of {}",
        input.len()
    );
    assert!(sizes.windows(2).all(|w| w[0] > w[1]), "{sizes:?}");
}

#[test]
fn zstd_window_sets_the_frame_window() {
    let input = log_payload(5 << 20);
    for window in [10, 16, 20, 22] {
        let frame = compress(
            Codec::Zstd,
            &options(&[(ZSTD_LEVEL, 1), (ZSTD_WINDOW, window)]),
            &input,
        );
        let (window_log, single_segment, content_size) = zstd_header(&frame);
        assert!(!single_segment);
        assert_eq!(window_log, Some(window as u32), "window {window}");
        assert_eq!(content_size, Some(input.len() as u64));
    }
    // Off: the level's own window, which is never beyond Java's 2^27.
    let frame = compress(Codec::Zstd, &options(&[(ZSTD_LEVEL, 1)]), &input);
    let (window_log, _, _) = zstd_header(&frame);
    assert!(window_log.unwrap() <= 27, "{window_log:?}");
}

#[test]
fn zstd_window_enables_long_distance_matching() {
    // 1 MiB of noise, twice: only a window reaching back 1 MiB finds the repeat.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let noise: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let input = [noise.as_slice(), noise.as_slice()].concat();
    let off = compress(Codec::Zstd, &options(&[(ZSTD_LEVEL, 1)]), &input);
    let long = compress(
        Codec::Zstd,
        &options(&[(ZSTD_LEVEL, 1), (ZSTD_WINDOW, 21)]),
        &input,
    );
    eprintln!(
        "zstd level 1 on a 1 MiB repeat: window off {} bytes, window 21 {} bytes",
        off.len(),
        long.len()
    );
    assert!(off.len() > 2_000_000, "{}", off.len());
    assert!(long.len() < 1_100_000, "{}", long.len());
    assert_eq!(decompress(Codec::Zstd, &long, input.len()).unwrap(), input);
}
