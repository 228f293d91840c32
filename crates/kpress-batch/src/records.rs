//! The cheap check that decompressed records are exactly `recordsCount` records: each
//! record is a zigzag varint length and that many body bytes; bodies are not parsed.

use crate::batch::Crc32c;

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
    let mut walk = RecordWalk::new(records, count);
    walk.advance_to(records.len());
    walk.holds_exactly()
}

/// Bytes CRC-32C reads before the walk catches up: small enough to still be in L1.
const CRC_CHUNK: usize = 16 << 10;

/// The CRC-32C of `covered` and whether its bytes from `records_from` on hold exactly
/// `count` records: one pass, each chunk's records walked right after the CRC has
/// read it.
pub(crate) fn crc_and_holds_exactly(
    covered: &[u8],
    records_from: usize,
    count: usize,
) -> (u32, bool) {
    let records = covered.get(records_from..).unwrap_or_default();
    let mut walk = RecordWalk::new(records, count);
    let mut crc = Crc32c::new();
    for (i, chunk) in covered.chunks(CRC_CHUNK).enumerate() {
        crc.update(chunk);
        walk.advance_to((i * CRC_CHUNK + chunk.len()).saturating_sub(records_from));
    }
    (crc.value(), walk.holds_exactly())
}

/// Steps from record to record by their length prefixes.
struct RecordWalk<'a> {
    records: &'a [u8],
    /// Where the next record starts.
    at: usize,
    /// Records still to find.
    left: usize,
    /// A length prefix was invalid or ran past the end.
    broken: bool,
}

impl<'a> RecordWalk<'a> {
    fn new(records: &'a [u8], count: usize) -> Self {
        RecordWalk {
            records,
            at: 0,
            left: count,
            // Each record takes at least its 1-byte length: more records than bytes
            // cannot fit.
            broken: count > records.len(),
        }
    }

    /// Steps over every record that starts before `end`.
    fn advance_to(&mut self, end: usize) {
        while !self.broken && self.left > 0 && self.at < end {
            let rest = &self.records[self.at..];
            let next = read_varint(rest)
                .and_then(|(len, used)| Some((usize::try_from(len).ok()?, used)))
                .filter(|&(len, used)| len <= rest.len() - used);
            match next {
                Some((len, used)) => {
                    self.at += used + len;
                    self.left -= 1;
                }
                None => self.broken = true,
            }
        }
    }

    fn holds_exactly(&self) -> bool {
        !self.broken && self.left == 0 && self.at == self.records.len()
    }
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

    proptest::proptest! {
        #[test]
        fn the_fused_walk_agrees_with_crc_and_walk_apart(
            lens in proptest::collection::vec(0usize..40_000, 0..6),
            count_delta in -2i64..3,
            cut in 0usize..64,
            head in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..70),
        ) {
            let mut recs = Vec::new();
            for (i, len) in lens.iter().enumerate() {
                recs.extend(zigzag(*len as i32));
                recs.extend(std::iter::repeat_n(i as u8, *len));
            }
            recs.truncate(recs.len().saturating_sub(cut % 3 * cut));
            let count = (lens.len() as i64 + count_delta).max(0) as usize;
            let covered = [&head[..], &recs].concat();
            let (crc, holds) = crc_and_holds_exactly(&covered, head.len(), count);
            // The crc32c crate is the reference.
            proptest::prop_assert_eq!(crc, crc32c::crc32c(&covered));
            proptest::prop_assert_eq!(holds, holds_exactly(&recs, count));
        }
    }
}
