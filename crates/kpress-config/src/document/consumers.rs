//! `[consumers]` and `[[clients]]`: what Fetch responses are re-encoded into, and which
//! codecs each client reads.

use std::collections::HashMap;

use kpress_codec::{Codec, CompressionOptions};
use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;

use super::{Entry, Walk};
use crate::client_rules::{
    is_legal_client_id_char, ClientRule, ClientRules, CodecSet, NamePattern, SoftwarePattern,
    NAME_PATTERN_FORMS, SOFTWARE_PATTERN_FORMS,
};
use crate::problem::line_column;
use crate::settings::{ConsumerSettings, CONSUMERS_CACHE_BYTES_MAX};

pub(super) const KEYS: [&str; 4] = ["reencode", "codec", "cache_bytes", "compression"];
pub(super) const CLIENT_KEYS: [&str; 4] = ["match", "software", "listener", "accept"];
/// How problems name a `[[clients]]` table: an array of tables, as it is written.
const CLIENTS: &str = "[[clients]]";

/// Every codec under its Kafka name, for [`Walk::choice`].
fn codecs() -> [(&'static str, Codec); 5] {
    Codec::ALL.map(|c| (c.name(), c))
}

/// `"none", "gzip", ...`: the allowed values of `consumers.codec` and `accept`.
fn codecs_allowed() -> String {
    Codec::ALL.map(|c| format!("\"{}\"", c.name())).join(", ")
}

impl Walk<'_> {
    /// `[consumers]`; a key left unset keeps its default, and `clients` is empty
    /// (the walk adds the `[[clients]]` rules).
    pub(super) fn consumers(&mut self, table: &DeTable<'_>) -> Option<ConsumerSettings> {
        let settings = ConsumerSettings::default();
        let keys = self.known_keys("consumers", table, &KEYS);
        let reencode = match keys.get("reencode") {
            Some((_, v)) => self.boolean("consumers.reencode", v),
            None => Some(settings.reencode),
        };
        let codec = match keys.get("codec") {
            Some((_, v)) => self.choice("consumers.codec", v, "codec", &codecs()),
            None => Some(settings.codec),
        };
        let cache_bytes = match keys.get("cache_bytes") {
            Some((_, v)) => self
                .integer_in(
                    "consumers.cache_bytes",
                    v,
                    0,
                    CONSUMERS_CACHE_BYTES_MAX as i64,
                    &format!("0 (no cache)..{CONSUMERS_CACHE_BYTES_MAX}"),
                )
                .map(|n| n as usize),
            None => Some(settings.cache_bytes),
        };
        let options = match keys.get("compression") {
            Some((_, v)) => self.consumer_levels(v),
            None => Some(settings.options.clone()),
        };
        Some(ConsumerSettings {
            reencode: reencode?,
            codec: codec?,
            options: options?,
            cache_bytes: cache_bytes?,
            ..settings
        })
    }

    /// `compression.gzip.level`, `compression.lz4.level`, `compression.zstd.level`.
    fn consumer_levels(&mut self, value: &Spanned<DeValue<'_>>) -> Option<CompressionOptions> {
        let mut options = CompressionOptions::default();
        let mut ok = true;
        let compression = self.subtable("consumers.compression", value)?;
        let codecs = self.known_keys(
            "consumers.compression",
            compression,
            &["gzip", "lz4", "zstd"],
        );
        for (codec, (_, codec_value)) in &codecs {
            let section = format!("consumers.compression.{codec}");
            let Some(table) = self.subtable(&section, codec_value) else {
                ok = false;
                continue;
            };
            let levels = self.known_keys(&section, table, &["level"]);
            let Some((_, level)) = levels.get("level") else {
                continue;
            };
            let key = format!("compression.{codec}.level");
            let set = self.codec_level(&format!("consumers.{key}"), &key, level, &mut options);
            ok &= set.is_some();
        }
        ok.then_some(options)
    }

    /// `[[clients]]`.
    pub(super) fn clients(
        &mut self,
        key: &Spanned<DeString<'_>>,
        value: &Spanned<DeValue<'_>>,
    ) -> Option<ClientRules> {
        let items = self.rule_items("clients", key, value)?;
        let mut rules = Vec::with_capacity(items.len());
        let mut ok = true;
        for item in items.iter() {
            let Some(table) = self.rule_table("clients", item) else {
                ok = false;
                continue;
            };
            match self.client_rule(table, item) {
                Some(rule) => rules.push(rule),
                None => ok = false,
            }
        }
        ok.then(|| ClientRules::new(rules))
    }

    fn client_rule(
        &mut self,
        table: &DeTable<'_>,
        item: &Spanned<DeValue<'_>>,
    ) -> Option<ClientRule> {
        let keys = self.client_keys(table);
        let client_id = self.pattern(&keys, "match", NAME_PATTERN_FORMS, |text| {
            NamePattern::parse(text, is_legal_client_id_char, "client ids")
        });
        let listener = self.pattern(&keys, "listener", NAME_PATTERN_FORMS, |text| {
            NamePattern::parse(text, is_legal_client_id_char, "listener names")
        });
        let software = self.pattern(
            &keys,
            "software",
            SOFTWARE_PATTERN_FORMS,
            SoftwarePattern::parse,
        );
        let accept = match keys.get("accept") {
            Some((_, v)) => self.accept(v),
            None => {
                let at = item.span().start;
                self.sink.report(
                    &(at..at),
                    Some("clients.accept"),
                    None,
                    format!("missing key in {CLIENTS}"),
                    Some(codecs_allowed()),
                );
                None
            }
        };
        if !["match", "software", "listener"]
            .iter()
            .any(|k| keys.contains_key(*k))
        {
            let at = item.span().start;
            self.sink.report(
                &(at..at),
                Some(CLIENTS),
                None,
                "a rule needs at least one of match, software, listener",
                None,
            );
            return None;
        }
        let line = line_column(self.sink.text(), item.span().start).0;
        Some(ClientRule {
            client_id: client_id?,
            software: software?,
            listener: listener?,
            accept: accept?,
            line,
        })
    }

    /// The keys of one `[[clients]]` table by name; each unknown one is reported.
    fn client_keys<'a, 'i>(&mut self, table: &'a DeTable<'i>) -> HashMap<String, Entry<'a, 'i>> {
        let mut found = HashMap::new();
        for (key, value) in table.iter() {
            let name = key.get_ref().as_ref();
            if CLIENT_KEYS.contains(&name) {
                found.insert(name.to_owned(), (key, value));
            } else {
                self.sink.unknown_name(
                    &key.span(),
                    &format!("clients.{name}"),
                    name,
                    format!("unknown key in {CLIENTS}"),
                    &CLIENT_KEYS,
                );
            }
        }
        found
    }

    /// The pattern `key` sets: `Some(None)` when unset, `None` when it has a problem,
    /// reported with the pattern `forms` allowed.
    fn pattern<T>(
        &mut self,
        keys: &HashMap<String, Entry<'_, '_>>,
        key: &str,
        forms: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<Option<T>> {
        let Some((_, value)) = keys.get(key) else {
            return Some(None);
        };
        let shown = format!("clients.{key}");
        let text = self.string(&shown, value)?;
        match parse(text) {
            Ok(p) => Some(Some(p)),
            Err(message) => {
                self.sink
                    .bad_value(&shown, &value.span(), message, Some(forms.to_owned()));
                None
            }
        }
    }

    /// `accept`: codec names, without repeats; none is always in the set.
    fn accept(&mut self, value: &Spanned<DeValue<'_>>) -> Option<CodecSet> {
        const KEY: &str = "clients.accept";
        let DeValue::Array(items) = value.get_ref() else {
            self.sink.bad_value(
                KEY,
                &value.span(),
                format!(
                    "must be an array of codec names, not {}",
                    value.get_ref().type_str()
                ),
                Some(codecs_allowed()),
            );
            return None;
        };
        let mut set = CodecSet::NONE_ONLY;
        let codecs = codecs();
        let mut seen = Vec::with_capacity(items.len().min(codecs.len()));
        let mut ok = true;
        for item in items.iter() {
            let Some(codec) = self.choice(KEY, item, "codec", &codecs) else {
                ok = false;
                continue;
            };
            if seen.contains(&codec) {
                self.sink.bad_value(
                    KEY,
                    &item.span(),
                    format!("repeats {}", codec.name()),
                    Some(codecs_allowed()),
                );
                ok = false;
            }
            seen.push(codec);
            set = set.with(codec);
        }
        ok.then_some(set)
    }
}

#[cfg(test)]
mod tests {
    use kpress_codec::Codec;

    use super::super::testing::{config, one_problem, problems, HEAD};
    use crate::{ClientSoftware, CodecSet};

    #[test]
    fn defaults_reencode_to_lz4_with_a_64_mib_cache_and_no_rules() {
        let c = config(HEAD);
        assert!(c.consumers.reencode);
        assert_eq!(c.consumers.codec, Codec::Lz4);
        assert_eq!(c.consumers.cache_bytes, 64 << 20);
        assert!(c.consumers.clients.rules().is_empty());
        assert_eq!(
            c.consumers.clients.accepts(Some("any"), None, "bootstrap"),
            CodecSet::ALL
        );
    }

    #[test]
    fn consumers_keys_are_read() {
        let c = config(&format!(
            "{HEAD}[consumers]\nreencode = false\ncodec = \"gzip\"\ncache_bytes = 0\n\
             compression.gzip.level = 1\ncompression.zstd.level = -5\n"
        ));
        assert!(!c.consumers.reencode);
        assert_eq!(c.consumers.codec, Codec::Gzip);
        assert_eq!(c.consumers.cache_bytes, 0);
        assert_eq!(c.consumers.options.gzip_level(), 1);
        assert_eq!(c.consumers.options.zstd_level(), -5);
    }

    #[test]
    fn consumers_problems_name_file_line_key_value_and_allowed() {
        assert_eq!(
            one_problem(&format!("{HEAD}[consumers]\ncodec = \"brotli\"\n")),
            "t.toml:6:9: consumers.codec = \"brotli\": unknown codec \
             (allowed: \"none\", \"gzip\", \"snappy\", \"lz4\", \"zstd\")"
        );
        assert_eq!(
            one_problem(&format!("{HEAD}[consumers]\ncache_bytes = -1\n")),
            "t.toml:6:15: consumers.cache_bytes = -1: out of range \
             (allowed: 0 (no cache)..17179869184)"
        );
        assert_eq!(
            one_problem(&format!("{HEAD}[consumers]\nreencode = 1\n")),
            "t.toml:6:12: consumers.reencode = 1: must be true or false, not integer \
             (allowed: true, false)"
        );
        assert_eq!(
            one_problem(&format!("{HEAD}[consumers]\ncompression.lz4.level = 99\n")),
            "t.toml:6:25: consumers.compression.lz4.level = 99: out of range (allowed: 1..17)"
        );
        let unknown = one_problem(&format!("{HEAD}[consumers]\ncompression.lz4.block = 5\n"));
        assert!(
            unknown.starts_with("t.toml:6:17: consumers.compression.lz4.block: unknown key"),
            "{unknown}"
        );
        let unknown = one_problem(&format!("{HEAD}[consumers]\ncodecs = \"lz4\"\n"));
        assert!(
            unknown.starts_with("t.toml:6:1: consumers.codecs: unknown key in [consumers]"),
            "{unknown}"
        );
    }

    #[test]
    fn client_rules_are_read_in_file_order() {
        let c = config(&format!(
            "{HEAD}[[clients]]\nmatch = \"legacy-*\"\naccept = [\"gzip\"]\n\
             [[clients]]\nsoftware = \"apache-kafka-java/2.*\"\nlistener = \"node *\"\n\
             accept = [\"gzip\", \"snappy\", \"lz4\"]\n[[clients]]\nmatch = \"kafkajs\"\naccept = []\n"
        ));
        let rules = &c.consumers.clients;
        assert_eq!(rules.rules().len(), 3);
        assert_eq!(rules.rules()[1].line, 8);
        assert_eq!(
            rules.accepts(Some("legacy-billing"), None, "bootstrap"),
            CodecSet::of([Codec::Gzip])
        );
        let java = ClientSoftware {
            name: "apache-kafka-java",
            version: "2.0.1",
        };
        assert_eq!(
            rules.accepts(Some("app"), Some(&java), "node 2"),
            CodecSet::of([Codec::Gzip, Codec::Snappy, Codec::Lz4])
        );
        assert_eq!(
            rules.accepts(Some("kafkajs"), None, "node 2"),
            CodecSet::NONE_ONLY
        );
        assert_eq!(rules.accepts(Some("app"), None, "node 2"), CodecSet::ALL);
    }

    #[test]
    fn clients_and_consumers_are_read_in_either_order() {
        let c = config(&format!(
            "{HEAD}[[clients]]\nmatch = \"a\"\naccept = [\"gzip\"]\n[consumers]\ncodec = \"zstd\"\n"
        ));
        assert_eq!(c.consumers.codec, Codec::Zstd);
        assert_eq!(c.consumers.clients.rules().len(), 1);
        // A broken section does not hide the other's problems.
        assert_eq!(
            problems(&format!(
                "{HEAD}[consumers]\ncodec = \"x\"\n[[clients]]\nmatch = \"a\"\naccept = [\"y\"]\n"
            ))
            .len(),
            2
        );
    }

    #[test]
    fn client_rule_problems_name_file_line_key_value_and_allowed() {
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[[clients]]\nmatch = \"a\"\naccept = [\"lz5\"]\n"
            )),
            "t.toml:7:11: clients.accept = \"lz5\": unknown codec \
             (allowed: \"none\", \"gzip\", \"snappy\", \"lz4\", \"zstd\")"
        );
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[[clients]]\nmatch = \"a\"\naccept = [\"GZIP\"]\n"
            )),
            "t.toml:7:11: clients.accept = \"GZIP\": unknown codec: names are case-sensitive, \
             write \"gzip\" (allowed: \"none\", \"gzip\", \"snappy\", \"lz4\", \"zstd\")"
        );
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[[clients]]\nmatch = \"a\"\naccept = [\"gzip\", \"gzip\"]\n"
            )),
            "t.toml:7:19: clients.accept = \"gzip\": repeats gzip \
             (allowed: \"none\", \"gzip\", \"snappy\", \"lz4\", \"zstd\")"
        );
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[[clients]]\nmatch = \"a\"\naccept = \"gzip\"\n"
            )),
            "t.toml:7:10: clients.accept = \"gzip\": must be an array of codec names, not string \
             (allowed: \"none\", \"gzip\", \"snappy\", \"lz4\", \"zstd\")"
        );
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[[clients]]\nsoftware = \"kafka java\"\naccept = [\"gzip\"]\n"
            )),
            "t.toml:6:12: clients.software = \"kafka java\": ' ' cannot be in client software \
             names and versions, so this rule would never match (allowed: NAME or \
             NAME/VERSION, each an exact text, a glob (*, ?, [...], [!...]) or re:<regex>, of \
             letters, digits, '-', '.' and '_')"
        );
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[[clients]]\nmatch = \"re:(\"\naccept = [\"gzip\"]\n"
            ))
            .split_once(" (allowed: ")
            .map(|(_, allowed)| allowed),
            Some("an exact text, a glob (*, ?, [...], [!...]) or re:<regex>)")
        );
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[[clients]]\nmatch = \"a\"\nlistener = \"node\t1\"\naccept = []\n"
            )),
            "t.toml:7:12: clients.listener = \"node\t1\": '\\t' cannot be in listener names, \
             so this rule would never match (allowed: an exact text, a glob (*, ?, [...], \
             [!...]) or re:<regex>)"
        );
        assert_eq!(
            one_problem(&format!("{HEAD}[[clients]]\naccept = [\"gzip\"]\n")),
            "t.toml:5:1: [[clients]]: a rule needs at least one of match, software, listener"
        );
        assert_eq!(
            one_problem(&format!("{HEAD}[[clients]]\nmatch = \"a\"\n")),
            "t.toml:5:1: clients.accept: missing key in [[clients]] \
             (allowed: \"none\", \"gzip\", \"snappy\", \"lz4\", \"zstd\")"
        );
        let unknown = one_problem(&format!(
            "{HEAD}[[clients]]\nmatch = \"a\"\naccept = []\naccepts = []\n"
        ));
        assert!(
            unknown.starts_with(
                "t.toml:8:1: clients.accepts: unknown key in [[clients]] \
                 (allowed: match, software, listener, accept)"
            ),
            "{unknown}"
        );
        assert_eq!(
            one_problem(&format!("{HEAD}[clients]\nmatch = \"a\"\naccept = []\n")),
            "t.toml:5:1: [clients]: rules are an array of tables: write [[clients]]"
        );
        // Each rule's problems are reported, not only the first.
        assert_eq!(
            problems(&format!(
                "{HEAD}[[clients]]\nmatch = \"re:(\"\naccept = []\n[[clients]]\nlistener = 1\n\
                 accept = []\n"
            ))
            .len(),
            2
        );
    }
}
