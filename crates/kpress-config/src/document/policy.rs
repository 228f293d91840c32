//! `[defaults]` and `[[topics]]`: the codec, its `compression.*` options and when to
//! rewrite, per topic, under Kafka's property names.

use std::collections::HashMap;
use std::ops::Range;

use kpress_batch::RecompressMode;
use kpress_codec::gzip_providers::{ProviderKind, Registry};
use kpress_codec::options::{allowed_values, GZIP_PROVIDER_VALUES, OPTION_KEYS, TEXT_OPTION_KEYS};
use kpress_codec::OptionError;
use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;

use super::auto::{AUTO_KEYS, AUTO_MAX_CORES, AUTO_MAX_CPU_SHARE};
use super::Walk;
use crate::overload::{level_key, level_of, level_range, LEVEL_KEYS};
use crate::problem::line_column;
use crate::settings::{Compression, CpuShare, TopicPolicy, TopicRule};
use crate::topic_match::TopicPattern;

/// Keys of a `[defaults]` or `[[topics]]` table besides `match` and `compression.*`.
pub(super) const KEYS: [&str; 3] = ["compression.type", "recompress", "only_if_smaller"];
/// `overload.*` keys of a `[defaults]` or `[[topics]]` table: the fallback under
/// overload (the level keys are the codec options' own, prefixed), the floor of
/// adaptive levels and the cap on the rule's share of rewrite CPU.
pub(super) const OVERLOAD_KEYS: [&str; 6] = [
    OVERLOAD_COMPRESSION_TYPE,
    "overload.compression.gzip.level",
    "overload.compression.lz4.level",
    "overload.compression.zstd.level",
    OVERLOAD_MIN_LEVEL,
    OVERLOAD_MAX_CPU_SHARE,
];
const OVERLOAD_PREFIX: &str = "overload.";
const OVERLOAD_COMPRESSION_TYPE: &str = "overload.compression.type";
const OVERLOAD_MIN_LEVEL: &str = "overload.min_level";
const OVERLOAD_MAX_CPU_SHARE: &str = "overload.max_cpu_share";
/// Keys of a `[defaults]` or `[[topics]]` table that kpress does not take, with what to
/// write instead.
const RENAMED_KEYS: [(&str, &str); 1] = [(
    "allow_growth",
    "use only_if_smaller, its opposite: allow_growth = false is only_if_smaller = true, \
     and without it kpress stores the codec the policy names, as Kafka's compression.type does",
)];
/// The key of a `[[topics]]` rule that `[defaults]` has not: which topics it covers.
pub(super) const MATCH_KEY: &str = "match";
const RECOMPRESS_MODES: &str = "codec-differs, always";
const MIN_LEVEL_ALLOWED: &str = "a level of the rule's codec, at most its level";

/// A `[defaults]` or `[[topics]]` table, read.
pub(super) struct PolicyRead {
    pub(super) policy: TopicPolicy,
    /// The rule's `match`; `None` for `[defaults]`.
    pattern: Option<MatchRead>,
    /// Every key the table sets, in file order, for the warnings about keys that
    /// cannot take effect.
    pub(super) keys: Vec<SetKey>,
}

/// A key a `[defaults]` or `[[topics]]` table sets, as Kafka's dotted name, and where.
#[derive(Debug, Clone)]
pub(super) struct SetKey {
    pub(super) name: String,
    pub(super) value: Range<usize>,
}

struct MatchRead {
    pattern: TopicPattern,
    line: usize,
    span: Range<usize>,
}

/// A leaf of a policy table with its dotted path joined back into Kafka's name.
struct FlatKey<'a, 'i> {
    name: String,
    key: &'a Spanned<DeString<'i>>,
    value: &'a Spanned<DeValue<'i>>,
}

impl Walk<'_> {
    pub(super) fn topics(
        &mut self,
        key: &Spanned<DeString<'_>>,
        value: &Spanned<DeValue<'_>>,
        defaults: &TopicPolicy,
    ) -> Option<Vec<(TopicRule, Vec<SetKey>)>> {
        let items = self.rule_items("topics", key, value)?;
        let mut rules = Vec::with_capacity(items.len());
        let mut ok = true;
        // Same pattern twice: the second rule can never apply.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for item in items.iter() {
            let Some(table) = self.rule_table("topics", item) else {
                ok = false;
                continue;
            };
            let Some(read) = self.policy(table, defaults, Some(item)) else {
                ok = false;
                continue;
            };
            let Some(matched) = read.pattern else {
                continue;
            };
            let text = matched.pattern.to_string();
            if let Some(first) = seen.get(&text) {
                self.sink.bad_value(
                    "match",
                    &matched.span,
                    format!(
                        "same pattern as the rule at line {first}, which always wins (first match wins)"
                    ),
                    None,
                );
                ok = false;
            } else {
                seen.insert(text, matched.line);
            }
            rules.push((
                TopicRule {
                    pattern: matched.pattern,
                    policy: read.policy,
                    line: matched.line,
                },
                read.keys,
            ));
        }
        ok.then_some(rules)
    }

    /// Reads a `[defaults]` table (`rule = None`) or one `[[topics]]` table on top of
    /// `base`, the defaults it inherits.
    pub(super) fn policy(
        &mut self,
        table: &DeTable<'_>,
        base: &TopicPolicy,
        rule: Option<&Spanned<DeValue<'_>>>,
    ) -> Option<PolicyRead> {
        let mut flat = Vec::new();
        flatten(table, "", &mut flat);
        let mut policy = base.clone();
        let mut pattern = None;
        let mut ok = true;
        let mut seen: HashMap<&str, Range<usize>> = HashMap::new();
        // A level this table sets, which topic mode takes from the topic instead.
        let mut level_set: Option<(&str, Range<usize>)> = None;
        // `overload.min_level` as written, checked once the table's codec is known.
        let mut min_level = None;
        // Where `overload.compression.type`'s value stands, for the topic-mode check.
        let mut overload_at: Option<Range<usize>> = None;
        for FlatKey { name, key, value } in &flat {
            let name = name.as_str();
            // `compression.type` and `"compression.type"` are different TOML keys.
            if let Some(first) = seen.insert(name, key.span()) {
                let (line, _) = line_column(self.sink.text(), first.start);
                self.sink.report(
                    &key.span(),
                    Some(name),
                    None,
                    format!("set twice (first at line {line})"),
                    None,
                );
                ok = false;
                continue;
            }
            let span = value.span();
            let read = match name {
                MATCH_KEY if rule.is_some() => {
                    self.string(name, value)
                        .and_then(|text| match TopicPattern::parse(text) {
                            Ok(p) => {
                                pattern = Some(MatchRead {
                                    pattern: p,
                                    line: line_column(self.sink.text(), span.start).0,
                                    span: span.clone(),
                                });
                                Some(())
                            }
                            Err(e) => {
                                self.sink.bad_value(
                                    name,
                                    &span,
                                    e.to_string(),
                                    Some(
                                        "an exact topic name, a glob (*, ?, [...]) or re:<regex>"
                                            .to_owned(),
                                    ),
                                );
                                None
                            }
                        })
                }
                "compression.type" => {
                    self.string(name, value)
                        .and_then(|text| match text.parse::<Compression>() {
                            Ok(c) => {
                                policy.compression = c;
                                Some(())
                            }
                            Err(_) => {
                                self.sink.bad_value(
                                    name,
                                    &span,
                                    "unknown compression type",
                                    Some(Compression::ALLOWED.to_owned()),
                                );
                                None
                            }
                        })
                }
                "recompress" => self.string(name, value).and_then(|text| {
                    match text {
                        "codec-differs" => policy.recompress = RecompressMode::CodecDiffers,
                        "always" => policy.recompress = RecompressMode::Always,
                        _ => {
                            self.sink.bad_value(
                                name,
                                &span,
                                "unknown recompress mode",
                                Some(RECOMPRESS_MODES.to_owned()),
                            );
                            return None;
                        }
                    }
                    Some(())
                }),
                "only_if_smaller" => self
                    .boolean(name, value)
                    .map(|b| policy.only_if_smaller = b),
                OVERLOAD_COMPRESSION_TYPE => {
                    self.string(name, value)
                        // A fixed setting only: under overload a topic-mode topic
                        // already passes as sent.
                        .and_then(|text| match text.parse::<kpress_batch::CompressionType>() {
                            Ok(c) => {
                                overload_at = Some(span.clone());
                                policy.overload.compression = match c {
                                    kpress_batch::CompressionType::Producer => {
                                        Compression::Producer
                                    }
                                    kpress_batch::CompressionType::Codec(codec) => {
                                        Compression::Codec(codec)
                                    }
                                };
                                Some(())
                            }
                            Err(_) => {
                                self.sink.bad_value(
                                    name,
                                    &span,
                                    "unknown compression type",
                                    Some(kpress_batch::CompressionType::ALLOWED.to_owned()),
                                );
                                None
                            }
                        })
                }
                level
                    if level
                        .strip_prefix(OVERLOAD_PREFIX)
                        .is_some_and(|option| LEVEL_KEYS.contains(&option)) =>
                {
                    let option = &level[OVERLOAD_PREFIX.len()..];
                    self.codec_level(name, option, value, &mut policy.overload.levels)
                }
                OVERLOAD_MIN_LEVEL => self
                    .integer(name, value, Some(MIN_LEVEL_ALLOWED.to_owned()))
                    .map(|n| min_level = Some((n, span.clone()))),
                OVERLOAD_MAX_CPU_SHARE => self
                    .fraction(name, value, f64::MIN_POSITIVE, "0 < share <= 1")
                    .and_then(CpuShare::new)
                    .map(|share| policy.overload.max_cpu_share = Some(share)),
                option if OPTION_KEYS.contains(&option) => {
                    let level = option.ends_with(".level").then(|| (option, span.clone()));
                    let allowed = allowed_values(option).map(|a| a.to_string());
                    self.integer(name, value, allowed.clone()).and_then(|n| {
                        match policy.options.set_int(option, n) {
                            Ok(()) => {
                                level_set = level.or(level_set.take());
                                Some(())
                            }
                            Err(e) => {
                                let message = match e {
                                    kpress_codec::OptionError::OutOfRange { .. } => {
                                        "out of range".to_owned()
                                    }
                                    other => other.to_string(),
                                };
                                self.sink.bad_value(name, &span, message, allowed);
                                None
                            }
                        }
                    })
                }
                option if TEXT_OPTION_KEYS.contains(&option) => {
                    self.text_option(&mut policy, option, value)
                }
                auto if AUTO_KEYS.contains(&auto) => self.auto_key(&mut policy, auto, value),
                unknown => {
                    let where_ = if rule.is_some() {
                        "[[topics]]"
                    } else {
                        "[defaults]"
                    };
                    if let Some((_, instead)) =
                        RENAMED_KEYS.iter().find(|(name, _)| *name == unknown)
                    {
                        self.sink.report(
                            &key.span(),
                            Some(unknown),
                            None,
                            format!("unknown key in {where_}: {instead}"),
                            None,
                        );
                        ok = false;
                        continue;
                    }
                    let known: Vec<&str> = if unknown == "match" {
                        vec!["only in [[topics]]"]
                    } else {
                        let rule_only = rule.map(|_| MATCH_KEY);
                        rule_only
                            .into_iter()
                            .chain(KEYS)
                            .chain(OPTION_KEYS)
                            .chain(TEXT_OPTION_KEYS)
                            .chain(OVERLOAD_KEYS)
                            // Listed for a key of theirs only: the list stays readable.
                            .chain(
                                AUTO_KEYS
                                    .into_iter()
                                    .filter(|_| unknown.starts_with("auto")),
                            )
                            .collect()
                    };
                    self.sink.unknown_name(
                        &key.span(),
                        unknown,
                        unknown,
                        format!("unknown key in {where_}"),
                        &known,
                    );
                    None
                }
            };
            ok &= read.is_some();
        }
        // Only a table that names topic mode itself: a level beside an inherited one
        // goes unused, as it did beside an inherited `producer`.
        let names_topic_mode = seen.contains_key("compression.type");
        if let (Compression::Topic, true, Some((name, span))) =
            (policy.compression, names_topic_mode, level_set)
        {
            self.sink.bad_value(
                name,
                &span,
                "compression.type = \"topic\" stores the topic's own level \
                 (its compression.<codec>.level): name a codec to set a level here",
                None,
            );
            ok = false;
        }
        // Under overload a topic-mode topic passes as sent, whatever a fallback says.
        if let (Compression::Topic, true, Some(span), false) = (
            policy.compression,
            names_topic_mode,
            overload_at,
            policy.overload.compression == Compression::Producer,
        ) {
            self.sink.bad_value(
                OVERLOAD_COMPRESSION_TYPE,
                &span,
                "compression.type = \"topic\" passes as sent under overload, so the \
                 broker converts as it would without kpress: name a codec to have a fallback",
                Some("\"producer\" beside compression.type = \"topic\"".to_owned()),
            );
            ok = false;
        }
        let value_of = |name: &str| flat.iter().find(|f| f.name == name).map(|f| f.value.span());
        if let (Some(cores), Some(share)) = (value_of(AUTO_MAX_CORES), value_of(AUTO_MAX_CPU_SHARE))
        {
            self.two_budgets(&cores, &share);
            ok = false;
        }
        if let Some((n, span)) = min_level {
            match self.min_level(&policy, n, &span, rule.is_some()) {
                Some(level) => policy.overload.min_level = Some(level),
                None => ok = false,
            }
        }
        if let Some(rule) = rule {
            if !seen.contains_key("match") {
                let at = rule.span().start;
                self.sink.report(
                    &(at..at),
                    Some("match"),
                    None,
                    "missing key in [[topics]]: which topics does this rule apply to?",
                    Some("an exact topic name, a glob (*, ?, [...]) or re:<regex>".to_owned()),
                );
                ok = false;
            }
        }
        let keys = flat
            .iter()
            .map(|f| SetKey {
                name: f.name.clone(),
                value: f.value.span(),
            })
            .collect();
        ok.then_some(PolicyRead {
            policy,
            pattern,
            keys,
        })
    }

    /// `overload.min_level = n` of a table whose policy, read, is `policy`: a level of
    /// its codec, at most its level. A `[defaults]` whose codec has no levels keeps it
    /// for the rules that inherit it (each clips it to its own codec and level).
    fn min_level(
        &mut self,
        policy: &TopicPolicy,
        n: i64,
        span: &Range<usize>,
        in_rule: bool,
    ) -> Option<i32> {
        let codec = match policy.compression {
            Compression::Codec(codec) if level_key(codec).is_some() => codec,
            _ if !in_rule => {
                return match i32::try_from(n) {
                    Ok(level)
                        if level_range(kpress_codec::Codec::Zstd)
                            .is_some_and(|(lo, hi)| (lo..=hi).contains(&level)) =>
                    {
                        Some(level)
                    }
                    _ => {
                        self.sink.bad_value(
                            OVERLOAD_MIN_LEVEL,
                            span,
                            "out of range",
                            Some(MIN_LEVEL_ALLOWED.to_owned()),
                        );
                        None
                    }
                };
            }
            other => {
                self.sink.bad_value(
                    OVERLOAD_MIN_LEVEL,
                    span,
                    format!(
                        "compression.type {} has no levels to step down",
                        other.name()
                    ),
                    Some("only with compression.type gzip, lz4 or zstd".to_owned()),
                );
                return None;
            }
        };
        let (lowest, _) = level_range(codec).expect("a codec with levels");
        let level = level_of(codec, &policy.options).expect("a codec with levels");
        let key = level_key(codec).expect("a codec with levels");
        let allowed = Some(format!("{lowest}..{level}"));
        if n > i64::from(level) {
            self.sink.bad_value(
                OVERLOAD_MIN_LEVEL,
                span,
                format!("above the rule's {key} ({level})"),
                allowed,
            );
            return None;
        }
        if n < i64::from(lowest) {
            self.sink
                .bad_value(OVERLOAD_MIN_LEVEL, span, "out of range", allowed);
            return None;
        }
        i32::try_from(n).ok()
    }

    /// A `compression.*` option whose value is a name (`compression.gzip.provider`).
    /// A provider this host lacks is refused here, at start, not replaced later.
    fn text_option(
        &mut self,
        policy: &mut TopicPolicy,
        key: &str,
        value: &Spanned<DeValue<'_>>,
    ) -> Option<()> {
        let span = value.span();
        let DeValue::String(text) = value.get_ref() else {
            self.sink.bad_value(
                key,
                &span,
                format!("must be a string, not {}", value.get_ref().type_str()),
                Some(GZIP_PROVIDER_VALUES.to_owned()),
            );
            return None;
        };
        match policy.options.set(key, text.as_ref()) {
            Ok(()) => Some(()),
            Err(OptionError::NotAllowed { allowed, .. }) => {
                self.sink.bad_value(
                    key,
                    &span,
                    "unknown gzip provider",
                    Some(allowed.to_owned()),
                );
                None
            }
            Err(OptionError::Unavailable { reason, .. }) => {
                self.sink.bad_value(
                    key,
                    &span,
                    format!("provider named explicitly but not available on this host: {reason}"),
                    Some(available_providers()),
                );
                None
            }
            Err(other) => {
                self.sink.bad_value(key, &span, other.to_string(), None);
                None
            }
        }
    }
}

/// Joins TOML's nested tables back into Kafka's dotted names: `compression.zstd.level = 3`
/// is table `compression` → table `zstd` → key `level`.
fn flatten<'a, 'i>(table: &'a DeTable<'i>, prefix: &str, out: &mut Vec<FlatKey<'a, 'i>>) {
    for (key, value) in table.iter() {
        let name = if prefix.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{prefix}.{}", key.get_ref())
        };
        match value.get_ref() {
            DeValue::Table(inner) if !inner.is_empty() => flatten(inner, &name, out),
            _ => out.push(FlatKey { name, key, value }),
        }
    }
}

/// The provider names this host can run, `auto` first (it always resolves).
fn available_providers() -> String {
    let registry = Registry::global();
    let mut names = vec!["auto"];
    names.extend(
        ProviderKind::ALL
            .into_iter()
            .filter(|kind| registry.get(*kind).is_ok())
            .map(ProviderKind::name),
    );
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use kpress_batch::RecompressMode;

    use super::super::testing::{config, one_problem, problems, HEAD};
    use super::flatten;
    use crate::settings::Compression;

    fn defaults(lines: &str) -> String {
        format!("{HEAD}[defaults]\n{lines}\n")
    }

    fn rule(lines: &str) -> String {
        format!("{HEAD}[[topics]]\n{lines}\n")
    }

    #[test]
    fn rules_inherit_defaults_and_override_them() {
        let c = config(&format!(
            "{HEAD}[defaults]\ncompression.type = \"zstd\"\ncompression.zstd.level = 9\n\
             only_if_smaller = true\n[[topics]]\nmatch = \"logs.*\"\nrecompress = \"always\"\n\
             compression.zstd = {{ level = 19 }}\n"
        ));
        assert!(c.defaults.only_if_smaller);
        assert_eq!(c.defaults.recompress, RecompressMode::CodecDiffers);
        let rule = &c.topics[0];
        assert_eq!(rule.line, 10);
        assert_eq!(rule.pattern.to_string(), "logs.*");
        assert!(rule.policy.only_if_smaller);
        assert_eq!(rule.policy.recompress, RecompressMode::Always);
        assert_eq!(rule.policy.options.get("compression.zstd.level"), Some(19));
    }

    #[test]
    fn compression_type_takes_kafka_names() {
        assert_eq!(
            one_problem(&defaults("compression.type = \"brotli\"")),
            format!(
                "t.toml:6:20: compression.type = \"brotli\": unknown compression type \
                 (allowed: {})",
                Compression::ALLOWED
            )
        );
        assert_eq!(
            one_problem(&defaults("compression.type = 1")),
            "t.toml:6:20: compression.type = 1: must be a string, not integer"
        );
    }

    #[test]
    fn topic_mode_is_the_default_and_takes_no_level_of_its_own() {
        assert_eq!(config(HEAD).defaults.compression, Compression::Topic);
        let c = config(&rule(
            "match = \"a\"\ncompression.type = \"topic\"\ncompression.gzip.provider = \"zlib\"",
        ));
        assert_eq!(c.topics[0].policy.compression, Compression::Topic);
        assert_eq!(
            one_problem(&rule(
                "match = \"a\"\ncompression.type = \"topic\"\ncompression.zstd.level = 9"
            )),
            "t.toml:8:26: compression.zstd.level = 9: compression.type = \"topic\" stores the \
             topic's own level (its compression.<codec>.level): name a codec to set a level here"
        );
        // A level beside an inherited topic mode loads, with a warning.
        let c = config(&rule("match = \"a\"\ncompression.zstd.level = 9"));
        assert_eq!(c.topics[0].policy.compression, Compression::Topic);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    }

    #[test]
    fn recompress_and_only_if_smaller_values() {
        assert_eq!(
            one_problem(&defaults("recompress = \"sometimes\"")),
            "t.toml:6:14: recompress = \"sometimes\": unknown recompress mode \
             (allowed: codec-differs, always)"
        );
        assert_eq!(
            one_problem(&defaults("only_if_smaller = 1")),
            "t.toml:6:19: only_if_smaller = 1: must be true or false, not integer \
             (allowed: true, false)"
        );
    }

    #[test]
    fn options_are_checked_against_their_ranges() {
        assert_eq!(
            one_problem(&defaults("compression.zstd.level = 23")),
            "t.toml:6:26: compression.zstd.level = 23: out of range (allowed: -131072..22)"
        );
        assert_eq!(
            one_problem(&defaults("compression.gzip.provider = \"fast\"")),
            "t.toml:6:29: compression.gzip.provider = \"fast\": unknown gzip provider \
             (allowed: auto, qat, isal, libdeflate, zlib)"
        );
        assert_eq!(
            one_problem(&defaults("compression.gzip.provider = 1")),
            "t.toml:6:29: compression.gzip.provider = 1: must be a string, not integer \
             (allowed: auto, qat, isal, libdeflate, zlib)"
        );
    }

    #[test]
    fn overload_keys_are_read_inherited_and_checked() {
        let c = config(&format!(
            "{HEAD}[defaults]\noverload.compression.type = \"lz4\"\noverload.min_level = 3\n\
             [[topics]]\nmatch = \"a\"\ncompression.type = \"zstd\"\ncompression.zstd.level = 19\n\
             overload.compression.zstd.level = 1\n"
        ));
        assert_eq!(
            c.defaults.overload.compression,
            Compression::Codec(kpress_codec::Codec::Lz4)
        );
        let inherited = &c.topics[0].policy.overload;
        assert_eq!(
            inherited.compression,
            Compression::Codec(kpress_codec::Codec::Lz4)
        );
        assert_eq!(inherited.levels.get("compression.zstd.level"), Some(1));
        assert_eq!(inherited.min_level, Some(3));
        assert_eq!(
            one_problem(&defaults("overload.compression.type = \"brotli\"")),
            format!(
                "t.toml:6:29: overload.compression.type = \"brotli\": unknown compression type \
                 (allowed: {})",
                kpress_batch::CompressionType::ALLOWED
            )
        );
        assert_eq!(
            one_problem(&rule(
                "match = \"a\"\ncompression.type = \"topic\"\noverload.compression.type = \"lz4\""
            )),
            "t.toml:8:29: overload.compression.type = \"lz4\": compression.type = \"topic\" \
             passes as sent under overload, so the broker converts as it would without kpress: \
             name a codec to have a fallback (allowed: \"producer\" beside compression.type = \
             \"topic\")"
        );
        // A fallback is a fixed setting: under overload a topic-mode topic passes as sent.
        assert_eq!(
            one_problem(&defaults("overload.compression.type = \"topic\"")),
            format!(
                "t.toml:6:29: overload.compression.type = \"topic\": unknown compression type \
                 (allowed: {})",
                kpress_batch::CompressionType::ALLOWED
            )
        );
        assert_eq!(
            one_problem(&defaults("overload.compression.gzip.level = 10")),
            "t.toml:6:35: overload.compression.gzip.level = 10: out of range (allowed: -1 (default) or 1..9)"
        );
        assert_eq!(
            one_problem(&rule(
                "match = \"a\"\ncompression.type = \"zstd\"\ncompression.zstd.level = 9\n\
                 overload.min_level = 12"
            )),
            "t.toml:9:22: overload.min_level = 12: above the rule's compression.zstd.level (9) \
             (allowed: -131072..9)"
        );
        assert_eq!(
            one_problem(&rule(
                "match = \"a\"\ncompression.type = \"gzip\"\noverload.min_level = 0"
            )),
            "t.toml:8:22: overload.min_level = 0: out of range (allowed: 1..6)"
        );
        assert_eq!(
            one_problem(&rule(
                "match = \"a\"\ncompression.type = \"snappy\"\noverload.min_level = 1"
            )),
            "t.toml:8:22: overload.min_level = 1: compression.type snappy has no levels to step \
             down (allowed: only with compression.type gzip, lz4 or zstd)"
        );
    }

    #[test]
    fn max_cpu_share_is_a_fraction_inherited_from_defaults() {
        let c = config(&format!(
            "{HEAD}[defaults]\noverload.max_cpu_share = 0.5\n\
             [[topics]]\nmatch = \"a\"\ncompression.type = \"zstd\"\n\
             [[topics]]\nmatch = \"b\"\ncompression.type = \"zstd\"\noverload.max_cpu_share = 1\n"
        ));
        let share =
            |p: &crate::TopicPolicy| p.overload.max_cpu_share.map(crate::CpuShare::fraction);
        assert_eq!(share(&c.defaults), Some(0.5));
        assert_eq!(share(&c.topics[0].policy), Some(0.5));
        assert_eq!(share(&c.topics[1].policy), Some(1.0));
        assert!(c.topics[1]
            .policy
            .to_string()
            .ends_with(", overload.max_cpu_share=1"));
        for (value, column) in [("0", 26), ("1.5", 26), ("-0.1", 26), ("nan", 26)] {
            assert_eq!(
                one_problem(&defaults(&format!("overload.max_cpu_share = {value}"))),
                format!(
                    "t.toml:6:{column}: overload.max_cpu_share = {value}: out of range \
                     (allowed: 0 < share <= 1)"
                )
            );
        }
        assert_eq!(
            one_problem(&defaults("overload.max_cpu_share = \"half\"")),
            "t.toml:6:26: overload.max_cpu_share = \"half\": must be a number, not string \
             (allowed: 0 < share <= 1)"
        );
    }

    #[test]
    fn a_rule_needs_a_match_and_defaults_has_none() {
        let p = one_problem(&rule("compression.type = \"lz4\""));
        assert!(
            p.ends_with(
                "match: missing key in [[topics]]: which topics does this rule apply to? \
                 (allowed: an exact topic name, a glob (*, ?, [...]) or re:<regex>)"
            ),
            "{p}"
        );
        assert_eq!(
            one_problem(&defaults("match = \"a\"")),
            "t.toml:6:1: match: unknown key in [defaults] (allowed: only in [[topics]])"
        );
        assert!(
            one_problem(&rule("match = \"re:(\"")).starts_with("t.toml:6:9: match = \"re:(\": ")
        );
    }

    #[test]
    fn a_key_set_twice_and_a_pattern_used_twice_are_refused() {
        assert_eq!(
            one_problem(&defaults(
                "compression.type = \"lz4\"\n\"compression.type\" = \"lz4\""
            )),
            "t.toml:7:1: compression.type: set twice (first at line 6)"
        );
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[[topics]]\nmatch = \"a\"\n[[topics]]\nmatch = \"a\"\n"
            )),
            "t.toml:8:9: match = \"a\": same pattern as the rule at line 6, which always wins \
             (first match wins)"
        );
    }

    #[test]
    fn topics_must_be_an_array_of_tables() {
        assert_eq!(
            one_problem(&format!("{HEAD}[topics]\nmatch = \"a\"\n")),
            "t.toml:5:1: [topics]: rules are an array of tables: write [[topics]]"
        );
        assert!(problems(&format!("topics = 1\n{HEAD}"))
            .iter()
            .any(|p| p.contains("topics = 1: must be an array of tables ([[topics]])")));
    }

    #[test]
    fn a_renamed_key_names_what_to_write_instead() {
        let p = one_problem(&rule("match = \"a\"\nallow_growth = true"));
        assert!(
            p.starts_with(
                "t.toml:7:1: allow_growth: unknown key in [[topics]]: use only_if_smaller"
            ),
            "{p}"
        );
    }

    #[test]
    fn flatten_joins_nested_tables_into_dotted_names() {
        let text = "a = 1\n[compression]\ntype = \"zstd\"\nzstd = { level = 3 }\nempty = {}\n";
        let (root, errors) = toml::de::DeTable::parse_recoverable(text);
        assert!(errors.is_empty());
        let mut flat = Vec::new();
        flatten(root.get_ref(), "", &mut flat);
        let mut names: Vec<&str> = flat.iter().map(|f| f.name.as_str()).collect();
        names.sort_unstable();
        // An empty table is a leaf: its value is reported, not silently dropped.
        assert_eq!(
            names,
            [
                "a",
                "compression.empty",
                "compression.type",
                "compression.zstd.level"
            ]
        );
    }
}
