//! Other implementations of each format read what we write, and we read what they
//! write (with the optional fields they use). The real Kafka clients are checked
//! through a real broker in the workspace's integration tests.

mod common;

use std::io::{Read, Write};

use common::{compress, decompress, log_payload, options};
use kpress_codec::options::*;
use kpress_codec::{Codec, CodecError};

#[test]
fn flate2_reads_our_gzip_as_a_single_member() {
    let input = log_payload(400_000);
    for level in [1, 6, 9] {
        let gz = compress(Codec::Gzip, &options(&[(GZIP_LEVEL, level)]), &input);
        // GzDecoder stops after one member, as librdkafka does.
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut back)
            .unwrap();
        assert!(back == input, "level {level}");
    }
}

#[test]
fn we_read_gzip_with_optional_header_fields_and_several_members() {
    let input = log_payload(100_000);
    let mut member = flate2::GzBuilder::new()
        .filename("records.bin")
        .comment("written by flate2")
        .extra(vec![1, 2, 3, 4])
        .mtime(1_700_000_000)
        .write(Vec::new(), flate2::Compression::new(5));
    member.write_all(&input[..60_000]).unwrap();
    let mut stream = member.finish().unwrap();
    let mut second = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    second.write_all(&input[60_000..]).unwrap();
    stream.extend(second.finish().unwrap());
    assert_eq!(
        decompress(Codec::Gzip, &stream, input.len()).unwrap(),
        input
    );
}

#[test]
fn we_check_the_gzip_header_crc() {
    // A member with FHCRC: flags 0x02, then the CRC-16 of the 10 header bytes.
    let mut header = vec![0x1f, 0x8b, 8, 0x02, 0, 0, 0, 0, 0, 255];
    let crc16 = crc32fast::hash(&header) as u16;
    header.extend_from_slice(&crc16.to_le_bytes());
    let body = compress(Codec::Gzip, &options(&[]), b"hello");
    let member = [header.as_slice(), &body[10..]].concat();
    assert_eq!(decompress(Codec::Gzip, &member, 5).unwrap(), b"hello");
    let mut bad = member.clone();
    bad[10] ^= 1;
    assert!(matches!(
        decompress(Codec::Gzip, &bad, 5),
        Err(CodecError::Corrupt { .. })
    ));
}

#[test]
fn snap_reads_our_xerial_chunks_and_we_read_raw_snappy() {
    let input = log_payload(100_000);
    let stream = compress(Codec::Snappy, &options(&[]), &input);
    let mut rest = &stream[16..];
    let mut back = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        back.extend(
            snap::raw::Decoder::new()
                .decompress_vec(&rest[4..4 + len])
                .unwrap(),
        );
        rest = &rest[4 + len..];
    }
    assert!(back == input);
    // librdkafka's form: one raw block, no framing.
    let raw = snap::raw::Encoder::new().compress_vec(&input).unwrap();
    assert_eq!(decompress(Codec::Snappy, &raw, input.len()).unwrap(), input);
}

#[test]
fn liblz4_reads_our_frames() {
    let input = log_payload(3 << 20);
    for (level, block) in [(9, 4), (9, 7), (1, 5), (12, 6), (17, 4)] {
        let frame = compress(
            Codec::Lz4,
            &options(&[(LZ4_LEVEL, level), (LZ4_BLOCK, block)]),
            &input,
        );
        let mut back = Vec::new();
        lz4::Decoder::new(&frame[..])
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert!(back == input, "level {level}, block {block}");
    }
}

#[test]
fn we_read_liblz4_frames_with_checksums_and_content_size() {
    let input = log_payload(700_000);
    for (content_checksum, content_size, block_size) in [
        (false, None, lz4::BlockSize::Max64KB),
        (true, None, lz4::BlockSize::Max256KB),
        (true, Some(input.len() as u64), lz4::BlockSize::Max4MB),
        (false, Some(input.len() as u64), lz4::BlockSize::Max1MB),
    ] {
        let mut builder = lz4::EncoderBuilder::new();
        builder
            .block_mode(lz4::BlockMode::Independent)
            .block_size(block_size.clone())
            .checksum(if content_checksum {
                lz4::ContentChecksum::ChecksumEnabled
            } else {
                lz4::ContentChecksum::NoChecksum
            })
            .block_checksum(lz4::liblz4::BlockChecksum::BlockChecksumEnabled);
        if let Some(size) = content_size {
            builder.content_size(size);
        }
        let mut encoder = builder.build(Vec::new()).unwrap();
        encoder.write_all(&input).unwrap();
        let (frame, result) = encoder.finish();
        result.unwrap();
        let back = decompress(Codec::Lz4, &frame, input.len())
            .unwrap_or_else(|e| panic!("{content_checksum} {content_size:?} {block_size:?}: {e}"));
        assert!(back == input);
        // A flipped content byte is caught by the block checksum.
        let mut bad = frame.clone();
        let at = bad.len() / 2;
        bad[at] ^= 0x10;
        assert!(decompress(Codec::Lz4, &bad, input.len()).is_err());
    }
}

#[test]
fn we_refuse_linked_lz4_blocks_as_java_does() {
    let mut encoder = lz4::EncoderBuilder::new()
        .block_mode(lz4::BlockMode::Linked)
        .build(Vec::new())
        .unwrap();
    encoder.write_all(&log_payload(200_000)).unwrap();
    let (frame, result) = encoder.finish();
    result.unwrap();
    let err = decompress(Codec::Lz4, &frame, 1 << 20).unwrap_err();
    assert!(err.to_string().contains("linked"), "{err}");
}

#[test]
fn zstd_reads_our_frames_and_we_read_streamed_and_concatenated_frames() {
    let input = log_payload(500_000);
    for (level, window) in [(3, 0), (-5, 0), (19, 0), (1, 22)] {
        let frame = compress(
            Codec::Zstd,
            &options(&[(ZSTD_LEVEL, level), (ZSTD_WINDOW, window)]),
            &input,
        );
        assert!(
            zstd::decode_all(&frame[..]).unwrap() == input,
            "level {level}"
        );
    }
    // Java's ZstdOutputStream form: streamed, no content size in the header.
    let mut streamed = Vec::new();
    let mut encoder = zstd::stream::write::Encoder::new(&mut streamed, 3).unwrap();
    encoder.write_all(&input[..300_000]).unwrap();
    encoder.finish().unwrap();
    assert_eq!(
        zstd::zstd_safe::get_frame_content_size(&streamed).unwrap(),
        None
    );
    let second = zstd::bulk::compress(&input[300_000..], 1).unwrap();
    let both = [streamed.as_slice(), second.as_slice()].concat();
    assert_eq!(decompress(Codec::Zstd, &both, input.len()).unwrap(), input);
}

#[test]
fn we_refuse_zstd_windows_beyond_java_limit() {
    // Window log 28 (256 MiB) on a frame without a content size: Java cannot read it.
    let mut frame = Vec::new();
    let mut encoder = zstd::stream::write::Encoder::new(&mut frame, 1).unwrap();
    encoder
        .set_parameter(zstd::zstd_safe::CParameter::WindowLog(28))
        .unwrap();
    encoder.write_all(&log_payload(10_000)).unwrap();
    encoder.finish().unwrap();
    let err = decompress(Codec::Zstd, &frame, 1 << 20).unwrap_err();
    assert!(matches!(err, CodecError::Corrupt { .. }), "{err}");
}
