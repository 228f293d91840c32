//! Records sections built from input bytes, as a producer would batch them.

use kpress_batch::builder::{append_record, put_varint};
use kpress_batch::HEADER_LEN;

use crate::MeasureError;

/// The uncompressed records of one batch, in Kafka's v2 record format, and how many
/// records it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordsSection {
    pub records: Vec<u8>,
    pub count: u32,
}

/// Record values split from `data`: one per non-empty line (`\n`, with a `\r` before
/// it dropped), as KIP-780's TestCompression reads its input files.
pub fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.is_empty())
}

/// Sections of `records_per_batch` records each (KIP-780's `--batch-size`); the last
/// one holds what is left. A batch size of 0 is taken as 1.
pub fn sections(values: &[&[u8]], records_per_batch: usize) -> Vec<RecordsSection> {
    values
        .chunks(records_per_batch.max(1))
        .map(|chunk| {
            let mut section = SectionWriter::default();
            for value in chunk {
                section.push(value);
            }
            section.finish()
        })
        .collect()
}

/// Sections as a producer with `batch.size` = `batch_bytes` groups the values: records
/// are added while the batch (61-byte header and records) stays within `batch_bytes`;
/// a record larger than that gets a batch of its own, as the producer sends it.
pub fn sections_by_bytes(values: &[&[u8]], batch_bytes: usize) -> Vec<RecordsSection> {
    let mut out = Vec::new();
    let mut section = SectionWriter::default();
    for value in values {
        let before = section.records.len();
        section.push(value);
        if section.count > 1 && HEADER_LEN + section.records.len() > batch_bytes {
            section.records.truncate(before);
            section.count -= 1;
            out.push(std::mem::take(&mut section).finish());
            section.push(value);
        }
    }
    if section.count > 0 {
        out.push(section.finish());
    }
    out
}

/// Appends value-only records, offset and timestamp deltas 0, 1, 2, ...
#[derive(Debug, Default)]
struct SectionWriter {
    records: Vec<u8>,
    count: u32,
}

impl SectionWriter {
    fn push(&mut self, value: &[u8]) {
        append_record(
            &mut self.records,
            i64::from(self.count),
            None,
            Some(value),
            &[],
        );
        self.count += 1;
    }

    fn finish(self) -> RecordsSection {
        RecordsSection {
            records: self.records,
            count: self.count,
        }
    }
}

/// The values of `sections` cycled until there are `batch_count` sections, as
/// TestCompression repeats its input to reach `--batch-count`; fewer are kept as they
/// are when there are more.
pub fn cycle_to(sections: Vec<RecordsSection>, batch_count: usize) -> Vec<RecordsSection> {
    if sections.is_empty() || sections.len() >= batch_count {
        let mut sections = sections;
        sections.truncate(batch_count.max(1));
        return sections;
    }
    sections.iter().cycle().take(batch_count).cloned().collect()
}

/// The records of `sections` (e.g. a segment's batches as stored) grouped again as a
/// producer with `batch.size` = `batch_bytes` would have sent them, as
/// [`sections_by_bytes`] groups values. Keys, values, headers and timestamp deltas
/// are kept; offset deltas are renumbered. Fails on records that are not Kafka v2
/// records.
pub fn regroup_by_bytes(
    sections: &[RecordsSection],
    batch_bytes: usize,
) -> Result<Vec<RecordsSection>, MeasureError> {
    let mut out = Vec::new();
    let mut current = RecordsSection::default();
    let mut record = Vec::new();
    for (index, section) in sections.iter().enumerate() {
        let mut rest = &section.records[..];
        while !rest.is_empty() {
            let malformed = || MeasureError::MalformedRecords { section: index };
            let (body, after) = split_record(rest).ok_or_else(malformed)?;
            rest = after;
            record.clear();
            renumber(body, i64::from(current.count), &mut record).ok_or_else(malformed)?;
            if current.count > 0 && HEADER_LEN + current.records.len() + record.len() > batch_bytes
            {
                out.push(std::mem::take(&mut current));
                record.clear();
                renumber(body, 0, &mut record).ok_or_else(malformed)?;
            }
            current.records.extend_from_slice(&record);
            current.count += 1;
        }
    }
    if current.count > 0 {
        out.push(current);
    }
    Ok(out)
}

/// Reads a zigzag varint of at most `max_bytes` bytes; returns it and the rest.
fn read_varint(buf: &[u8], max_bytes: usize) -> Option<(i64, &[u8])> {
    let mut raw: u64 = 0;
    for (i, &b) in buf.iter().take(max_bytes).enumerate() {
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), &buf[i + 1..]));
        }
    }
    None
}

/// The first length-prefixed record body of `records`, and the bytes after it.
fn split_record(records: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = read_varint(records, 5)?;
    let len = usize::try_from(len).ok()?;
    (len <= rest.len()).then(|| rest.split_at(len))
}

/// Appends the record `body` with offset delta `delta`, length-prefixed.
fn renumber(body: &[u8], delta: i64, out: &mut Vec<u8>) -> Option<()> {
    let (&attributes, rest) = body.split_first()?;
    let (timestamp_delta, rest) = read_varint(rest, 10)?;
    let (_, rest) = read_varint(rest, 5)?;
    let mut new_body = vec![attributes];
    put_varint(&mut new_body, timestamp_delta);
    put_varint(&mut new_body, delta);
    new_body.extend_from_slice(rest);
    put_varint(out, new_body.len() as i64);
    out.extend_from_slice(&new_body);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_batch::builder::{encode_records, Record};

    #[test]
    fn lines_skip_empty_lines_and_carriage_returns() {
        let got: Vec<&[u8]> = lines(b"a\r\n\nbc\n\r\nd").collect();
        assert_eq!(got, vec![&b"a"[..], b"bc", b"d"]);
    }

    #[test]
    fn sections_hold_the_records_a_producer_would_send() {
        let values: Vec<&[u8]> = vec![b"one", b"two", b"three", b"four", b"five"];
        let got = sections(&values, 2);
        assert_eq!(got.len(), 3);
        assert_eq!(got.iter().map(|s| s.count).collect::<Vec<_>>(), [2, 2, 1]);
        let expected = encode_records(&[Record::value(&b"three"[..]), Record::value(&b"four"[..])]);
        assert_eq!(got[1].records, expected);
    }

    #[test]
    fn sections_by_bytes_stay_within_the_batch_size() {
        let value = [b'x'; 100];
        let values: Vec<&[u8]> = vec![&value; 50];
        for batch_bytes in [1, 200, 1000, 16 * 1024] {
            let got = sections_by_bytes(&values, batch_bytes);
            assert_eq!(got.iter().map(|s| s.count).sum::<u32>(), 50);
            for s in &got {
                assert!(s.count == 1 || HEADER_LEN + s.records.len() <= batch_bytes);
                let values: Vec<Record> = (0..s.count).map(|_| Record::value(&value[..])).collect();
                assert_eq!(s.records, encode_records(&values));
            }
        }
        // A 100-byte value is a 109-byte record: 8 fit in 1000 bytes with the header.
        assert_eq!(sections_by_bytes(&values, 1000)[0].count, 8);
    }

    #[test]
    fn regrouping_keeps_records_and_renumbers_offsets() {
        let value = [b'y'; 100];
        let values: Vec<&[u8]> = vec![&value; 50];
        let by_count = sections(&values, 7);
        for batch_bytes in [1, 500, 1000, 1 << 20] {
            // Timestamp deltas are kept, so compare shapes (deltas below 64 take a byte).
            let shape = |s: &[RecordsSection]| -> Vec<(u32, usize)> {
                s.iter().map(|s| (s.count, s.records.len())).collect()
            };
            let regrouped = regroup_by_bytes(&by_count, batch_bytes).unwrap();
            assert_eq!(
                shape(&regrouped),
                shape(&sections_by_bytes(&values, batch_bytes)),
                "{batch_bytes}"
            );
        }
        let mut keyed = RecordsSection::default();
        append_record(
            &mut keyed.records,
            5,
            Some(b"k"),
            Some(b"v"),
            &[("h".into(), None)],
        );
        keyed.count = 1;
        let regrouped = regroup_by_bytes(&[keyed], 100).unwrap();
        let expected = encode_records(&[Record {
            key: Some(b"k".to_vec()),
            value: Some(b"v".to_vec()),
            headers: vec![("h".into(), None)],
        }]);
        // Timestamp delta 5 is kept, the offset delta becomes 0.
        assert_eq!(
            regrouped[0].records[2..],
            {
                let mut e = expected.clone();
                e[2] = 10;
                e
            }[2..]
        );
        let garbage = RecordsSection {
            records: vec![0x7f, 1, 2],
            count: 1,
        };
        assert!(regroup_by_bytes(&[garbage], 100).is_err());
    }

    #[test]
    fn cycle_repeats_or_cuts_to_the_batch_count() {
        let values: Vec<&[u8]> = vec![b"a", b"b", b"c"];
        let s = sections(&values, 1);
        assert_eq!(cycle_to(s.clone(), 7).len(), 7);
        assert_eq!(cycle_to(s.clone(), 7)[4], s[1]);
        assert_eq!(cycle_to(s.clone(), 2), s[..2].to_vec());
        assert!(cycle_to(Vec::new(), 5).is_empty());
    }
}
