//! The RFC 1952 gzip member framing around a raw deflate stream: the one place kpress
//! writes and reads gzip headers and trailers, whichever provider does the deflating.
//!
//! Written: the fixed 10-byte header flate2's `GzEncoder` writes (no name, comment or
//! mtime; XFL 2 at level 9, 4 at level 1, else 0; OS 255), so the zlib provider's output
//! is byte-identical to flate2's. Read: every header field RFC 1952 allows (FEXTRA,
//! FNAME, FCOMMENT, FHCRC checked), as Java's `GZIPInputStream` and librdkafka write.

/// The header kpress writes is always this long.
pub const HEADER_LEN: usize = 10;
/// CRC-32 and ISIZE (input length mod 2^32), both little-endian.
pub const TRAILER_LEN: usize = 8;

const MAGIC: [u8; 2] = [0x1f, 0x8b];
const CM_DEFLATE: u8 = 8;
const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
const FRESERVED: u8 = 0xe0;

/// Appends the 10-byte member header for a stream compressed at zlib-scale `level`.
pub fn write_header(out: &mut Vec<u8>, level: u32) {
    let xfl = match level {
        9.. => 2,
        ..=1 => 4,
        _ => 0,
    };
    out.extend_from_slice(&[MAGIC[0], MAGIC[1], CM_DEFLATE, 0, 0, 0, 0, 0, xfl, 255]);
}

/// Appends the member trailer for uncompressed data with CRC-32 `crc` and length `len`.
pub fn write_trailer(out: &mut Vec<u8>, crc: u32, len: usize) {
    out.extend_from_slice(&crc.to_le_bytes());
    // ISIZE is the length modulo 2^32 by definition.
    out.extend_from_slice(&(len as u32).to_le_bytes());
}

/// A member trailer as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    pub crc: u32,
    pub isize: u32,
}

/// Reads a trailer from the first 8 bytes of `input`.
pub fn read_trailer(input: &[u8]) -> Option<Trailer> {
    let bytes: &[u8; TRAILER_LEN] = input.get(..TRAILER_LEN)?.try_into().ok()?;
    Some(Trailer {
        crc: u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        isize: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
    })
}

/// Checks a member header at the start of `input` and returns its length, i.e. where
/// the raw deflate stream starts.
pub fn parse_header(input: &[u8]) -> Result<usize, String> {
    let fixed = input
        .get(..HEADER_LEN)
        .ok_or_else(|| format!("{} bytes is too short for a gzip header", input.len()))?;
    if fixed[..2] != MAGIC {
        return Err(format!("bad gzip magic {:02x} {:02x}", fixed[0], fixed[1]));
    }
    if fixed[2] != CM_DEFLATE {
        return Err(format!("unsupported gzip compression method {}", fixed[2]));
    }
    let flags = fixed[3];
    if flags & FRESERVED != 0 {
        return Err(format!("reserved gzip header flags set: {flags:#04x}"));
    }
    let truncated = || "truncated gzip header".to_owned();
    let mut at = HEADER_LEN;
    if flags & FEXTRA != 0 {
        let xlen = input.get(at..at + 2).ok_or_else(truncated)?;
        at += 2 + usize::from(u16::from_le_bytes([xlen[0], xlen[1]]));
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            let rest = input.get(at..).ok_or_else(truncated)?;
            let nul = rest.iter().position(|&b| b == 0).ok_or_else(truncated)?;
            at += nul + 1;
        }
    }
    if flags & FHCRC != 0 {
        let stored = input.get(at..at + 2).ok_or_else(truncated)?;
        let stored = u16::from_le_bytes([stored[0], stored[1]]);
        let computed = crc32fast::hash(&input[..at]) as u16;
        if stored != computed {
            return Err(format!(
                "gzip header CRC {stored:#06x} does not match {computed:#06x}"
            ));
        }
        at += 2;
    }
    if at > input.len() {
        return Err(truncated());
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_flate2_at_every_level() {
        use std::io::Write;
        for level in 1..=9 {
            let mut enc =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
            enc.write_all(b"x").unwrap();
            let theirs = enc.finish().unwrap();
            let mut ours = Vec::new();
            write_header(&mut ours, level);
            assert_eq!(ours, theirs[..HEADER_LEN], "level {level}");
            assert_eq!(parse_header(&ours), Ok(HEADER_LEN));
        }
    }

    #[test]
    fn optional_fields_are_skipped_and_header_crc_checked() {
        let mut h = vec![
            0x1f,
            0x8b,
            8,
            FEXTRA | FNAME | FCOMMENT | FHCRC,
            0,
            0,
            0,
            0,
            0,
            3,
        ];
        h.extend_from_slice(&[3, 0, b'a', b'b', b'c']);
        h.extend_from_slice(b"name\0comment\0");
        let crc = crc32fast::hash(&h) as u16;
        h.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(parse_header(&h), Ok(h.len()));
        let last = h.len() - 1;
        h[last] ^= 1;
        assert!(parse_header(&h).unwrap_err().contains("header CRC"));
    }

    #[test]
    fn malformed_headers_are_refused() {
        assert!(parse_header(&[0x1f, 0x8b, 8]).is_err());
        assert!(parse_header(&[0x1f, 0x8c, 8, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(parse_header(&[0x1f, 0x8b, 7, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(parse_header(&[0x1f, 0x8b, 8, 0x20, 0, 0, 0, 0, 0, 0]).is_err());
        // FNAME without its terminating NUL.
        assert!(parse_header(&[0x1f, 0x8b, 8, FNAME, 0, 0, 0, 0, 0, 0, b'a']).is_err());
        // FEXTRA claiming more than there is.
        assert!(parse_header(&[0x1f, 0x8b, 8, FEXTRA, 0, 0, 0, 0, 0, 0, 9, 0]).is_err());
    }
}
