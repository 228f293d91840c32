//! What is wrong with a policy file, located by line and column.

use std::fmt;
use std::ops::Range;

/// One thing wrong with a policy file, printed as
/// `FILE:LINE:COL: key = value: what is wrong (allowed: …); did you mean …?`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file name (or other source name) the problem is in.
    pub source_name: String,
    /// 1-based line of the offending key or value.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The key as the operator wrote it, flattened (`compression.zstd.level`), if any.
    pub key: Option<String>,
    /// The value's source text (`23`, `"zstdd"`), if the problem is about a value.
    pub value: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The allowed values, if they can be listed.
    pub allowed: Option<String>,
    /// The allowed name closest to a misspelt one (`compression.zstd.windw` → `…window`).
    pub did_you_mean: Option<String>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.source_name, self.line, self.column)?;
        match (&self.key, &self.value) {
            (Some(key), Some(value)) => write!(f, "{key} = {value}: ")?,
            (Some(key), None) => write!(f, "{key}: ")?,
            (None, Some(value)) => write!(f, "{value}: ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)?;
        if let Some(allowed) = &self.allowed {
            write!(f, " (allowed: {allowed})")?;
        }
        if let Some(name) = &self.did_you_mean {
            write!(f, "; did you mean {name}?")?;
        }
        Ok(())
    }
}

/// Why a policy file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Every problem found, in file order; never empty.
    #[error("{}", Problems(.0))]
    Invalid(Vec<Problem>),
}

impl ConfigError {
    /// The problems of an invalid file; empty for a file that could not be read.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid(problems) => problems,
        }
    }
}

/// Prints problems one per line.
struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// Collects problems against one source text, turning byte spans into lines and columns.
#[derive(Debug)]
pub(crate) struct ProblemSink<'t> {
    text: &'t str,
    source_name: &'t str,
    problems: Vec<(usize, Problem)>,
}

/// Values longer than this are cut in messages: an array or inline table can be long.
const VALUE_SHOWN_MAX_CHARS: usize = 60;

impl<'t> ProblemSink<'t> {
    pub(crate) fn new(text: &'t str, source_name: &'t str) -> Self {
        ProblemSink {
            text,
            source_name,
            problems: Vec::new(),
        }
    }

    /// The source text of a span, shortened for a message.
    pub(crate) fn source_text(&self, span: &Range<usize>) -> String {
        shortened(self.text.get(span.clone()).unwrap_or(""))
    }

    /// Records a problem at the start of `span`.
    pub(crate) fn report(
        &mut self,
        span: &Range<usize>,
        key: Option<&str>,
        value_span: Option<&Range<usize>>,
        message: impl Into<String>,
        allowed: Option<String>,
    ) {
        let (line, column) = line_column(self.text, span.start);
        let problem = Problem {
            source_name: self.source_name.to_owned(),
            line,
            column,
            key: key.map(str::to_owned),
            value: value_span.map(|v| self.source_text(v)),
            message: message.into(),
            allowed,
            did_you_mean: None,
        };
        self.problems.push((span.start, problem));
    }

    /// An unknown key or section, shown as `shown` (section-qualified), written as
    /// `written`; the allowed ones are `known`, and the nearest of them when `written`
    /// looks like a typo of it.
    pub(crate) fn unknown_name(
        &mut self,
        span: &Range<usize>,
        shown: &str,
        written: &str,
        message: String,
        known: &[&str],
    ) {
        let did_you_mean = known
            .iter()
            .map(|k| (edit_distance(written, k), *k))
            .filter(|(edits, _)| *edits <= TYPO_MAX_EDITS)
            .min_by_key(|(edits, _)| *edits)
            .map(|(_, k)| k.to_owned());
        self.report(span, Some(shown), None, message, Some(known.join(", ")));
        if let Some((_, problem)) = self.problems.last_mut() {
            problem.did_you_mean = did_you_mean;
        }
    }

    /// A problem about a value: located at the value, naming key and value.
    pub(crate) fn bad_value(
        &mut self,
        key: &str,
        value_span: &Range<usize>,
        message: impl Into<String>,
        allowed: Option<String>,
    ) {
        self.report(value_span, Some(key), Some(value_span), message, allowed);
    }

    /// The whole source text.
    pub(crate) fn text(&self) -> &'t str {
        self.text
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problems in file order (stable for problems at the same place).
    pub(crate) fn into_problems(mut self) -> Vec<Problem> {
        self.problems.sort_by_key(|(offset, _)| *offset);
        self.problems.into_iter().map(|(_, p)| p).collect()
    }
}

/// A value's source text, trimmed and cut for a message.
pub(crate) fn shortened(raw: &str) -> String {
    let raw = raw.trim();
    if raw.chars().count() <= VALUE_SHOWN_MAX_CHARS {
        raw.to_owned()
    } else {
        let cut: String = raw.chars().take(VALUE_SHOWN_MAX_CHARS).collect();
        format!("{cut}…")
    }
}

/// Most edits between a key and a known one for it to count as a typo of it.
const TYPO_MAX_EDITS: usize = 2;

/// Insertions, deletions, substitutions and adjacent swaps turning `a` into `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows of the table: two back for swaps, one back, and the one being filled.
    let mut before: Vec<usize> = Vec::new();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (prev[j] + 1).min(row[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut prev, row);
    }
    prev[b.len()]
}

/// 1-based line and character column of a byte offset (clamped to the text).
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based_and_count_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 4), (1, 5));
        assert_eq!(line_column(text, 6), (2, 1));
        // 'é' is two bytes but one column.
        assert_eq!(line_column(text, 11), (2, 5));
        assert_eq!(line_column(text, 1000), (3, 1));
    }

    #[test]
    fn problem_prints_file_line_key_value_and_allowed() {
        let p = Problem {
            source_name: "kpress.toml".into(),
            line: 3,
            column: 26,
            key: Some("compression.zstd.level".into()),
            value: Some("23".into()),
            message: "out of range".into(),
            allowed: Some("-131072..22".into()),
            did_you_mean: None,
        };
        assert_eq!(
            p.to_string(),
            "kpress.toml:3:26: compression.zstd.level = 23: out of range (allowed: -131072..22)"
        );
    }

    #[test]
    fn edit_distance_counts_swaps_as_one_edit() {
        assert_eq!(edit_distance("window", "window"), 0);
        assert_eq!(edit_distance("windw", "window"), 1);
        assert_eq!(edit_distance("levle", "level"), 1);
        assert_eq!(edit_distance("compresion.type", "compression.type"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("max_batch", "max_batch_bytes"), 6);
    }
}
