//! DNS names as TLS clients send them in SNI, and the `{node}` pattern that names each
//! broker node in sni mode.

use std::fmt;

/// Longest DNS name, in characters, without a trailing dot.
pub const DNS_NAME_MAX_CHARS: usize = 253;
/// Longest label of a DNS name.
pub const DNS_LABEL_MAX_CHARS: usize = 63;
/// The most digits a non-negative Kafka node id (an int32) has.
const NODE_ID_MAX_DIGITS: usize = 10;

/// What a name may be, for messages.
pub(crate) const DNS_NAME_ALLOWED: &str =
    "letters, digits, '-' and '.'; labels of 1..63 characters, \
     not starting or ending with '-'; at most 253 characters; the last label not all digits";

/// Why a text is not a DNS name or not a host pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostNameError {
    #[error("is empty")]
    Empty,
    #[error("{0:?} cannot be in a DNS name")]
    Character(char),
    #[error("has an empty label (a leading, trailing or doubled '.')")]
    EmptyLabel,
    #[error("label {label:?} is {chars} characters long{with_id} (at most 63)")]
    LabelTooLong {
        label: String,
        chars: usize,
        /// Set for a pattern: the length counts a 10-digit node id.
        with_id: &'static str,
    },
    #[error("label {0:?} starts or ends with '-'")]
    Hyphen(String),
    #[error("is {chars} characters long{with_id} (at most 253)")]
    TooLong { chars: usize, with_id: &'static str },
    #[error(
        "ends in an all-digit label, as an IP address does: clients send no server name (SNI) for an IP address"
    )]
    NumericLastLabel,
    #[error("has no {{node}}: each broker node needs a name of its own, with its node id where {{node}} stands")]
    NoPlaceholder,
    #[error("has {{node}} more than once")]
    PlaceholderTwice,
}

/// Checks a host name clients reach kpress by, or kpress reaches a broker by: letters,
/// digits and '-' in dot-separated labels (RFC 1123), compared without regard to case.
pub fn check_dns_name(name: &str) -> Result<(), HostNameError> {
    check_labels(name, "", 0)
}

/// `listener.advertised_host_pattern`: a DNS name with `{node}` once, where a broker's
/// node id goes (`broker-{node}.kafka.example.com` names node 3 `broker-3.kafka.example.com`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    prefix: String,
    suffix: String,
}

impl HostPattern {
    /// Where the node id goes.
    pub const PLACEHOLDER: &'static str = "{node}";

    /// Checks a pattern: `{node}` exactly once, and a valid DNS name for every node id
    /// (its lengths counted with the longest, 10 digits).
    pub fn new(pattern: &str) -> Result<HostPattern, HostNameError> {
        let Some((prefix, suffix)) = pattern.split_once(Self::PLACEHOLDER) else {
            return Err(if pattern.is_empty() {
                HostNameError::Empty
            } else {
                HostNameError::NoPlaceholder
            });
        };
        if suffix.contains(Self::PLACEHOLDER) {
            return Err(HostNameError::PlaceholderTwice);
        }
        check_labels(pattern, Self::PLACEHOLDER, NODE_ID_MAX_DIGITS)?;
        Ok(HostPattern {
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
        })
    }

    /// The name of node `node_id`; `None` for a negative id (Kafka advertises none).
    pub fn host(&self, node_id: i32) -> Option<String> {
        (node_id >= 0).then(|| format!("{}{node_id}{}", self.prefix, self.suffix))
    }

    /// The node a name (a client's SNI) is the name of: exactly what [`HostPattern::host`]
    /// gives, letter case aside (DNS names are compared without regard to case). A
    /// node id with leading zeros or a sign names no node: kpress never hands one out.
    pub fn node_id(&self, name: &str) -> Option<i32> {
        let prefix_len = self.prefix.len();
        let suffix_len = self.suffix.len();
        if name.len() <= prefix_len + suffix_len {
            return None;
        }
        let (head, rest) = (name.get(..prefix_len)?, name.get(prefix_len..)?);
        let (digits, tail) = rest.split_at_checked(rest.len() - suffix_len)?;
        if !head.eq_ignore_ascii_case(&self.prefix) || !tail.eq_ignore_ascii_case(&self.suffix) {
            return None;
        }
        let canonical = digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if !canonical {
            return None;
        }
        digits.parse::<i32>().ok()
    }
}

/// The pattern as written.
impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{}", self.prefix, Self::PLACEHOLDER, self.suffix)
    }
}

/// Checks `name`'s labels, where each `placeholder` (if not empty) stands for
/// `placeholder_chars` digits.
fn check_labels(
    name: &str,
    placeholder: &str,
    placeholder_chars: usize,
) -> Result<(), HostNameError> {
    if name.is_empty() {
        return Err(HostNameError::Empty);
    }
    let with_id = if placeholder.is_empty() {
        ""
    } else {
        " with a 10-digit node id"
    };
    // Every placeholder is replaced by one digit to check characters and hyphens;
    // lengths count it at its widest.
    let (substituted, widen) = if placeholder.is_empty() {
        (name.to_owned(), 0)
    } else {
        (
            name.replace(placeholder, "0"),
            placeholder_chars.saturating_sub(1),
        )
    };
    let mut total = 0;
    let mut last_numeric = false;
    for (label, written) in substituted.split('.').zip(name.split('.')) {
        if let Some(bad) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
        {
            return Err(HostNameError::Character(bad));
        }
        if label.is_empty() {
            return Err(HostNameError::EmptyLabel);
        }
        let chars = label.len() + widen * written.matches(placeholder).count().min(1);
        if chars > DNS_LABEL_MAX_CHARS {
            return Err(HostNameError::LabelTooLong {
                label: written.to_owned(),
                chars,
                with_id,
            });
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(HostNameError::Hyphen(written.to_owned()));
        }
        total += chars + 1;
        last_numeric = label.bytes().all(|b| b.is_ascii_digit());
    }
    let total = total - 1;
    if total > DNS_NAME_MAX_CHARS {
        return Err(HostNameError::TooLong {
            chars: total,
            with_id,
        });
    }
    if last_numeric {
        return Err(HostNameError::NumericLastLabel);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names_follow_rfc_1123() {
        for ok in [
            "a",
            "kafka.internal",
            "Broker-1.Kafka.example.com",
            "1a.example.com",
            "x.y2",
            &format!("{}.com", "a".repeat(63)),
            &format!("{}{}", "a.".repeat(125), "bcd"),
        ] {
            assert_eq!(check_dns_name(ok), Ok(()), "{ok}");
        }
        let long_label = "a".repeat(64);
        for (bad, why) in [
            ("", HostNameError::Empty),
            ("kafka_1", HostNameError::Character('_')),
            ("a b", HostNameError::Character(' ')),
            ("bé.com", HostNameError::Character('é')),
            ("a..b", HostNameError::EmptyLabel),
            (".a", HostNameError::EmptyLabel),
            ("a.", HostNameError::EmptyLabel),
            ("-a.com", HostNameError::Hyphen("-a".into())),
            ("a-.com", HostNameError::Hyphen("a-".into())),
            ("10.0.0.1", HostNameError::NumericLastLabel),
            ("broker.7", HostNameError::NumericLastLabel),
            (
                &format!("{long_label}.com"),
                HostNameError::LabelTooLong {
                    label: long_label.clone(),
                    chars: 64,
                    with_id: "",
                },
            ),
            (
                &format!("{}{}", "a.".repeat(125), "bcde"),
                HostNameError::TooLong {
                    chars: 254,
                    with_id: "",
                },
            ),
        ] {
            assert_eq!(check_dns_name(bad), Err(why), "{bad:?}");
        }
    }

    #[test]
    fn a_pattern_has_node_once_and_is_a_name_for_the_longest_id() {
        let p = HostPattern::new("broker-{node}.kafka.example.com").unwrap();
        assert_eq!(p.to_string(), "broker-{node}.kafka.example.com");
        assert_eq!(p.host(3).unwrap(), "broker-3.kafka.example.com");
        assert_eq!(
            p.host(i32::MAX).unwrap(),
            "broker-2147483647.kafka.example.com"
        );
        assert_eq!(p.host(-1), None);
        assert!(HostPattern::new("{node}.kafka").is_ok());
        assert!(HostPattern::new("b{node}x.kafka").is_ok());
        for (bad, why) in [
            ("", HostNameError::Empty),
            ("broker.kafka", HostNameError::NoPlaceholder),
            ("{node}-{node}.kafka", HostNameError::PlaceholderTwice),
            ("broker-{id}.kafka", HostNameError::NoPlaceholder),
            ("{node}-{id}.kafka", HostNameError::Character('{')),
            ("broker.{node}", HostNameError::NumericLastLabel),
            ("-{node}.kafka", HostNameError::Hyphen("-{node}".into())),
            ("{node}-.kafka", HostNameError::Hyphen("{node}-".into())),
            ("{node}..kafka", HostNameError::EmptyLabel),
        ] {
            assert_eq!(HostPattern::new(bad), Err(why), "{bad:?}");
        }
        // 54 letters + 10 digits = 64: one too many for a label.
        let label = format!("{}{{node}}", "b".repeat(54));
        assert_eq!(
            HostPattern::new(&format!("{label}.kafka")),
            Err(HostNameError::LabelTooLong {
                label: label.clone(),
                chars: 64,
                with_id: " with a 10-digit node id",
            })
        );
        assert!(HostPattern::new(&format!("{}{{node}}.kafka", "b".repeat(53))).is_ok());
        // 244 + 10 = 254 characters in all.
        let name = format!("{}{{node}}.k", "a.".repeat(121));
        assert_eq!(
            HostPattern::new(&name),
            Err(HostNameError::TooLong {
                chars: 254,
                with_id: " with a 10-digit node id",
            })
        );
        let name = format!("{}{{node}}.k", "a.".repeat(120));
        assert!(HostPattern::new(&name).is_ok(), "252 characters");
    }

    #[test]
    fn a_name_is_a_node_s_exactly_when_the_pattern_gives_it() {
        let p = HostPattern::new("broker-{node}.kafka.example.com").unwrap();
        assert_eq!(p.node_id("broker-0.kafka.example.com"), Some(0));
        assert_eq!(p.node_id("broker-12.kafka.example.com"), Some(12));
        assert_eq!(p.node_id("BROKER-12.Kafka.Example.COM"), Some(12));
        assert_eq!(
            p.node_id("broker-2147483647.kafka.example.com"),
            Some(i32::MAX)
        );
        for other in [
            "broker-.kafka.example.com",
            "broker-01.kafka.example.com",
            "broker--1.kafka.example.com",
            "broker-+1.kafka.example.com",
            "broker-2147483648.kafka.example.com",
            "broker-1x.kafka.example.com",
            "broker-1.kafka.example.org",
            "xbroker-1.kafka.example.com",
            "bootstrap.kafka.example.com",
            "broker-1.kafka.example.com.",
            "",
            "é",
            "brokeré1.kafka.example.com",
        ] {
            assert_eq!(p.node_id(other), None, "{other:?}");
        }
        let bare = HostPattern::new("{node}.k").unwrap();
        assert_eq!(bare.node_id("7.k"), Some(7));
        assert_eq!(bare.node_id(".k"), None);
    }
}
