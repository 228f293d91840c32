//! Regrouping records already in sections (a log segment's batches) into the batches a
//! producer with another `batch.size` would send, for `kpress advise`'s batching
//! advice.

use kpress_batch::HEADER_LEN;

use crate::RecordsSection;

/// A records section that does not hold the records it says it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegroupError {
    #[error("section {section}: record {record} is cut short or malformed")]
    Malformed { section: usize, record: u32 },
    #[error("section {section}: {found} records where its count says {count}")]
    Count {
        section: usize,
        count: u32,
        found: u32,
    },
}

/// The records of `sections`, in order, regrouped as a producer with `batch.size` =
/// `batch_bytes` groups them: records are added while the batch (61-byte header and
/// records) stays within `batch_bytes`; a record larger than that gets a batch of its
/// own. Each record keeps its attributes, key, value and headers; its offset and
/// timestamp deltas are renumbered 0, 1, 2, ... within its new batch, as [`sections`]
/// numbers them (the sections do not carry their batches' base timestamps, so the
/// records' own times cannot be restated against a new base).
///
/// [`sections`]: crate::sections
pub fn regroup_by_bytes(
    sections: &[RecordsSection],
    batch_bytes: usize,
) -> Result<Vec<RecordsSection>, RegroupError> {
    let mut out = Vec::new();
    let mut current = RecordsSection::default();
    let mut record = Vec::new();
    for (index, section) in sections.iter().enumerate() {
        let mut rest = section.records.as_slice();
        let mut found = 0u32;
        while !rest.is_empty() {
            let malformed = RegroupError::Malformed {
                section: index,
                record: found,
            };
            let (length, used) = varint(rest).ok_or(malformed.clone())?;
            let length = usize::try_from(length).map_err(|_| malformed.clone())?;
            let body = rest
                .get(used..used.saturating_add(length))
                .ok_or(malformed.clone())?;
            rest = &rest[used + length..];
            // attributes (1 byte), timestampDelta, offsetDelta, then the rest as is.
            let (&attributes, after) = body.split_first().ok_or(malformed.clone())?;
            let (_, t) = varint(after).ok_or(malformed.clone())?;
            let (_, o) = varint(&after[t..]).ok_or(malformed.clone())?;
            let tail = &after[t + o..];
            encode(&mut record, attributes, current.count, tail);
            let encoded = varint_len(record.len() as i64) + record.len();
            if current.count > 0 && HEADER_LEN + current.records.len() + encoded > batch_bytes {
                out.push(std::mem::take(&mut current));
                encode(&mut record, attributes, 0, tail);
            }
            put_varint(&mut current.records, record.len() as i64);
            current.records.extend_from_slice(&record);
            current.count += 1;
            found += 1;
        }
        if found != section.count {
            return Err(RegroupError::Count {
                section: index,
                count: section.count,
                found,
            });
        }
    }
    if current.count > 0 {
        out.push(current);
    }
    Ok(out)
}

/// A record body with `delta` as its timestamp and offset delta.
fn encode(out: &mut Vec<u8>, attributes: u8, delta: u32, tail: &[u8]) {
    out.clear();
    out.push(attributes);
    put_varint(out, i64::from(delta));
    put_varint(out, i64::from(delta));
    out.extend_from_slice(tail);
}

/// A zigzag varint (Kafka's varint and varlong) and the bytes it took.
fn varint(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((((value >> 1) as i64) ^ -((value & 1) as i64), i + 1));
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push(z as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn varint_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - z.max(1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sections_by_bytes;
    use kpress_batch::builder::{encode_records, Record};

    #[test]
    fn regrouping_value_records_matches_grouping_the_values() {
        let values: Vec<Vec<u8>> = (0..500)
            .map(|i| format!("record {i} {}", "x".repeat(i % 70)).into_bytes())
            .collect();
        let values: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let small = sections_by_bytes(&values, 1024);
        for batch_bytes in [1024, 4096, 16384, 1 << 20] {
            assert_eq!(
                regroup_by_bytes(&small, batch_bytes).unwrap(),
                sections_by_bytes(&values, batch_bytes),
                "{batch_bytes}"
            );
        }
    }

    #[test]
    fn keys_headers_and_timestamps_are_kept() {
        let records = vec![
            Record {
                key: Some(b"k".to_vec()),
                value: None,
                headers: vec![("h".to_owned(), Some(b"v".to_vec()))],
            },
            Record::value(b"second".to_vec()),
        ];
        let section = RecordsSection {
            records: encode_records(&records),
            count: 2,
        };
        let twice = regroup_by_bytes(&[section.clone(), section.clone()], 1 << 20).unwrap();
        assert_eq!(twice.len(), 1);
        assert_eq!(twice[0].count, 4);
        // The first two records are unchanged; the next two differ only in their
        // offset delta (2, 3 instead of 0, 1).
        assert!(twice[0].records.starts_with(&section.records));
        assert_eq!(twice[0].records.len(), 2 * section.records.len());
    }

    #[test]
    fn bad_sections_are_refused() {
        let good = RecordsSection {
            records: encode_records(&[Record::value(b"abc".to_vec())]),
            count: 1,
        };
        let mut cut = good.clone();
        cut.records.pop();
        assert_eq!(
            regroup_by_bytes(&[good.clone(), cut], 100),
            Err(RegroupError::Malformed {
                section: 1,
                record: 0
            })
        );
        let mut miscounted = good;
        miscounted.count = 2;
        assert_eq!(
            regroup_by_bytes(&[miscounted], 100),
            Err(RegroupError::Count {
                section: 0,
                count: 2,
                found: 1
            })
        );
        assert_eq!(varint_len(0), 1);
        assert_eq!(varint_len(63), 1);
        assert_eq!(varint_len(64), 2);
        assert_eq!(varint_len(-1), 1);
    }
}
