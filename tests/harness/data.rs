//! Test records: the repository's datasets split into records, the checksum every client of
//! the harness prints, and comparisons that say where two record lists differ.

use crate::paths;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::PathBuf;

/// A dataset of the repository's `datasets/` (see its README), one record per line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    /// 10,000 Apache combined-format access log lines (~236 B each).
    ApacheAccessLog,
    /// 500 NGINX Plus status JSON documents (~5.5 KB each).
    NginxPlusStatus,
}

impl Dataset {
    pub fn file_name(self) -> &'static str {
        match self {
            Dataset::ApacheAccessLog => "apache_access.log",
            Dataset::NginxPlusStatus => "nginxplus_status.ndjson",
        }
    }

    /// A short name for topic and file names.
    pub fn short_name(self) -> &'static str {
        match self {
            Dataset::ApacheAccessLog => "apache",
            Dataset::NginxPlusStatus => "nginx",
        }
    }

    pub fn path(self) -> PathBuf {
        paths::datasets_dir().join(self.file_name())
    }

    /// The records: the file's lines without their `\n`.
    pub fn records(self) -> Vec<Vec<u8>> {
        let bytes = std::fs::read(self.path())
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.path().display()));
        split_lines(&bytes)
    }
}

/// Splits `bytes` into lines without their `\n`; a final line without `\n` counts.
pub fn split_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut records: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        records.pop();
    }
    records
}

/// Writes `records` one per line (each ending in `\n`) to `path`, the file format every
/// producer of the harness reads; returns `path`.
pub fn write_records<R: AsRef<[u8]>>(path: &std::path::Path, records: &[R]) -> PathBuf {
    let mut text = Vec::new();
    for record in records {
        text.extend_from_slice(record.as_ref());
        text.push(b'\n');
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path.to_path_buf()
}

/// SHA-256 over each record as a 4-byte big-endian length and its bytes, in order, in
/// lowercase hex: what `KpressClient` and `ck_client.py` print for what they send/read.
pub fn checksum<R: AsRef<[u8]>>(records: &[R]) -> String {
    let mut sha = Sha256::new();
    for record in records {
        let record = record.as_ref();
        sha.update((record.len() as u32).to_be_bytes());
        sha.update(record);
    }
    hex(&sha.finalize())
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Decodes lowercase or uppercase hex.
pub fn unhex(text: &str) -> anyhow::Result<Vec<u8>> {
    let text = text.as_bytes();
    anyhow::ensure!(text.len().is_multiple_of(2), "odd-length hex");
    // A table lookup a digit and one check a byte: every record a Java consumer reads
    // comes through here, tens of MB a test, in an unoptimised build.
    let mut out = Vec::with_capacity(text.len() / 2);
    for pair in text.chunks_exact(2) {
        let (high, low) = (HEX_DIGITS[pair[0] as usize], HEX_DIGITS[pair[1] as usize]);
        if (high | low) > 0xf {
            let bad = if high > 0xf { pair[0] } else { pair[1] };
            anyhow::bail!("not a hex digit: {:?}", bad as char);
        }
        out.push(high << 4 | low);
    }
    Ok(out)
}

/// Each byte's value as a hex digit, or `0xff` for a byte that is none.
static HEX_DIGITS: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

fn preview(record: &[u8]) -> String {
    let shown = &record[..record.len().min(160)];
    let mut text = String::from_utf8_lossy(shown).into_owned();
    if record.len() > shown.len() {
        text.push('…');
    }
    text
}

/// `None` if `actual` equals `expected` record by record; otherwise a description of the
/// first difference (index, lengths, both records' starts) and the counts.
pub fn diff_records<E: AsRef<[u8]>, A: AsRef<[u8]>>(
    expected: &[E],
    actual: &[A],
) -> Option<String> {
    let first_difference = expected
        .iter()
        .zip(actual)
        .position(|(e, a)| e.as_ref() != a.as_ref());
    if first_difference.is_none() && expected.len() == actual.len() {
        return None;
    }
    let mut text = format!("expected {} records, got {}", expected.len(), actual.len());
    match first_difference {
        Some(i) => {
            let (e, a) = (expected[i].as_ref(), actual[i].as_ref());
            let byte = e
                .iter()
                .zip(a)
                .position(|(x, y)| x != y)
                .unwrap_or(e.len().min(a.len()));
            let _ = write!(
                text,
                "; first difference at record {i} (byte {byte}; lengths {} vs {})\n  expected: {}\n  actual:   {}",
                e.len(),
                a.len(),
                preview(e),
                preview(a)
            );
        }
        None => {
            let i = expected.len().min(actual.len());
            let extra = if actual.len() > i {
                actual[i].as_ref()
            } else {
                expected[i].as_ref()
            };
            let which = if actual.len() > i {
                "actual has extra"
            } else {
                "actual is missing"
            };
            let _ = write!(
                text,
                "; the common {i} records agree; {which} record {i}: {}",
                preview(extra)
            );
        }
    }
    Some(text)
}

/// Panics with a useful diff unless `actual` equals `expected` record by record.
#[track_caller]
pub fn assert_records_eq<E: AsRef<[u8]>, A: AsRef<[u8]>>(expected: &[E], actual: &[A], what: &str) {
    if let Some(diff) = diff_records(expected, actual) {
        panic!("{what}: records differ: {diff}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_without_their_newline() {
        assert_eq!(split_lines(b"a\nbc\n"), vec![b"a".to_vec(), b"bc".to_vec()]);
        assert_eq!(
            split_lines(b"a\n\nb"),
            vec![b"a".to_vec(), vec![], b"b".to_vec()]
        );
        assert!(split_lines(b"").is_empty());
    }

    #[test]
    fn checksum_matches_the_java_clients() {
        // What KpressClient printed producing apache_access.log.
        assert_eq!(
            checksum(&Dataset::ApacheAccessLog.records()),
            "aacae09e110f82cc717dee7f5f0f17a32062707f6cffd3733984727a110c557c"
        );
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex(&hex(b"\x00\xffkp")).unwrap(), b"\x00\xffkp");
        assert!(unhex("abc").is_err());
        assert_eq!(unhex("09afAF").unwrap(), b"\x09\xaf\xaf");
        assert!(unhex("0g").is_err());
        assert!(unhex("g0").is_err());
    }

    #[test]
    fn diffs_name_the_first_difference() {
        let expected = [b"one".to_vec(), b"two".to_vec()];
        assert_eq!(diff_records(&expected, &expected), None);
        let diff = diff_records(&expected, &[b"one".to_vec(), b"tw0".to_vec()]).unwrap();
        assert!(diff.contains("record 1 (byte 2"), "{diff}");
        let diff = diff_records(&expected, &[b"one".to_vec()]).unwrap();
        assert!(diff.contains("missing record 1"), "{diff}");
    }
}
