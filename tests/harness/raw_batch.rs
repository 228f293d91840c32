//! Hand edits of real record batches (v2) taken from a segment, for tests that send a
//! deliberately damaged or reshaped batch: split a segment into batches, clear the
//! producer fields, recompute the CRC, flip a byte.

use anyhow::{ensure, Context};

const LENGTH_OFFSET: usize = 8;
const LOG_OVERHEAD: usize = 12;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const PRODUCER_ID_OFFSET: usize = 43;
const HEADER_LEN: usize = 61;

/// Splits a segment (concatenated batches) into its batches' bytes.
pub fn split_batches(segment: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut batches = Vec::new();
    let mut rest = segment;
    while !rest.is_empty() {
        ensure!(rest.len() >= LOG_OVERHEAD, "truncated batch header");
        let length = i32::from_be_bytes(rest[LENGTH_OFFSET..LENGTH_OFFSET + 4].try_into()?);
        let total = LOG_OVERHEAD + usize::try_from(length).context("negative batch length")?;
        ensure!(
            rest.len() >= total && total >= HEADER_LEN,
            "truncated batch"
        );
        ensure!(rest[MAGIC_OFFSET] == 2, "not a v2 batch");
        batches.push(rest[..total].to_vec());
        rest = &rest[total..];
    }
    Ok(batches)
}

/// The codec bits of a batch's attributes (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
pub fn codec_id(batch: &[u8]) -> u8 {
    batch[ATTRIBUTES_OFFSET + 1] & 0x07
}

/// The CRC-32C a batch's bytes from the attributes on should carry.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..])
}

/// Whether the stored CRC matches the bytes.
pub fn crc_is_valid(batch: &[u8]) -> bool {
    u32::from_be_bytes(
        batch[CRC_OFFSET..CRC_OFFSET + 4]
            .try_into()
            .expect("4 bytes"),
    ) == compute_crc(batch)
}

/// Writes the correct CRC into `batch`.
pub fn fix_crc(batch: &mut [u8]) {
    let crc = compute_crc(batch);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Makes a batch look like a fresh non-idempotent producer's: base offset 0, leader
/// epoch -1, producer id -1, epoch -1, base sequence -1; CRC recomputed.
pub fn as_fresh_plain_batch(batch: &[u8]) -> Vec<u8> {
    let mut out = batch.to_vec();
    out[0..8].copy_from_slice(&0i64.to_be_bytes());
    out[12..16].copy_from_slice(&(-1i32).to_be_bytes());
    out[PRODUCER_ID_OFFSET..PRODUCER_ID_OFFSET + 8].copy_from_slice(&(-1i64).to_be_bytes());
    out[51..53].copy_from_slice(&(-1i16).to_be_bytes());
    out[53..57].copy_from_slice(&(-1i32).to_be_bytes());
    fix_crc(&mut out);
    out
}

/// Flips every bit of the byte `at_from_end` bytes before the end of the records.
pub fn flip_payload_byte(batch: &mut [u8], at_from_end: usize) {
    let index = batch.len() - 1 - at_from_end;
    assert!(
        index >= HEADER_LEN,
        "the flipped byte must be in the records"
    );
    batch[index] ^= 0xFF;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(records: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        b.extend_from_slice(records);
        let length = (b.len() - LOG_OVERHEAD) as i32;
        b[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&length.to_be_bytes());
        b[MAGIC_OFFSET] = 2;
        fix_crc(&mut b);
        b
    }

    #[test]
    fn splits_fixes_and_damages() {
        let segment = [batch(b"abc"), batch(b"defg")].concat();
        let batches = split_batches(&segment).unwrap();
        assert_eq!(batches.len(), 2);
        assert!(batches.iter().all(|b| crc_is_valid(b)));
        let mut damaged = batches[1].clone();
        flip_payload_byte(&mut damaged, 0);
        assert!(!crc_is_valid(&damaged));
        let fresh = as_fresh_plain_batch(&batches[0]);
        assert!(crc_is_valid(&fresh));
        assert!(split_batches(&segment[..segment.len() - 1]).is_err());
    }
}
