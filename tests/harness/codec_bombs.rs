//! Compressed payloads that lie about their size, as an attacker writes them by hand
//! (no compressor produces them): a raw snappy block whose length preamble declares
//! far more than its bytes can decode to. Wrapped in a batch with a valid CRC, such a
//! payload gets past every check up to the decoder.

/// A raw snappy block of exactly `len` bytes (at least 6) whose preamble declares
/// `declared` decoded bytes: the preamble (an unsigned varint), then one-byte literals
/// (tag 0x00 and its byte) up to `len`. It decodes to at most `len / 2` bytes, so any
/// decoder that trusts the preamble zeroes `declared` bytes for nothing.
///
/// `len = 5` with `declared = 64 MiB` is the 5-byte attack `hostile.rs` sends: the preamble takes
/// 4 bytes, the fifth is a literal tag whose byte is missing.
pub fn snappy_block_declaring(declared: u32, len: usize) -> Vec<u8> {
    let mut block = Vec::with_capacity(len);
    let mut v = declared;
    while v >= 0x80 {
        block.push(v as u8 | 0x80);
        v >>= 7;
    }
    block.push(v as u8);
    assert!(
        block.len() < len,
        "a {len}-byte block has no room after its preamble"
    );
    // 0x00 is a literal tag of length 1; each following 0x00 is that literal's byte.
    block.resize(len, 0);
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declares_what_it_is_told_in_the_length_it_is_given() {
        let five = snappy_block_declaring(64 << 20, 5);
        assert_eq!(five, [0x80, 0x80, 0x80, 0x20, 0x00]);
        let hundred = snappy_block_declaring(32 << 20, 100);
        assert_eq!(hundred.len(), 100);
        assert_eq!(&hundred[..4], &[0x80, 0x80, 0x80, 0x10]);
    }
}
