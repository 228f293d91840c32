//! The paste-ready `[[topics]]` rules advice ends with, in the policy file's own
//! spelling: `compression.type` and the candidate's `compression.<codec>.*` keys.

use std::fmt::Write;

use kpress_codec::options::TEXT_OPTION_KEYS;
use kpress_codec::Candidate;

/// One `[[topics]]` rule: `topic_match` (a name, glob or `re:` pattern) written with
/// `candidate`, after `comment` lines.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rule {
    pub(crate) topic_match: String,
    pub(crate) candidate: Candidate,
    pub(crate) comment: Vec<String>,
    /// Keep the producer's batch when the rewrite is not smaller.
    pub(crate) only_if_smaller: bool,
}

/// The rules as TOML, one `[[topics]]` table each, separated by blank lines.
pub(crate) fn render(rules: &[Rule]) -> String {
    let mut out = String::new();
    for (i, rule) in rules.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for line in &rule.comment {
            for part in line.lines() {
                let _ = writeln!(out, "# {part}");
            }
        }
        out.push_str("[[topics]]\n");
        let _ = writeln!(out, "match = {}", basic_string(&rule.topic_match));
        let _ = writeln!(
            out,
            "compression.type = {}",
            basic_string(rule.candidate.codec().name())
        );
        for (key, value) in rule.candidate.properties() {
            if TEXT_OPTION_KEYS.contains(&key) {
                let _ = writeln!(out, "{key} = {}", basic_string(&value));
            } else {
                let _ = writeln!(out, "{key} = {value}");
            }
        }
        if rule.only_if_smaller {
            out.push_str("only_if_smaller = true\n");
        }
    }
    out
}

/// `text` as a TOML basic string: quotes, backslashes and control characters escaped.
pub(crate) fn basic_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(topic: &str, spec: &str) -> Rule {
        Rule {
            topic_match: topic.to_owned(),
            candidate: spec.parse().unwrap(),
            comment: vec![],
            only_if_smaller: false,
        }
    }

    #[test]
    fn integers_bare_and_names_quoted() {
        let mut first = rule("logs.*", "zstd:3:window=22");
        first.comment = vec!["zstd:3 stores 12% less than gzip:6.".to_owned()];
        let text = render(&[first, rule("metrics", "gzip:6:libdeflate")]);
        assert_eq!(
            text,
            "# zstd:3 stores 12% less than gzip:6.\n\
             [[topics]]\n\
             match = \"logs.*\"\n\
             compression.type = \"zstd\"\n\
             compression.zstd.level = 3\n\
             compression.zstd.window = 22\n\
             \n\
             [[topics]]\n\
             match = \"metrics\"\n\
             compression.type = \"gzip\"\n\
             compression.gzip.level = 6\n\
             compression.gzip.provider = \"libdeflate\"\n"
        );
    }

    #[test]
    fn only_if_smaller_follows_the_codec_keys() {
        let mut small = rule("clicks", "zstd:3");
        small.only_if_smaller = true;
        assert_eq!(
            render(&[small]),
            "[[topics]]\nmatch = \"clicks\"\ncompression.type = \"zstd\"\n\
             compression.zstd.level = 3\nonly_if_smaller = true\n"
        );
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(basic_string("a\"b\\c\u{1}"), "\"a\\\"b\\\\c\\u0001\"");
        let text = render(&[rule("x\ny", "snappy")]);
        assert!(text.contains("match = \"x\\ny\"\n"), "{text}");
        assert!(text.contains("compression.type = \"snappy\"\n"), "{text}");
    }
}
