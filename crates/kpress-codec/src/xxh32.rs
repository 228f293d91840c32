//! XXH32, the checksum of LZ4 frame descriptors, blocks and contents.
//!
//! Written out here (a few lines) rather than pulling in a hashing crate: the LZ4
//! frame only ever needs the 32-bit variant with a whole buffer at hand.

const PRIME1: u32 = 0x9E37_79B1;
const PRIME2: u32 = 0x85EB_CA77;
const PRIME3: u32 = 0xC2B2_AE3D;
const PRIME4: u32 = 0x27D4_EB2F;
const PRIME5: u32 = 0x1656_67B1;

fn round(acc: u32, lane: u32) -> u32 {
    acc.wrapping_add(lane.wrapping_mul(PRIME2))
        .rotate_left(13)
        .wrapping_mul(PRIME1)
}

fn read_u32_le(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// The XXH32 hash of `data` with `seed`.
pub(crate) fn xxh32(data: &[u8], seed: u32) -> u32 {
    let mut rest = data;
    let mut hash = if data.len() >= 16 {
        let mut v1 = seed.wrapping_add(PRIME1).wrapping_add(PRIME2);
        let mut v2 = seed.wrapping_add(PRIME2);
        let mut v3 = seed;
        let mut v4 = seed.wrapping_sub(PRIME1);
        let mut stripes = rest.chunks_exact(16);
        for stripe in &mut stripes {
            v1 = round(v1, read_u32_le(&stripe[0..4]));
            v2 = round(v2, read_u32_le(&stripe[4..8]));
            v3 = round(v3, read_u32_le(&stripe[8..12]));
            v4 = round(v4, read_u32_le(&stripe[12..16]));
        }
        rest = stripes.remainder();
        v1.rotate_left(1)
            .wrapping_add(v2.rotate_left(7))
            .wrapping_add(v3.rotate_left(12))
            .wrapping_add(v4.rotate_left(18))
    } else {
        seed.wrapping_add(PRIME5)
    };
    // The spec adds the length modulo 2^32.
    hash = hash.wrapping_add(data.len() as u32);
    let mut words = rest.chunks_exact(4);
    for word in &mut words {
        hash = hash
            .wrapping_add(read_u32_le(word).wrapping_mul(PRIME3))
            .rotate_left(17)
            .wrapping_mul(PRIME4);
    }
    for &byte in words.remainder() {
        hash = hash
            .wrapping_add(u32::from(byte).wrapping_mul(PRIME5))
            .rotate_left(11)
            .wrapping_mul(PRIME1);
    }
    hash ^= hash >> 15;
    hash = hash.wrapping_mul(PRIME2);
    hash ^= hash >> 13;
    hash = hash.wrapping_mul(PRIME3);
    hash ^ (hash >> 16)
}

#[cfg(test)]
mod tests {
    use super::xxh32;

    #[test]
    fn matches_reference_vectors() {
        // Values from the xxHash reference implementation.
        assert_eq!(xxh32(b"", 0), 0x02CC_5D05);
        assert_eq!(xxh32(b"a", 0), 0x550D_7456);
        assert_eq!(xxh32(b"abc", 0), 0x32D1_53FF);
        assert_eq!(
            xxh32(b"Nobody inspects the spammish repetition", 0),
            0xE229_3B2F
        );
    }
}
