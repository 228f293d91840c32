//! The cheap check that decompressed records are exactly `recordsCount` records: each
//! record is a zigzag varint length and that many body bytes; bodies are not parsed.

/// Reads one zigzag varint (at most 5 bytes, an int32) from the start of `buf`;
/// returns the value and how many bytes it took.
fn read_varint(buf: &[u8]) -> Option<(i32, usize)> {
    let mut raw: u32 = 0;
    for (i, &b) in buf.iter().take(5).enumerate() {
        // The fifth byte may carry only the top 4 bits of a u32.
        if i == 4 && b > 0x0f {
            return None;
        }
        raw |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((raw >> 1) as i32) ^ -((raw & 1) as i32), i + 1));
        }
    }
    None
}

/// Whether `records` holds exactly `count` length-prefixed records and nothing after.
pub(crate) fn holds_exactly(records: &[u8], count: usize) -> bool {
    // Each record takes at least its 1-byte length: more records than bytes cannot fit.
    if count > records.len() {
        return false;
    }
    let mut rest = records;
    for _ in 0..count {
        let Some((len, used)) = read_varint(rest) else {
            return false;
        };
        let Ok(len) = usize::try_from(len) else {
            return false;
        };
        rest = &rest[used..];
        if len > rest.len() {
            return false;
        }
        rest = &rest[len..];
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zigzag(v: i32) -> Vec<u8> {
        let mut z = ((v << 1) ^ (v >> 31)) as u32;
        let mut out = Vec::new();
        while z >= 0x80 {
            out.push(z as u8 | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
        out
    }

    #[test]
    fn varints_round_trip() {
        for v in [0, 1, -1, 63, -64, 64, 300, i32::MAX, i32::MIN] {
            let enc = zigzag(v);
            assert_eq!(read_varint(&enc), Some((v, enc.len())), "{v}");
        }
        assert_eq!(read_varint(&[0x80, 0x80]), None);
        assert_eq!(read_varint(&[0xff, 0xff, 0xff, 0xff, 0x7f]), None);
    }

    #[test]
    fn counts_records_exactly() {
        let mut recs = Vec::new();
        for body in [&b"abc"[..], b"", &[7u8; 200]] {
            recs.extend(zigzag(body.len() as i32));
            recs.extend_from_slice(body);
        }
        assert!(holds_exactly(&recs, 3));
        assert!(!holds_exactly(&recs, 2));
        assert!(!holds_exactly(&recs, 4));
        assert!(!holds_exactly(&recs[..recs.len() - 1], 3));
        let mut neg = zigzag(-1);
        neg.push(0);
        assert!(!holds_exactly(&neg, 1));
        assert!(holds_exactly(&[], 0));
    }
}
