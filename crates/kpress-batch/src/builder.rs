//! Builds real v2 record batches: records in Kafka's record format, the 61-byte
//! header, the CRC. Tests and benchmarks build their inputs with it, and `kpress bench`
//! the batches it measures.

use kpress_codec::{Codec, CodecError, CompressionOptions, Compressor};

/// One record: key and value (`None` = null) and headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Record {
    /// A record with only a value.
    pub fn value(value: impl Into<Vec<u8>>) -> Record {
        Record {
            value: Some(value.into()),
            ..Record::default()
        }
    }
}

/// Appends `v` as a zigzag varint (Kafka's varint and varlong).
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push(z as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

/// Appends one record in Kafka's v2 record format to a records section: `delta` is
/// both its offset delta and its timestamp delta.
pub fn append_record(
    out: &mut Vec<u8>,
    delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(String, Option<Vec<u8>>)],
) {
    let mut body = Vec::new();
    body.push(0); // record attributes, unused
    put_varint(&mut body, delta); // timestampDelta
    put_varint(&mut body, delta); // offsetDelta
    put_bytes(&mut body, key);
    put_bytes(&mut body, value);
    put_varint(&mut body, headers.len() as i64);
    for (k, v) in headers {
        put_bytes(&mut body, Some(k.as_bytes()));
        put_bytes(&mut body, v.as_deref());
    }
    put_varint(out, body.len() as i64);
    out.extend_from_slice(&body);
}

/// The uncompressed records section for `records`: record `i` has offset and
/// timestamp delta `i`.
pub fn encode_records(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        append_record(
            &mut out,
            i as i64,
            r.key.as_deref(),
            r.value.as_deref(),
            &r.headers,
        );
    }
    out
}

/// Header fields of a batch to build; defaults are what a Java producer sends.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    /// Attribute bits other than the codec (transactional, control, ...).
    pub extra_attributes: u16,
    pub base_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub codec: Codec,
    pub options: CompressionOptions,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        BatchBuilder {
            base_offset: 0,
            partition_leader_epoch: -1,
            extra_attributes: 0,
            base_timestamp: 1_700_000_000_000,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            codec: Codec::None,
            options: CompressionOptions::default(),
        }
    }
}

impl BatchBuilder {
    pub fn codec(codec: Codec) -> BatchBuilder {
        BatchBuilder {
            codec,
            ..BatchBuilder::default()
        }
    }

    /// A batch holding `records`, compressed with `self.codec`.
    pub fn build(&self, records: &[Record]) -> Result<Vec<u8>, CodecError> {
        let raw = encode_records(records);
        self.build_raw(&raw, records.len() as i32, records.len() as i32 - 1)
    }

    /// A batch of records with only the given values.
    pub fn build_values<V: AsRef<[u8]>>(&self, values: &[V]) -> Result<Vec<u8>, CodecError> {
        let records: Vec<Record> = values.iter().map(|v| Record::value(v.as_ref())).collect();
        self.build(&records)
    }

    /// A batch around an already encoded records section, with the given counts (which
    /// need not agree, to build malformed batches).
    pub fn build_raw(
        &self,
        raw_records: &[u8],
        records_count: i32,
        last_offset_delta: i32,
    ) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::with_capacity(crate::HEADER_LEN + raw_records.len());
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // length, patched below
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.push(2);
        out.extend_from_slice(&[0; 4]); // crc, patched below
        out.extend_from_slice(&((self.extra_attributes & !0x07) | self.codec.id()).to_be_bytes());
        out.extend_from_slice(&last_offset_delta.to_be_bytes());
        out.extend_from_slice(&self.base_timestamp.to_be_bytes());
        let max_timestamp = self.base_timestamp + i64::from(last_offset_delta.max(0));
        out.extend_from_slice(&max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&records_count.to_be_bytes());
        if self.codec == Codec::None {
            out.extend_from_slice(raw_records);
        } else {
            Compressor::new(self.codec, &self.options).compress(raw_records, &mut out)?;
        }
        seal(&mut out);
        Ok(out)
    }
}

/// Sets the length and CRC of the single batch `batch` to match its bytes.
pub fn seal(batch: &mut [u8]) {
    let length = (batch.len() - crate::LOG_OVERHEAD) as i32;
    batch[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[crate::CRC_START..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// The uncompressed records section of `batch`, for comparing what a rewrite kept.
/// Panics on a payload that does not decompress: test inputs are valid, so only tests
/// (feature `test-util`) have it.
#[cfg(any(test, feature = "test-util"))]
pub fn plain_records(batch: &crate::RecordBatch<'_>) -> Vec<u8> {
    use kpress_codec::Decompressor;
    let codec = batch.codec().expect("a known codec");
    if codec == Codec::None {
        return batch.records().to_vec();
    }
    let mut out = Vec::new();
    Decompressor::new()
        .decompress(codec, batch.records(), 1 << 30, &mut out)
        .expect("test batch decompresses");
    out
}
