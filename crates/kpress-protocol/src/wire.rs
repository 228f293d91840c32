//! Bounds-checked reading of Kafka primitive types, and the varint writer.
//!
//! Every length and count is checked against the bytes that remain before
//! anything is sized from it: hostile counts fail here, they never allocate.

use bytes::BufMut;

use crate::error::WireError;

/// A cursor over a message body; every read checks the remaining length.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated {
                at: self.pos,
                needed: n,
                remaining: self.remaining(),
            });
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    pub(crate) fn skip(&mut self, n: usize) -> Result<(), WireError> {
        self.take(n).map(|_| ())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, WireError> {
        self.array().map(i16::from_be_bytes)
    }

    pub(crate) fn i32(&mut self) -> Result<i32, WireError> {
        self.array().map(i32::from_be_bytes)
    }

    pub(crate) fn uuid(&mut self) -> Result<[u8; 16], WireError> {
        self.array()
    }

    /// An unsigned varint of at most 5 bytes (Kafka's u32 varint).
    pub(crate) fn uvarint(&mut self) -> Result<u32, WireError> {
        let start = self.pos;
        let mut value: u32 = 0;
        for i in 0..5 {
            let [byte] = self.array::<1>()?;
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WireError::VarintTooLong { at: start })
    }

    /// A length-prefixed field: classic (`i16`/`i32` length, -1 = null) or
    /// compact (uvarint length + 1, 0 = null). Returns the content, `None` for null.
    pub(crate) fn length_prefixed(
        &mut self,
        prefix: LengthPrefix,
    ) -> Result<Option<&'a [u8]>, WireError> {
        let at = self.pos;
        let length: i64 = match prefix {
            LengthPrefix::Int16 => i64::from(self.i16()?),
            LengthPrefix::Int32 => i64::from(self.i32()?),
            LengthPrefix::Compact => i64::from(self.uvarint()?) - 1,
        };
        match length {
            -1 => Ok(None),
            n if n < 0 => Err(WireError::NegativeLength { at, length: n }),
            // n >= 0 and at most u32::MAX here, so it fits usize on 32/64-bit.
            n => self.take(n as usize).map(Some),
        }
    }

    /// An array count (classic `i32` or compact uvarint + 1), checked so that
    /// `count * min_element_size` bytes actually remain. `None` for a null array.
    pub(crate) fn count(
        &mut self,
        compact: bool,
        min_element_size: usize,
    ) -> Result<Option<usize>, WireError> {
        let at = self.pos;
        let count: i64 = if compact {
            i64::from(self.uvarint()?) - 1
        } else {
            i64::from(self.i32()?)
        };
        match count {
            -1 => Ok(None),
            n if n < 0 => Err(WireError::NegativeLength { at, length: n }),
            n => {
                let n = n as u64;
                let needed = n.saturating_mul(min_element_size.max(1) as u64);
                if needed > self.remaining() as u64 {
                    return Err(WireError::CountTooLarge {
                        at,
                        count: n,
                        remaining: self.remaining(),
                    });
                }
                Ok(Some(n as usize))
            }
        }
    }

    /// A non-nullable array count.
    pub(crate) fn required_count(
        &mut self,
        compact: bool,
        min_element_size: usize,
        field: &'static str,
    ) -> Result<usize, WireError> {
        let at = self.pos;
        self.count(compact, min_element_size)?
            .ok_or(WireError::UnexpectedNull { at, field })
    }

    /// A string (nullable or not: the content is skipped either way).
    pub(crate) fn skip_string(&mut self, compact: bool) -> Result<(), WireError> {
        let prefix = if compact {
            LengthPrefix::Compact
        } else {
            LengthPrefix::Int16
        };
        self.length_prefixed(prefix).map(|_| ())
    }

    /// A tagged-field section; calls `on_field` for each field. Tags and sizes
    /// are bounds-checked like everything else.
    pub(crate) fn tagged_fields(
        &mut self,
        mut on_field: impl FnMut(TaggedField<'a>),
    ) -> Result<(), WireError> {
        // The tagged-field count is a plain uvarint (not count + 1); each
        // field takes at least two bytes (tag, size).
        let at = self.pos;
        let count = u64::from(self.uvarint()?);
        if count.saturating_mul(2) > self.remaining() as u64 {
            return Err(WireError::CountTooLarge {
                at,
                count,
                remaining: self.remaining(),
            });
        }
        let mut previous: Option<u32> = None;
        for _ in 0..count {
            let start = self.pos;
            let tag = self.uvarint()?;
            let size = self.uvarint()?;
            // Kafka reads tags and sizes as int32 and wants tags in ascending order;
            // anything else it refuses, and re-encoding would not give it back.
            let limit = i32::MAX as u32;
            if tag > limit || size > limit || previous.is_some_and(|p| tag <= p) {
                return Err(WireError::InvalidTaggedField {
                    at: start,
                    tag,
                    size,
                });
            }
            previous = Some(tag);
            let content_start = self.pos;
            let content = self.take(size as usize)?;
            on_field(TaggedField {
                tag,
                start,
                content_start,
                content,
            });
        }
        Ok(())
    }

    /// Tagged fields kpress does not need: skipped.
    pub(crate) fn skip_tagged_fields(&mut self) -> Result<(), WireError> {
        self.tagged_fields(|_| {})
    }

    pub(crate) fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            trailing => Err(WireError::TrailingBytes { trailing }),
        }
    }
}

/// One tagged field, with offsets into the reader's buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaggedField<'a> {
    pub(crate) tag: u32,
    /// Where the field (its tag varint) starts.
    pub(crate) start: usize,
    /// Where its content starts.
    pub(crate) content_start: usize,
    pub(crate) content: &'a [u8],
}

/// How a length-prefixed field encodes its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LengthPrefix {
    Int16,
    Int32,
    Compact,
}

/// Appends `value` as an unsigned varint.
pub(crate) fn put_uvarint(out: &mut impl BufMut, mut value: u32) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvarint_round_trips_boundaries() {
        for value in [0u32, 1, 127, 128, 16_383, 16_384, u32::MAX] {
            let mut out = Vec::new();
            put_uvarint(&mut out, value);
            assert_eq!(Reader::new(&out).uvarint(), Ok(value));
        }
    }

    #[test]
    fn six_byte_varint_is_rejected() {
        let bytes = [0x80, 0x80, 0x80, 0x80, 0x80, 0x01];
        assert_eq!(
            Reader::new(&bytes).uvarint(),
            Err(WireError::VarintTooLong { at: 0 })
        );
    }

    #[test]
    fn huge_count_fails_before_sizing_anything() {
        let bytes = [0x7f, 0xff, 0xff, 0xff, 0, 0];
        assert!(matches!(
            Reader::new(&bytes).count(false, 1),
            Err(WireError::CountTooLarge { .. })
        ));
    }

    #[test]
    fn huge_length_is_truncated() {
        let bytes = [0x7f, 0xff, 0xff, 0xff, 0, 0];
        assert!(matches!(
            Reader::new(&bytes).length_prefixed(LengthPrefix::Int32),
            Err(WireError::Truncated { .. })
        ));
    }
}
