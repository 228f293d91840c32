//! Topic patterns of `[[topics]] match`: an exact name, a glob, or `re:<regex>`.

use std::fmt;

use regex::Regex;

/// Kafka's longest topic name.
pub const TOPIC_NAME_MAX_CHARS: usize = 249;

/// Compiled regexes beyond this size are refused: a pattern is an operator's typo long
/// before it needs more.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A `match` pattern, compiled.
#[derive(Debug, Clone)]
pub enum TopicPattern {
    /// The topic's whole name.
    Exact(String),
    /// A shell-style glob (`*`, `?`, `[...]`, `[!...]`) over the whole name.
    Glob { glob: String, regex: Regex },
    /// `re:<regex>`, anchored at both ends.
    Regex { source: String, regex: Regex },
}

/// Why a `match` pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("empty pattern")]
    Empty,
    #[error("{0:?} cannot be in a Kafka topic name, so this rule would never match")]
    IllegalTopicChar(char),
    #[error("topic names are at most {TOPIC_NAME_MAX_CHARS} characters")]
    TooLong,
    #[error("unclosed '[' in glob")]
    UnclosedClass,
    #[error("invalid regex: {0}")]
    InvalidRegex(String),
}

/// Kafka topic names use ASCII letters, digits, '.', '_' and '-'.
pub fn is_legal_topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

impl TopicPattern {
    /// Parses a `match` value: `re:` prefix → regex, any of `*?[` → glob, else exact.
    pub fn parse(pattern: &str) -> Result<TopicPattern, PatternError> {
        let parsed = Self::parse_with(pattern, is_legal_topic_char)?;
        if matches!(parsed, TopicPattern::Exact(_))
            && pattern.chars().count() > TOPIC_NAME_MAX_CHARS
        {
            return Err(PatternError::TooLong);
        }
        Ok(parsed)
    }

    /// Parses a pattern whose literal characters must be `legal`, with no cap on an
    /// exact name's length.
    pub(crate) fn parse_with(
        pattern: &str,
        legal: fn(char) -> bool,
    ) -> Result<TopicPattern, PatternError> {
        if let Some(source) = pattern.strip_prefix("re:") {
            if source.is_empty() {
                return Err(PatternError::Empty);
            }
            let regex = compile(&format!("^(?:{source})$"))?;
            return Ok(TopicPattern::Regex {
                source: source.to_owned(),
                regex,
            });
        }
        if pattern.is_empty() {
            return Err(PatternError::Empty);
        }
        if pattern.contains(['*', '?', '[']) {
            let regex = compile(&glob_to_regex(pattern, legal)?)?;
            return Ok(TopicPattern::Glob {
                glob: pattern.to_owned(),
                regex,
            });
        }
        if let Some(c) = pattern.chars().find(|&c| !legal(c)) {
            return Err(PatternError::IllegalTopicChar(c));
        }
        Ok(TopicPattern::Exact(pattern.to_owned()))
    }

    /// Whether the whole topic name matches.
    pub fn matches(&self, topic: &str) -> bool {
        match self {
            TopicPattern::Exact(name) => name == topic,
            TopicPattern::Glob { regex, .. } | TopicPattern::Regex { regex, .. } => {
                regex.is_match(topic)
            }
        }
    }
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicPattern::Exact(name) => f.write_str(name),
            TopicPattern::Glob { glob, .. } => f.write_str(glob),
            TopicPattern::Regex { source, .. } => write!(f, "re:{source}"),
        }
    }
}

pub(crate) fn compile(regex: &str) -> Result<Regex, PatternError> {
    regex::RegexBuilder::new(regex)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            // regex's message draws a caret diagram over several lines; a problem is one line.
            let text = e.to_string();
            let last = text.lines().last().unwrap_or_default();
            PatternError::InvalidRegex(last.trim_start_matches("error: ").to_owned())
        })
}

/// Translates a glob into an anchored regex. Literal characters outside classes must be
/// `legal` (in topic names, say), so a typo such as a stray space is reported, not
/// silently inert.
pub(crate) fn glob_to_regex(glob: &str, legal: fn(char) -> bool) -> Result<String, PatternError> {
    let mut out = String::with_capacity(glob.len() * 2 + 8);
    out.push_str("^(?:");
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '[' => {
                out.push('[');
                if matches!(chars.peek(), Some('!' | '^')) {
                    chars.next();
                    out.push('^');
                }
                // A ']' right after the opening (or negation) is a member, as in shells.
                let mut first = true;
                let mut closed = false;
                for m in chars.by_ref() {
                    if m == ']' && !first {
                        closed = true;
                        break;
                    }
                    first = false;
                    if m == '-' || m.is_ascii_alphanumeric() {
                        out.push(m);
                    } else {
                        // Escaping keeps regex class syntax (`&&`, `[:`, `\`) literal.
                        out.push('\\');
                        out.push(m);
                    }
                }
                if !closed {
                    return Err(PatternError::UnclosedClass);
                }
                out.push(']');
            }
            c if legal(c) => out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
            c => return Err(PatternError::IllegalTopicChar(c)),
        }
    }
    out.push_str(")$");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, topic: &str) -> bool {
        TopicPattern::parse(pattern).unwrap().matches(topic)
    }

    #[test]
    fn exact_names_match_only_themselves() {
        assert!(matches("logs", "logs"));
        assert!(!matches("logs", "logs2"));
        assert!(!matches("logs", "log"));
        // '.' is literal in an exact name.
        assert!(matches("a.b", "a.b"));
        assert!(!matches("a.b", "axb"));
        assert!(matches!(
            TopicPattern::parse("a.b").unwrap(),
            TopicPattern::Exact(_)
        ));
    }

    #[test]
    fn globs_cover_the_whole_name() {
        assert!(matches("logs.*", "logs.app"));
        assert!(matches("logs.*", "logs."));
        assert!(!matches("logs.*", "logs"));
        assert!(!matches("logs.*", "xlogs.app"));
        assert!(!matches("logs.*", "logsXapp"), "'.' in a glob is literal");
        assert!(matches("*", "anything"));
        assert!(matches("*.events", "a.b.events"));
        assert!(matches("t?", "t1"));
        assert!(!matches("t?", "t"));
        assert!(!matches("t?", "t12"));
        assert!(matches("t[0-3]", "t2"));
        assert!(!matches("t[0-3]", "t4"));
        assert!(matches("t[!0-3]", "t4"));
        assert!(!matches("t[!0-3]", "t1"));
        assert!(matches("t[^a]", "tb"));
        assert!(matches("t[._]x", "t.x"));
        assert!(matches("t[._]x", "t_x"));
        assert!(!matches("t[._]x", "tax"));
        assert!(matches("t[]a]", "t]"));
    }

    #[test]
    fn regexes_are_anchored() {
        assert!(matches("re:logs\\..+", "logs.app"));
        assert!(!matches("re:logs", "logs.app"), "no partial match");
        assert!(!matches("re:app", "my-app-topic"));
        assert!(matches("re:.*app.*", "my-app-topic"));
        assert!(matches("re:a|b", "b"));
        assert!(
            !matches("re:a|b", "ab"),
            "alternation stays inside the anchors"
        );
    }

    #[test]
    fn bad_patterns_are_refused_with_the_reason() {
        assert_eq!(TopicPattern::parse("").unwrap_err(), PatternError::Empty);
        assert_eq!(TopicPattern::parse("re:").unwrap_err(), PatternError::Empty);
        assert_eq!(
            TopicPattern::parse("my topic").unwrap_err(),
            PatternError::IllegalTopicChar(' ')
        );
        assert_eq!(
            TopicPattern::parse("logs/*").unwrap_err(),
            PatternError::IllegalTopicChar('/')
        );
        assert_eq!(
            TopicPattern::parse("t[0-3").unwrap_err(),
            PatternError::UnclosedClass
        );
        assert_eq!(
            TopicPattern::parse("re:(unclosed").unwrap_err(),
            PatternError::InvalidRegex("unclosed group".into())
        );
        assert_eq!(
            TopicPattern::parse(&"a".repeat(250)).unwrap_err(),
            PatternError::TooLong
        );
        assert!(TopicPattern::parse(&"a".repeat(249)).is_ok());
    }

    #[test]
    fn display_gives_back_the_pattern() {
        for p in ["logs", "logs.*", "re:logs\\..+"] {
            assert_eq!(TopicPattern::parse(p).unwrap().to_string(), p);
        }
    }
}
