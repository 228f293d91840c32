//! Big-endian reads over a Kafka response body, each checked against its end: the one
//! reader of the harness's hand-parsed answers (Metadata, ApiVersions, Produce, SASL).

use anyhow::{bail, ensure, Context};

pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(body: &'a [u8]) -> Reader<'a> {
        Reader { rest: body }
    }

    pub(crate) fn take(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        ensure!(
            self.rest.len() >= n,
            "response cut short: {n} bytes wanted, {} left",
            self.rest.len()
        );
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    pub(crate) fn i8(&mut self) -> anyhow::Result<i8> {
        Ok(self.take(1)?[0] as i8)
    }

    pub(crate) fn i16(&mut self) -> anyhow::Result<i16> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into()?))
    }

    pub(crate) fn i32(&mut self) -> anyhow::Result<i32> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into()?))
    }

    pub(crate) fn i64(&mut self) -> anyhow::Result<i64> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into()?))
    }

    /// A classic array's element count (a null array counts as none).
    pub(crate) fn count(&mut self) -> anyhow::Result<usize> {
        Ok(usize::try_from(self.i32()?).unwrap_or(0))
    }

    pub(crate) fn nullable_string(&mut self) -> anyhow::Result<Option<String>> {
        let Ok(len) = usize::try_from(self.i16()?) else {
            return Ok(None);
        };
        Ok(Some(String::from_utf8_lossy(self.take(len)?).into_owned()))
    }

    pub(crate) fn string(&mut self) -> anyhow::Result<String> {
        self.nullable_string()?
            .context("null string where a string belongs")
    }

    pub(crate) fn uvarint(&mut self) -> anyhow::Result<usize> {
        let mut value = 0usize;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1)?[0];
            value |= usize::from(byte & 0x7F) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        bail!("unsigned varint longer than 5 bytes")
    }

    pub(crate) fn skip_tagged_fields(&mut self) -> anyhow::Result<()> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?; // tag
            let len = self.uvarint()?;
            self.take(len)?;
        }
        Ok(())
    }

    /// The correlation id that starts a response, which must be `expected`.
    pub(crate) fn correlation_id(&mut self, expected: i32) -> anyhow::Result<()> {
        let id = self.i32()?;
        ensure!(
            id == expected,
            "answer to correlation id {id}, sent {expected}"
        );
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}
