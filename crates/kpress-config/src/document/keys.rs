//! Every key a policy file may set, read from the very tables the walk checks keys
//! against, so a key the parser learns is listed here too.

use kpress_codec::options::{OPTION_KEYS, TEXT_OPTION_KEYS};

use super::policy::MATCH_KEY;
use super::{
    admin, auto, consumers, limits, listener, log, overload, policy, shadow, upstream, SECTIONS,
};

/// Every key a policy file may set, as dotted paths from the root (`listener.tls.cert`,
/// `topics.compression.zstd.level`), sections in the parser's order. A nested table
/// (`listener.tls`) is listed by its keys, not by itself.
pub(crate) fn accepted_keys() -> Vec<String> {
    let mut out = Vec::new();
    for section in SECTIONS {
        let mut add = |keys: &[&str], subtables: &[(&str, &[&str])]| {
            for key in keys {
                match subtables.iter().find(|(name, _)| name == key) {
                    Some((name, inner)) => {
                        out.extend(inner.iter().map(|leaf| format!("{section}.{name}.{leaf}")))
                    }
                    None => out.push(format!("{section}.{key}")),
                }
            }
        };
        let policy_keys: Vec<&str> = policy::KEYS
            .into_iter()
            .chain(policy::OVERLOAD_KEYS)
            .chain(OPTION_KEYS)
            .chain(TEXT_OPTION_KEYS)
            .chain(auto::AUTO_KEYS)
            .collect();
        match section {
            "listener" => add(&listener::KEYS, &[("tls", &listener::TLS_KEYS)]),
            "upstream" => add(
                &upstream::KEYS,
                &[("tls", &upstream::TLS_KEYS), ("sasl", &upstream::SASL_KEYS)],
            ),
            "limits" => add(&limits::KEYS, &[]),
            "admin" => add(&admin::KEYS, &[]),
            "log" => add(&log::KEYS, &[]),
            "shadow" => add(&shadow::KEYS, &[]),
            "overload" => add(&overload::KEYS, &[]),
            "defaults" => add(&policy_keys, &[]),
            "topics" => add(&[&[MATCH_KEY], policy_keys.as_slice()].concat(), &[]),
            "consumers" => {
                let keys: Vec<&str> = consumers::KEYS
                    .into_iter()
                    .filter(|k| *k != "compression")
                    .chain(crate::overload::LEVEL_KEYS)
                    .collect();
                add(&keys, &[])
            }
            "clients" => add(&consumers::CLIENT_KEYS, &[]),
            "autopilot" => add(&auto::KEYS, &[]),
            // A section with no arm here is caught by the test that every section
            // contributes a key.
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigError;

    const LISTENER: &str = "bind = \"127.0.0.1:19092\"";
    const UPSTREAM: &str = "bootstrap_servers = [\"127.0.0.1:9092\"]";

    /// A policy with the two required sections that sets `dotted` (to `value`).
    fn policy_setting(dotted: &str, value: &str) -> String {
        let (section, rest) = dotted.split_once('.').expect("a section and a key");
        let mut text = String::new();
        for (name, required) in [("listener", LISTENER), ("upstream", UPSTREAM)] {
            if name != section {
                text.push_str(&format!("[{name}]\n{required}\n"));
            }
        }
        match section {
            "clients" => {
                text.push_str("[[clients]]\n");
                if rest != "match" {
                    text.push_str("match = \"c\"\n");
                }
            }
            "topics" => {
                text.push_str("[[topics]]\n");
                if rest != MATCH_KEY {
                    text.push_str("match = \"t\"\n");
                }
            }
            "listener" if rest != "bind" => text.push_str(&format!("[listener]\n{LISTENER}\n")),
            "upstream" if rest != "bootstrap_servers" => {
                text.push_str(&format!("[upstream]\n{UPSTREAM}\n"))
            }
            _ => text.push_str(&format!("[{section}]\n")),
        }
        text.push_str(&format!("{rest} = {value}\n"));
        text
    }

    fn unknown_problems(text: &str) -> Vec<String> {
        match crate::parse(text, "t.toml") {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid(problems)) => problems
                .iter()
                .filter(|p| {
                    p.message.starts_with("unknown key") || p.message.starts_with("unknown section")
                })
                .map(ToString::to_string)
                .collect(),
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn lists_known_keys_and_not_unknown_ones() {
        let keys = accepted_keys();
        for known in [
            "listener.bind",
            "listener.tls.cert",
            "upstream.sasl.mechanism",
            "upstream.tls.server_name",
            "defaults.compression.type",
            "defaults.compression.zstd.level",
            "defaults.compression.gzip.provider",
            "topics.match",
            "topics.compression.zstd.level",
            "shadow.candidates",
            "limits.max_batch_bytes",
            "admin.bind",
            "admin.readiness_window_secs",
            "log.level",
        ] {
            assert!(keys.iter().any(|k| k == known), "{known} missing: {keys:?}");
        }
        for absent in [
            "listener.tls",
            "upstream.sasl",
            "upstream.sasl.password",
            "defaults.match",
            "topics.compression.zstd.levle",
            "metrics.bind",
            "defaults.allow_growth",
            "bind",
        ] {
            assert!(!keys.iter().any(|k| k == absent), "{absent} listed");
        }
    }

    #[test]
    fn lists_each_key_once() {
        let keys = accepted_keys();
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), keys.len(), "{keys:?}");
    }

    #[test]
    fn every_section_contributes_keys() {
        let keys = accepted_keys();
        for section in SECTIONS {
            assert!(
                keys.iter().any(|k| k.starts_with(&format!("{section}."))),
                "[{section}] has no accepted key: give it an arm in accepted_keys"
            );
        }
    }

    #[test]
    fn each_listed_key_is_accepted_by_the_parser() {
        // The check reads keys, so a value of the wrong type still tells: it is a
        // problem about the value, never "unknown key".
        for key in accepted_keys() {
            for value in ["1", "\"x\""] {
                let text = policy_setting(&key, value);
                let unknown = unknown_problems(&text);
                assert!(unknown.is_empty(), "{key}: {unknown:?}\n{text}");
            }
        }
    }

    #[test]
    fn the_check_sees_an_unknown_key() {
        for key in [
            "limits.max_batch_byte",
            "topics.compression.zstd.levle",
            "nosuch.key",
        ] {
            let text = policy_setting(key, "1");
            assert_eq!(unknown_problems(&text).len(), 1, "{key}\n{text}");
        }
    }
}
