//! Records sections built from input bytes, as a producer would batch them.

use kpress_batch::builder::append_record;
use kpress_batch::HEADER_LEN;

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
    fn cycle_repeats_or_cuts_to_the_batch_count() {
        let values: Vec<&[u8]> = vec![b"a", b"b", b"c"];
        let s = sections(&values, 1);
        assert_eq!(cycle_to(s.clone(), 7).len(), 7);
        assert_eq!(cycle_to(s.clone(), 7)[4], s[1]);
        assert_eq!(cycle_to(s.clone(), 2), s[..2].to_vec());
        assert!(cycle_to(Vec::new(), 5).is_empty());
    }
}
