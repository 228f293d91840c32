//! `[[clients]]`: which codecs a consumer can read, told by its `client.id`, the
//! software it announced in ApiVersions v3+ and the listener it came through.

use std::fmt;

use kpress_codec::Codec;

use crate::topic_match::{PatternError, TopicPattern};

/// A set of codecs, one bit per codec id.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CodecSet(u8);

impl CodecSet {
    /// Every codec: what a client no `[[clients]]` rule matches is taken to read (the
    /// Fetch version may still rule out zstd).
    pub const ALL: CodecSet = CodecSet(0b1_1111);
    /// Uncompressed only; every client reads it.
    pub const NONE_ONLY: CodecSet = CodecSet(1 << Codec::None as u8);
    /// The order [`CodecSet::choose`] falls back in: fast to decode first.
    const FALLBACK_ORDER: [Codec; 5] = [
        Codec::Lz4,
        Codec::Snappy,
        Codec::Zstd,
        Codec::Gzip,
        Codec::None,
    ];

    /// The set of `codecs`, with [`Codec::None`] always in it.
    pub fn of(codecs: impl IntoIterator<Item = Codec>) -> CodecSet {
        codecs
            .into_iter()
            .fold(CodecSet::NONE_ONLY, |set, codec| set.with(codec))
    }

    pub fn contains(self, codec: Codec) -> bool {
        self.0 & (1 << codec as u8) != 0
    }

    pub fn with(self, codec: Codec) -> CodecSet {
        CodecSet(self.0 | 1 << codec as u8)
    }

    /// This set less `codec`; [`Codec::None`] stays, as every client reads it.
    pub fn without(self, codec: Codec) -> CodecSet {
        CodecSet(self.0 & !(1 << codec as u8)).with(Codec::None)
    }

    /// The codecs in the set, in attribute order.
    pub fn iter(self) -> impl Iterator<Item = Codec> {
        Codec::ALL.into_iter().filter(move |c| self.contains(*c))
    }

    /// `preferred` if the set has it, else the first of lz4, snappy, zstd, gzip it has,
    /// else none.
    pub fn choose(self, preferred: Codec) -> Codec {
        if self.contains(preferred) {
            return preferred;
        }
        Self::FALLBACK_ORDER
            .into_iter()
            .find(|c| self.contains(*c))
            .unwrap_or(Codec::None)
    }
}

impl fmt::Debug for CodecSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(Codec::name)).finish()
    }
}

/// The codec names, comma-separated, in attribute order: `none, gzip, lz4`.
impl fmt::Display for CodecSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, codec) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(codec.name())?;
        }
        Ok(())
    }
}

/// A `[[clients]]` pattern: an exact text, a glob (`*`, `?`, `[...]`, `[!...]`) or
/// `re:<regex>`, over the whole text, read and matched as `[[topics]] match` is.
#[derive(Debug, Clone)]
pub struct NamePattern(TopicPattern);

/// The forms a `match` or `listener` pattern takes, for the message about a bad one.
pub(crate) const NAME_PATTERN_FORMS: &str =
    "an exact text, a glob (*, ?, [...], [!...]) or re:<regex>";

/// The forms a `software` pattern takes, for the message about a bad one.
pub(crate) const SOFTWARE_PATTERN_FORMS: &str = "NAME or NAME/VERSION, each an exact text, a glob \
     (*, ?, [...], [!...]) or re:<regex>, of letters, digits, '-', '.' and '_'";

impl NamePattern {
    /// Parses a pattern whose literal characters must be `legal` (`what` names the
    /// text matched, for the message when one is not).
    pub fn parse(pattern: &str, legal: fn(char) -> bool, what: &str) -> Result<Self, String> {
        TopicPattern::parse_with(pattern, legal)
            .map(NamePattern)
            .map_err(|e| match e {
                PatternError::IllegalTopicChar(c) => {
                    format!("{c:?} cannot be in {what}, so this rule would never match")
                }
                other => other.to_string(),
            })
    }

    /// Whether the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        self.0.matches(text)
    }
}

impl fmt::Display for NamePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Any character but a control character can be in a `client.id` or a listener name.
pub fn is_legal_client_id_char(c: char) -> bool {
    !c.is_control()
}

/// The characters kept of `client_software_name` and `client_software_version`
/// (ApiVersions v3+): ASCII letters, digits, '-', '.' and '_'.
pub fn is_legal_software_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')
}

/// `software = "NAME"` or `"NAME/VERSION"`: a pattern of `client_software_name` and
/// optionally one of `client_software_version`. Neither can hold '/', so the
/// pattern is exactly a pattern of the text `NAME/VERSION` split at its slash.
#[derive(Debug, Clone)]
pub struct SoftwarePattern {
    pub name: NamePattern,
    /// `None`: any version.
    pub version: Option<NamePattern>,
}

impl SoftwarePattern {
    pub fn parse(pattern: &str) -> Result<SoftwarePattern, String> {
        const WHAT: &str = "client software names and versions";
        let (name, version) = match pattern.split_once('/') {
            Some((name, version)) => (name, Some(version)),
            None => (pattern, None),
        };
        Ok(SoftwarePattern {
            name: NamePattern::parse(name, is_legal_software_char, WHAT)?,
            version: version
                .map(|v| NamePattern::parse(v, is_legal_software_char, WHAT))
                .transpose()?,
        })
    }

    pub fn matches(&self, software: &ClientSoftware<'_>) -> bool {
        self.name.matches(software.name)
            && self
                .version
                .as_ref()
                .is_none_or(|v| v.matches(software.version))
    }
}

impl fmt::Display for SoftwarePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name)?;
        if let Some(version) = &self.version {
            write!(f, "/{version}")?;
        }
        Ok(())
    }
}

/// What a client announced in ApiVersions v3+.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSoftware<'a> {
    /// `client_software_name`, such as `apache-kafka-java`.
    pub name: &'a str,
    /// `client_software_version`, such as `3.9.0`.
    pub version: &'a str,
}

/// One `[[clients]]` table.
#[derive(Debug, Clone)]
pub struct ClientRule {
    /// `match`: the request header's `client.id` (a null one is matched as "").
    pub client_id: Option<NamePattern>,
    /// `software`: what the client announced in ApiVersions v3+.
    pub software: Option<SoftwarePattern>,
    /// `listener`: the listener the client came through.
    pub listener: Option<NamePattern>,
    /// `accept`: the codecs these clients read, with none always in it.
    pub accept: CodecSet,
    /// The line of the rule's `[[clients]]` header.
    pub line: usize,
}

impl ClientRule {
    /// Whether every pattern the rule sets matches (at least one is set).
    pub fn matches(
        &self,
        client_id: Option<&str>,
        software: Option<&ClientSoftware<'_>>,
        listener: &str,
    ) -> bool {
        self.client_id
            .as_ref()
            .is_none_or(|p| p.matches(client_id.unwrap_or("")))
            && self
                .software
                .as_ref()
                .is_none_or(|p| software.is_some_and(|s| p.matches(s)))
            && self.listener.as_ref().is_none_or(|p| p.matches(listener))
    }
}

/// `[[clients]]`, in file order: the first rule that matches a client wins.
#[derive(Debug, Clone, Default)]
pub struct ClientRules {
    rules: Vec<ClientRule>,
}

impl ClientRules {
    pub fn new(rules: Vec<ClientRule>) -> ClientRules {
        ClientRules { rules }
    }

    pub fn rules(&self) -> &[ClientRule] {
        &self.rules
    }

    /// The codecs a client reads: the `accept` of the first rule that matches it,
    /// or [`CodecSet::ALL`] when none does. `client_id` is the request header's,
    /// `software` what the connection announced in ApiVersions v3+ (`None` when it
    /// did not), `listener` the listener it came through. Builds no string: each
    /// pattern matches the text given.
    pub fn accepts(
        &self,
        client_id: Option<&str>,
        software: Option<&ClientSoftware<'_>>,
        listener: &str,
    ) -> CodecSet {
        self.rules
            .iter()
            .find(|rule| rule.matches(client_id, software, listener))
            .map_or(CodecSet::ALL, |rule| rule.accept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        client_id: Option<&str>,
        software: Option<&str>,
        listener: Option<&str>,
        accept: &[Codec],
    ) -> ClientRule {
        ClientRule {
            client_id: client_id
                .map(|p| NamePattern::parse(p, is_legal_client_id_char, "client ids").unwrap()),
            software: software.map(|p| SoftwarePattern::parse(p).unwrap()),
            listener: listener
                .map(|p| NamePattern::parse(p, is_legal_client_id_char, "listeners").unwrap()),
            accept: CodecSet::of(accept.iter().copied()),
            line: 1,
        }
    }

    const JAVA: ClientSoftware<'static> = ClientSoftware {
        name: "apache-kafka-java",
        version: "2.0.1",
    };

    #[test]
    fn codec_sets_always_hold_none_and_print_in_attribute_order() {
        let set = CodecSet::of([Codec::Lz4, Codec::Gzip]);
        assert!(set.contains(Codec::None));
        assert!(!set.contains(Codec::Zstd));
        assert_eq!(set.to_string(), "none, gzip, lz4");
        assert_eq!(CodecSet::ALL.to_string(), "none, gzip, snappy, lz4, zstd");
        assert_eq!(
            CodecSet::ALL.without(Codec::Zstd).to_string(),
            "none, gzip, snappy, lz4"
        );
        assert_eq!(
            CodecSet::NONE_ONLY.without(Codec::None),
            CodecSet::NONE_ONLY
        );
    }

    #[test]
    fn choose_prefers_the_asked_codec_then_falls_back() {
        assert_eq!(CodecSet::ALL.choose(Codec::Lz4), Codec::Lz4);
        assert_eq!(CodecSet::of([Codec::Gzip]).choose(Codec::Lz4), Codec::Gzip);
        assert_eq!(
            CodecSet::of([Codec::Gzip, Codec::Snappy]).choose(Codec::Zstd),
            Codec::Snappy
        );
        assert_eq!(CodecSet::NONE_ONLY.choose(Codec::Lz4), Codec::None);
    }

    #[test]
    fn no_rule_accepts_all() {
        let rules = ClientRules::default();
        assert_eq!(
            rules.accepts(Some("x"), Some(&JAVA), "bootstrap"),
            CodecSet::ALL
        );
        let rules = ClientRules::new(vec![rule(Some("legacy-*"), None, None, &[Codec::Gzip])]);
        assert_eq!(rules.accepts(Some("app"), None, "bootstrap"), CodecSet::ALL);
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let rules = ClientRules::new(vec![
            rule(Some("legacy-*"), None, None, &[Codec::Gzip]),
            rule(Some("*"), None, None, &[Codec::Lz4]),
        ]);
        assert_eq!(
            rules.accepts(Some("legacy-billing"), None, "node 1"),
            CodecSet::of([Codec::Gzip])
        );
        assert_eq!(
            rules.accepts(Some("other"), None, "node 1"),
            CodecSet::of([Codec::Lz4])
        );
        // A null client.id is matched as the empty text.
        assert_eq!(
            rules.accepts(None, None, "node 1"),
            CodecSet::of([Codec::Lz4])
        );
    }

    #[test]
    fn every_pattern_a_rule_sets_must_match() {
        let rules = ClientRules::new(vec![rule(
            Some("app-*"),
            Some("apache-kafka-java/2.*"),
            Some("node *"),
            &[Codec::Snappy],
        )]);
        let snappy = CodecSet::of([Codec::Snappy]);
        assert_eq!(rules.accepts(Some("app-1"), Some(&JAVA), "node 3"), snappy);
        assert_eq!(
            rules.accepts(Some("app-1"), Some(&JAVA), "bootstrap"),
            CodecSet::ALL
        );
        assert_eq!(
            rules.accepts(Some("web"), Some(&JAVA), "node 3"),
            CodecSet::ALL
        );
        let newer = ClientSoftware {
            name: "apache-kafka-java",
            version: "3.9.0",
        };
        assert_eq!(
            rules.accepts(Some("app-1"), Some(&newer), "node 3"),
            CodecSet::ALL
        );
        // A client that announced no software never matches a software pattern.
        assert_eq!(rules.accepts(Some("app-1"), None, "node 3"), CodecSet::ALL);
    }

    #[test]
    fn software_without_a_version_matches_any_version() {
        let p = SoftwarePattern::parse("apache-kafka-java").unwrap();
        assert!(p.matches(&JAVA));
        assert!(!p.matches(&ClientSoftware {
            name: "librdkafka",
            version: "2.0.1"
        }));
        let p = SoftwarePattern::parse("*/1.[0-9].*").unwrap();
        assert!(p.matches(&ClientSoftware {
            name: "librdkafka",
            version: "1.9.2"
        }));
        assert!(!p.matches(&JAVA));
        assert_eq!(p.to_string(), "*/1.[0-9].*");
    }

    #[test]
    fn bad_patterns_say_why() {
        assert_eq!(
            SoftwarePattern::parse("kafka java").unwrap_err(),
            "' ' cannot be in client software names and versions, so this rule would never match"
        );
        assert_eq!(SoftwarePattern::parse("a/").unwrap_err(), "empty pattern");
        assert_eq!(
            NamePattern::parse("a\tb", is_legal_client_id_char, "client ids").unwrap_err(),
            "'\\t' cannot be in client ids, so this rule would never match"
        );
        // Client ids take characters topic names do not.
        let p = NamePattern::parse("my app@host-*", is_legal_client_id_char, "client ids").unwrap();
        assert!(p.matches("my app@host-1"));
        assert!(NamePattern::parse("re:(", is_legal_client_id_char, "x").is_err());
    }
}
