//! Reads a policy file's TOML into [`Config`], reporting every problem with its place.
//!
//! The walk is over toml's spanned document (`DeTable`), not serde: serde stops at the
//! first error and loses the places of keys, and operators need every typo at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use kpress_batch::RecompressMode;
use kpress_codec::gzip_providers::{ProviderKind, Registry};
use kpress_codec::options::{allowed_values, GZIP_PROVIDER_VALUES, OPTION_KEYS, TEXT_OPTION_KEYS};
use kpress_codec::OptionError;
use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;

use crate::problem::{line_column, Problem, ProblemSink};
use crate::settings::{
    AdminSettings, Compression, Config, Limits, LogSettings, TopicPolicy, TopicRule, LOG_LEVELS,
    READINESS_WINDOW_SECS_DEFAULT,
};
use crate::topic_match::TopicPattern;

mod listener;
mod shadow;
mod upstream;

mod keys;

pub(crate) use keys::accepted_keys;

const SECTIONS: [&str; 8] = [
    "listener", "upstream", "limits", "admin", "log", "shadow", "defaults", "topics",
];
/// Sections people write that kpress does not take, with what to write instead.
const RENAMED_SECTIONS: [(&str, &str); 1] = [(
    "metrics",
    "use [admin] (same bind; it also serves /healthz, /readyz and /policy)",
)];
/// `[admin] readiness_window_secs`'s range.
const READINESS_WINDOW_SECS_MAX: i64 = 3600;
/// Keys of a `[defaults]` or `[[topics]]` table besides `match` and `compression.*`.
const POLICY_KEYS: [&str; 3] = ["compression.type", "recompress", "only_if_smaller"];
/// Keys of a `[defaults]` or `[[topics]]` table that kpress does not take, with what to
/// write instead.
const RENAMED_POLICY_KEYS: [(&str, &str); 1] = [(
    "allow_growth",
    "use only_if_smaller, its opposite: allow_growth = false is only_if_smaller = true, \
     and without it kpress stores the codec the policy names, as Kafka's compression.type does",
)];
/// The key of a `[[topics]]` rule that `[defaults]` has not: which topics it covers.
const MATCH_KEY: &str = "match";
const LIMITS_KEYS: [&str; 11] = [
    "max_batch_bytes",
    "max_decompressed_bytes",
    "max_frame_bytes",
    "max_inflight_bytes",
    "max_connection_inflight_bytes",
    "max_connections",
    "frame_timeout_ms",
    "idle_timeout_ms",
    "max_request_decompressed_bytes",
    "max_decompression_ratio",
    "max_topic_labels",
];
const ADMIN_KEYS: [&str; 2] = ["bind", "readiness_window_secs"];
const LOG_KEYS: [&str; 1] = ["level"];
const RECOMPRESS_MODES: &str = "codec-differs, always";

/// Kafka sizes are int32 on the wire.
const INT32_MAX: i64 = i32::MAX as i64;

type Entry<'a, 'i> = (&'a Spanned<DeString<'i>>, &'a Spanned<DeValue<'i>>);

/// A `[defaults]` or `[[topics]]` table, read.
struct PolicyRead {
    policy: TopicPolicy,
    /// The rule's `match`; `None` for `[defaults]`.
    pattern: Option<MatchRead>,
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

/// Parses a whole policy file; `Err` holds every problem, in file order.
///
/// With `base_dir` (the policy file's directory), relative file paths in the policy are
/// resolved against it and every named file must be there and readable; without it the
/// text alone is checked and paths are kept as written.
pub(crate) fn parse_document(
    text: &str,
    source_name: &str,
    base_dir: Option<&Path>,
) -> Result<Config, Vec<Problem>> {
    let (root, syntax_errors) = DeTable::parse_recoverable(text);
    if !syntax_errors.is_empty() {
        // Past a syntax error the document is a guess: report the syntax only.
        return Err(syntax_errors
            .iter()
            .map(|e| {
                let (line, column) = line_column(text, e.span().map_or(0, |s| s.start));
                Problem {
                    source_name: source_name.to_owned(),
                    line,
                    column,
                    key: None,
                    value: None,
                    message: format!("TOML syntax: {}", e.message()),
                    allowed: None,
                    did_you_mean: None,
                }
            })
            .collect());
    }
    let mut walk = Walk {
        sink: ProblemSink::new(text, source_name),
        base_dir,
    };
    let config = walk.document(root.get_ref());
    match config {
        Some(config) if walk.sink.is_empty() => Ok(config),
        _ => Err(walk.sink.into_problems()),
    }
}

struct Walk<'t> {
    sink: ProblemSink<'t>,
    /// Set by `load`: where relative paths start, and that named files are checked.
    base_dir: Option<&'t Path>,
}

/// The start of the file, for problems with no place of their own (a missing section).
const FILE_START: Range<usize> = 0..0;

impl Walk<'_> {
    fn document(&mut self, root: &DeTable<'_>) -> Option<Config> {
        let mut listener = None;
        let mut upstream = None;
        let mut limits = Some(Limits::default());
        let mut admin = None;
        let mut log = Some(LogSettings::default());
        // `Some(None)`: no [shadow]; `None`: a [shadow] with problems.
        let mut shadow = Some(None);
        let mut defaults = Some(TopicPolicy::default());
        let mut topics_value = None;
        let mut defaults_value = None;
        // A declared SASL cluster changes listener.rewrite_before_auth's default.
        let upstream_sasl = root
            .get("upstream")
            .is_some_and(|u| matches!(u.get_ref(), DeValue::Table(t) if t.contains_key("sasl")));
        for (key, value) in root.iter() {
            match key.get_ref().as_ref() {
                "listener" => {
                    listener = self
                        .table(key, value)
                        .and_then(|t| self.listener(t, value, upstream_sasl))
                }
                "upstream" => {
                    upstream = self.table(key, value).and_then(|t| self.upstream(t, value))
                }
                "limits" => limits = self.table(key, value).and_then(|t| self.limits(t)),
                "admin" => admin = self.table(key, value).and_then(|t| self.admin(t, value)),
                "log" => log = self.table(key, value).and_then(|t| self.log(t)),
                "shadow" => {
                    shadow = self
                        .table(key, value)
                        .and_then(|t| self.shadow(t, value))
                        .map(Some)
                }
                "defaults" => defaults_value = Some((key, value)),
                "topics" => topics_value = Some((key, value)),
                other => match RENAMED_SECTIONS.iter().find(|(name, _)| *name == other) {
                    Some((_, instead)) => self.sink.report(
                        &key.span(),
                        Some(other),
                        None,
                        format!("unknown section [{other}]: {instead}"),
                        None,
                    ),
                    None => self.sink.unknown_name(
                        &key.span(),
                        other,
                        other,
                        "unknown section".to_owned(),
                        &SECTIONS,
                    ),
                },
            }
        }
        if !root.contains_key("listener") {
            self.missing_section("listener");
        }
        if !root.contains_key("upstream") {
            self.missing_section("upstream");
        }
        // Rules inherit [defaults], so it is read before [[topics]] whatever the file order.
        if let Some((key, value)) = defaults_value {
            defaults = self
                .table(key, value)
                .and_then(|t| self.policy(t, &TopicPolicy::default(), None))
                .map(|read| read.policy);
        }
        let mut topics = Some(Vec::new());
        if let Some((key, value)) = topics_value {
            // On broken [defaults] the rules are still read, on Kafka's defaults, so
            // their own problems are reported too.
            let base = defaults.clone().unwrap_or_default();
            topics = self.topics(key, value, &base);
        }
        let listener = listener?;
        let upstream = upstream?;
        if root.contains_key("admin") && admin.is_none() {
            return None;
        }
        let limits = limits?;
        let log = log?;
        let shadow = shadow?;
        if let Some(a) = &admin {
            if conflicts(a.bind, listener.bind) {
                let bind_value = root
                    .get("admin")
                    .and_then(|section| match section.get_ref() {
                        DeValue::Table(table) => table.get("bind"),
                        _ => None,
                    });
                let span = bind_value.map_or(FILE_START, |v| v.span());
                self.sink.bad_value(
                    "admin.bind",
                    &span,
                    format!(
                        "takes the port of listener.bind ({}): give the admin endpoint a port of its own",
                        listener.bind
                    ),
                    None,
                );
            }
        }
        Some(Config {
            listener,
            upstream,
            limits,
            admin,
            defaults: defaults?,
            topics: topics?,
            warnings: Vec::new(),
            log,
            shadow,
        })
    }

    fn missing_section(&mut self, name: &str) {
        self.sink.report(
            &FILE_START,
            Some(&format!("[{name}]")),
            None,
            "missing section",
            None,
        );
    }

    fn table<'a, 'i>(
        &mut self,
        key: &Spanned<DeString<'_>>,
        value: &'a Spanned<DeValue<'i>>,
    ) -> Option<&'a DeTable<'i>> {
        match value.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.sink.bad_value(
                    key.get_ref(),
                    &value.span(),
                    format!("must be a table, not {}", other.type_str()),
                    None,
                );
                None
            }
        }
    }

    /// Reports every key of `table` not in `known`, returning the known entries by name.
    fn known_keys<'a, 'i>(
        &mut self,
        section: &str,
        table: &'a DeTable<'i>,
        known: &[&str],
    ) -> HashMap<String, Entry<'a, 'i>> {
        self.known_keys_refusing(section, table, known, &[])
    }

    /// As [`Walk::known_keys`], and each key of `refused` is reported with its reason
    /// (a key people write that kpress must never take). Its value is not shown.
    fn known_keys_refusing<'a, 'i>(
        &mut self,
        section: &str,
        table: &'a DeTable<'i>,
        known: &[&str],
        refused: &[(&str, &str)],
    ) -> HashMap<String, Entry<'a, 'i>> {
        let mut found = HashMap::new();
        for (key, value) in table.iter() {
            let name = key.get_ref().as_ref();
            if known.contains(&name) {
                found.insert(name.to_owned(), (key, value));
            } else if let Some((_, why)) = refused.iter().find(|(r, _)| *r == name) {
                self.sink.report(
                    &key.span(),
                    Some(&format!("{section}.{name}")),
                    None,
                    *why,
                    None,
                );
            } else {
                self.sink.unknown_name(
                    &key.span(),
                    &format!("{section}.{name}"),
                    name,
                    format!("unknown key in [{section}]"),
                    known,
                );
            }
        }
        found
    }

    fn missing_key(&mut self, section: &str, key: &str, section_value: &Spanned<DeValue<'_>>) {
        let at = section_value.span().start;
        self.sink.report(
            &(at..at),
            Some(&format!("{section}.{key}")),
            None,
            format!("missing key in [{section}]"),
            None,
        );
    }

    fn limits(&mut self, table: &DeTable<'_>) -> Option<Limits> {
        let keys = self.known_keys("limits", table, &LIMITS_KEYS);
        let mut limits = Limits::default();
        let mut ok = true;
        let mut connection_inflight = 0;
        let fields: [(&str, &mut usize, i64, i64); 11] = [
            (
                "max_batch_bytes",
                &mut limits.max_batch_bytes,
                61,
                INT32_MAX,
            ),
            (
                "max_decompressed_bytes",
                &mut limits.max_decompressed_bytes,
                1024,
                INT32_MAX,
            ),
            (
                "max_frame_bytes",
                &mut limits.max_frame_bytes,
                1024,
                INT32_MAX,
            ),
            (
                "max_inflight_bytes",
                &mut limits.max_inflight_bytes,
                2048,
                1 << 40,
            ),
            (
                "max_connection_inflight_bytes",
                &mut connection_inflight,
                1024,
                1 << 40,
            ),
            ("max_connections", &mut limits.max_connections, 1, 1_000_000),
            (
                "frame_timeout_ms",
                &mut limits.frame_timeout_ms,
                100,
                3_600_000,
            ),
            (
                "idle_timeout_ms",
                &mut limits.idle_timeout_ms,
                1000,
                86_400_000,
            ),
            (
                "max_request_decompressed_bytes",
                &mut limits.max_request_decompressed_bytes,
                1 << 20,
                1 << 40,
            ),
            (
                "max_decompression_ratio",
                &mut limits.max_decompression_ratio,
                10,
                1_000_000,
            ),
            ("max_topic_labels", &mut limits.max_topic_labels, 0, 100_000),
        ];
        for (name, field, min, max) in fields {
            if let Some((_, v)) = keys.get(name) {
                let key = format!("limits.{name}");
                match self.integer_in(&key, v, min, max, &format!("{min}..{max}")) {
                    Some(n) => *field = n as usize,
                    None => ok = false,
                }
            }
        }
        // Unset, one connection may hold one largest frame per direction.
        limits.max_connection_inflight_bytes = if keys.contains_key("max_connection_inflight_bytes")
        {
            connection_inflight
        } else {
            limits.max_frame_bytes
        };
        if ok && limits.max_connection_inflight_bytes < limits.max_frame_bytes {
            let at = keys
                .get("max_connection_inflight_bytes")
                .map_or(FILE_START, |(_, v)| v.span());
            self.sink.bad_value(
                "limits.max_connection_inflight_bytes",
                &at,
                format!(
                    "is below limits.max_frame_bytes ({}): a connection could never read a largest frame",
                    limits.max_frame_bytes
                ),
                Some(format!("{}..{}", limits.max_frame_bytes, 1u64 << 40)),
            );
            ok = false;
        }
        // The proxy gives requests and responses half the budget each: a largest frame
        // must fit in one half or it could never be admitted.
        let needed = limits.max_frame_bytes.saturating_mul(2);
        if ok && limits.max_inflight_bytes < needed {
            let at = keys
                .get("max_inflight_bytes")
                .or_else(|| keys.get("max_frame_bytes"))
                .map_or(FILE_START, |(_, v)| v.span());
            self.sink.bad_value(
                "limits.max_inflight_bytes",
                &at,
                format!(
                    "is below twice limits.max_frame_bytes ({}): half the budget serves requests, half responses, and a largest frame must fit in a half",
                    limits.max_frame_bytes
                ),
                Some(format!("{needed}..{}", 1u64 << 40)),
            );
            ok = false;
        }
        ok.then_some(limits)
    }

    fn admin(
        &mut self,
        table: &DeTable<'_>,
        section: &Spanned<DeValue<'_>>,
    ) -> Option<AdminSettings> {
        let keys = self.known_keys("admin", table, &ADMIN_KEYS);
        let window = match keys.get("readiness_window_secs") {
            Some((_, v)) => self
                .integer_in(
                    "admin.readiness_window_secs",
                    v,
                    1,
                    READINESS_WINDOW_SECS_MAX,
                    &format!("1..{READINESS_WINDOW_SECS_MAX}"),
                )
                .map(|n| n as u64),
            None => Some(READINESS_WINDOW_SECS_DEFAULT),
        };
        let Some((_, value)) = keys.get("bind") else {
            self.missing_key("admin", "bind", section);
            return None;
        };
        let bind = self.socket_addr("admin.bind", value);
        Some(AdminSettings {
            bind: bind?,
            readiness_window: std::time::Duration::from_secs(window?),
        })
    }

    /// `[log]`: `level` only.
    fn log(&mut self, table: &DeTable<'_>) -> Option<LogSettings> {
        let keys = self.known_keys("log", table, &LOG_KEYS);
        let level = match keys.get("level") {
            Some((_, value)) => {
                let choices = LOG_LEVELS.map(|level| (level, level));
                Some(self.choice("log.level", value, "log level", &choices)?)
            }
            None => None,
        };
        Some(LogSettings { level })
    }

    fn topics(
        &mut self,
        key: &Spanned<DeString<'_>>,
        value: &Spanned<DeValue<'_>>,
        defaults: &TopicPolicy,
    ) -> Option<Vec<TopicRule>> {
        let items = match value.get_ref() {
            DeValue::Array(items) => items,
            DeValue::Table(_) => {
                self.sink.report(
                    &value.span(),
                    Some("[topics]"),
                    None,
                    "rules are an array of tables: write [[topics]]",
                    None,
                );
                return None;
            }
            _ => {
                self.sink.bad_value(
                    key.get_ref(),
                    &value.span(),
                    "must be an array of tables ([[topics]])",
                    None,
                );
                return None;
            }
        };
        let mut rules = Vec::with_capacity(items.len());
        let mut ok = true;
        // Same pattern twice: the second rule can never apply.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for item in items.iter() {
            let DeValue::Table(table) = item.get_ref() else {
                self.sink.bad_value(
                    "topics",
                    &item.span(),
                    "each entry must be a table ([[topics]])",
                    None,
                );
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
            rules.push(TopicRule {
                pattern: matched.pattern,
                policy: read.policy,
                line: matched.line,
            });
        }
        ok.then_some(rules)
    }

    /// Reads a `[defaults]` table (`rule = None`) or one `[[topics]]` table on top of
    /// `base`, the defaults it inherits.
    fn policy(
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
                option if OPTION_KEYS.contains(&option) => {
                    let allowed = allowed_values(option).map(|a| a.to_string());
                    self.integer(name, value, allowed.clone()).and_then(|n| {
                        match policy.options.set_int(option, n) {
                            Ok(()) => Some(()),
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
                unknown => {
                    let where_ = if rule.is_some() {
                        "[[topics]]"
                    } else {
                        "[defaults]"
                    };
                    if let Some((_, instead)) = RENAMED_POLICY_KEYS
                        .iter()
                        .find(|(name, _)| *name == unknown)
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
                            .chain(POLICY_KEYS)
                            .chain(OPTION_KEYS)
                            .chain(TEXT_OPTION_KEYS)
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
        ok.then_some(PolicyRead { policy, pattern })
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

    fn string<'a>(&mut self, key: &str, value: &'a Spanned<DeValue<'_>>) -> Option<&'a str> {
        match value.get_ref() {
            DeValue::String(s) => Some(s.as_ref()),
            other => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    format!("must be a string, not {}", other.type_str()),
                    None,
                );
                None
            }
        }
    }

    fn boolean(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<bool> {
        match value.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    format!("must be true or false, not {}", other.type_str()),
                    Some("true, false".to_owned()),
                );
                None
            }
        }
    }

    fn integer(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        allowed: Option<String>,
    ) -> Option<i64> {
        match value.get_ref() {
            DeValue::Integer(n) => match i64::from_str_radix(n.as_str(), n.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.sink
                        .bad_value(key, &value.span(), "out of range", allowed);
                    None
                }
            },
            other => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    format!("must be an integer, not {}", other.type_str()),
                    allowed,
                );
                None
            }
        }
    }

    fn integer_in(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        min: i64,
        max: i64,
        allowed: &str,
    ) -> Option<i64> {
        let n = self.integer(key, value, Some(allowed.to_owned()))?;
        if (min..=max).contains(&n) {
            Some(n)
        } else {
            self.sink
                .bad_value(key, &value.span(), "out of range", Some(allowed.to_owned()));
            None
        }
    }

    fn socket_addr(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<SocketAddr> {
        let text = self.string(key, value)?;
        match text.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    "not an IP:port socket address",
                    Some("IPv4:port or [IPv6]:port, e.g. 127.0.0.1:19092".to_owned()),
                );
                None
            }
        }
    }

    /// A table nested in a section (`[listener.tls]`), named in full in problems.
    fn subtable<'a, 'i>(
        &mut self,
        key: &str,
        value: &'a Spanned<DeValue<'i>>,
    ) -> Option<&'a DeTable<'i>> {
        match value.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    format!("must be a table, not {}", other.type_str()),
                    None,
                );
                None
            }
        }
    }

    /// One of the names in `choices`, spelt exactly; `what` names the kind of thing.
    fn choice<T: Copy>(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        what: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let allowed = || {
            choices
                .iter()
                .map(|(name, _)| format!("\"{name}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let DeValue::String(text) = value.get_ref() else {
            self.sink.bad_value(
                key,
                &value.span(),
                format!("must be a string, not {}", value.get_ref().type_str()),
                Some(allowed()),
            );
            return None;
        };
        let text: &str = text.as_ref();
        if let Some((_, chosen)) = choices.iter().find(|(name, _)| *name == text) {
            return Some(*chosen);
        }
        let message = match choices
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(text))
        {
            Some((name, _)) => {
                format!("unknown {what}: names are case-sensitive, write \"{name}\"")
            }
            None => format!("unknown {what}"),
        };
        self.sink
            .bad_value(key, &value.span(), message, Some(allowed()));
        None
    }

    /// A non-empty string without control characters, such as a name.
    fn name_text(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<String> {
        let text = self.string(key, value)?;
        if text.is_empty() || text.contains(char::is_control) {
            self.sink.bad_value(
                key,
                &value.span(),
                "must not be empty or hold control characters",
                None,
            );
            return None;
        }
        Some(text.to_owned())
    }

    /// A file the policy names (a certificate, a key, a password). As written by
    /// `parse`; under `load`, resolved against the policy file's directory when
    /// relative, and checked to be a readable file.
    fn file_path(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<PathBuf> {
        let written = PathBuf::from(self.name_text(key, value)?);
        let Some(base_dir) = self.base_dir else {
            return Some(written);
        };
        let path = base_dir.join(&written);
        let shown = path.display();
        let problem = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some(format!("file not found: {shown}"))
            }
            Err(e) => Some(format!("cannot read {shown}: {e}")),
            Ok(meta) if meta.is_dir() => Some(format!("{shown} is a directory, not a file")),
            // Opening a FIFO or a device could block or read without end.
            Ok(meta) if !meta.is_file() => Some(format!("{shown} is not a regular file")),
            Ok(_) => std::fs::File::open(&path)
                .err()
                .map(|e| format!("cannot read {shown}: {e}")),
        };
        match problem {
            Some(message) => {
                self.sink.bad_value(key, &value.span(), message, None);
                None
            }
            None => Some(path),
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

/// Whether two listeners would fight over one port.
fn conflicts(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.port() != 0
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}
