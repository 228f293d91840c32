//! Reads a policy file's TOML into [`Config`], reporting every problem with its place.
//!
//! The walk is over toml's spanned document (`DeTable`), not serde: serde stops at the
//! first error and loses the places of keys, and operators need every typo at once.
//! Each section's keys, ranges and messages are in a module of its own; the shared
//! value readers are in `values`.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use toml::de::{DeArray, DeString, DeTable, DeValue};
use toml::Spanned;

use crate::problem::{line_column, Problem, ProblemSink};
use crate::restart::RestartKeys;
use crate::settings::{
    Config, ConsumerSettings, Limits, LogSettings, OverloadSettings, TopicPolicy,
};

mod admin;
mod auto;
mod consumers;
mod keys;
mod limits;
mod listener;
mod log;
mod overload;
mod policy;
mod shadow;
mod upstream;
mod values;
mod warnings;

pub(crate) use keys::accepted_keys;

const SECTIONS: [&str; 12] = [
    "listener",
    "upstream",
    "limits",
    "admin",
    "log",
    "shadow",
    "overload",
    "defaults",
    "topics",
    "consumers",
    "clients",
    "autopilot",
];
/// Sections people write that kpress does not take, with what to write instead.
const RENAMED_SECTIONS: [(&str, &str); 1] = [(
    "metrics",
    "use [admin] (same bind; it also serves /healthz, /readyz and /policy)",
)];

pub(super) type Entry<'a, 'i> = (&'a Spanned<DeString<'i>>, &'a Spanned<DeValue<'i>>);

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
    let read = walk.document(root.get_ref());
    match read {
        Some((mut config, keys)) if walk.sink.is_empty() => {
            let mut warned = ProblemSink::new(text, source_name);
            let policy_keys = warnings::PolicyKeys {
                defaults: &keys.defaults,
                rules: &keys.rules,
            };
            warnings::warn(&mut warned, root.get_ref(), &config, &policy_keys);
            config.warnings = warned.into_problems();
            config.restart_keys = RestartKeys::read(text, source_name, root.get_ref());
            Ok(config)
        }
        _ => Err(walk.sink.into_problems()),
    }
}

/// The keys `[defaults]` and each rule set, for the warnings.
#[derive(Default)]
struct ReadKeys {
    defaults: Vec<policy::SetKey>,
    rules: Vec<Vec<policy::SetKey>>,
}

struct Walk<'t> {
    sink: ProblemSink<'t>,
    /// Set by `load`: where relative paths start, and that named files are checked.
    base_dir: Option<&'t Path>,
}

/// The start of the file, for problems with no place of their own (a missing section).
const FILE_START: Range<usize> = 0..0;

impl Walk<'_> {
    fn document(&mut self, root: &DeTable<'_>) -> Option<(Config, ReadKeys)> {
        let mut listener = None;
        let mut upstream = None;
        let mut limits = Some(Limits::default());
        let mut admin = None;
        let mut log = Some(LogSettings::default());
        // `Some(None)`: no [shadow]; `None`: a [shadow] with problems.
        let mut shadow = Some(None);
        let mut shadow_value = None;
        let mut overload = Some(OverloadSettings::default());
        let mut defaults = Some(TopicPolicy::default());
        let mut topics_value = None;
        let mut defaults_value = None;
        let mut consumers_value = None;
        let mut clients = Some(Default::default());
        let mut autopilot = Some(Default::default());
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
                    shadow_value = Some(value);
                    shadow = self
                        .table(key, value)
                        .and_then(|t| self.shadow(t))
                        .map(Some)
                }
                "overload" => overload = self.table(key, value).and_then(|t| self.overload(t)),
                "defaults" => defaults_value = Some((key, value)),
                "topics" => topics_value = Some((key, value)),
                "consumers" => consumers_value = Some((key, value)),
                "clients" => clients = self.clients(key, value),
                "autopilot" => autopilot = self.table(key, value).and_then(|t| self.autopilot(t)),
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
        let mut keys = ReadKeys::default();
        if let Some((key, value)) = defaults_value {
            defaults = self
                .table(key, value)
                .and_then(|t| self.policy(t, &TopicPolicy::default(), None))
                .map(|read| {
                    keys.defaults = read.keys;
                    read.policy
                });
        }
        let mut topics = Some(Vec::new());
        if let Some((key, value)) = topics_value {
            // On broken [defaults] the rules are still read, on Kafka's defaults, so
            // their own problems are reported too.
            let base = defaults.clone().unwrap_or_default();
            topics = self.topics(key, value, &base).map(|read| {
                let (rules, rule_keys) = read.into_iter().unzip();
                keys.rules = rule_keys;
                rules
            });
        }
        let mut consumers = Some(ConsumerSettings::default());
        if let Some((key, value)) = consumers_value {
            consumers = self.table(key, value).and_then(|t| self.consumers(t));
        }
        if let (Some(shadow), Some(defaults), Some(topics)) = (&shadow, &defaults, &topics) {
            self.trial_cap(shadow.as_ref(), defaults, topics, &keys);
            let auto = std::iter::once(defaults)
                .chain(topics.iter().map(|rule| &rule.policy))
                .any(|policy| policy.compression == crate::Compression::Auto);
            if let (Some(shadow), Some(section)) = (shadow, shadow_value) {
                if shadow.candidates.is_empty() && !auto {
                    self.sink.report(
                        &(section.span().start..section.span().start),
                        Some("shadow.candidates"),
                        None,
                        "missing key in [shadow]: it is needed unless a rule sets compression.type = \"auto\", whose auto.candidates are then tried".to_owned(),
                        None,
                    );
                }
            }
        }
        let listener = listener?;
        let upstream = upstream?;
        if root.contains_key("admin") && admin.is_none() {
            return None;
        }
        let limits = limits?;
        let log = log?;
        let shadow = shadow?;
        let overload = overload?;
        if let Some(a) = &admin {
            if admin::conflicts(a.bind, listener.bind) {
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
        let config = Config {
            listener,
            upstream,
            limits,
            admin,
            defaults: defaults?,
            topics: topics?,
            warnings: Vec::new(),
            restart_keys: RestartKeys::default(),
            log,
            shadow,
            overload,
            // [consumers] holds the [[clients]] rules, whatever the file order.
            consumers: ConsumerSettings {
                clients: clients?,
                ..consumers?
            },
            autopilot: autopilot?,
        };
        Some((config, keys))
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

    /// The entries of the `[[name]]` rules `value`; `None`, reported, when it is no
    /// array (a `[name]` table is told to be written `[[name]]`).
    fn rule_items<'a, 'i>(
        &mut self,
        name: &str,
        key: &Spanned<DeString<'_>>,
        value: &'a Spanned<DeValue<'i>>,
    ) -> Option<&'a DeArray<'i>> {
        match value.get_ref() {
            DeValue::Array(items) => Some(items),
            DeValue::Table(_) => {
                self.sink.report(
                    &value.span(),
                    Some(&format!("[{name}]")),
                    None,
                    format!("rules are an array of tables: write [[{name}]]"),
                    None,
                );
                None
            }
            _ => {
                self.sink.bad_value(
                    key.get_ref(),
                    &value.span(),
                    format!("must be an array of tables ([[{name}]])"),
                    None,
                );
                None
            }
        }
    }

    /// One entry of the `[[name]]` rules as a table; `None`, reported, when it is not.
    fn rule_table<'a, 'i>(
        &mut self,
        name: &str,
        item: &'a Spanned<DeValue<'i>>,
    ) -> Option<&'a DeTable<'i>> {
        let DeValue::Table(table) = item.get_ref() else {
            self.sink.bad_value(
                name,
                &item.span(),
                format!("each entry must be a table ([[{name}]])"),
                None,
            );
            return None;
        };
        Some(table)
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
}

/// What the section modules' tests share.
#[cfg(test)]
mod testing {
    use crate::{parse, Config, ConfigError};

    /// The smallest valid file, four lines: a listener and an upstream.
    pub(super) const HEAD: &str =
        "[listener]\nbind = \"127.0.0.1:19092\"\n[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n";

    /// The problems `text` (named `t.toml`) is refused with, as users read them; empty
    /// when it is accepted.
    pub(super) fn problems(text: &str) -> Vec<String> {
        match parse(text, "t.toml") {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid(problems)) => {
                problems.iter().map(ToString::to_string).collect()
            }
            Err(other) => panic!("{other}"),
        }
    }

    /// The one problem `text` is refused with.
    pub(super) fn one_problem(text: &str) -> String {
        let problems = problems(text);
        assert_eq!(problems.len(), 1, "{problems:#?}\n{text}");
        problems.into_iter().next().unwrap()
    }

    /// The policy `text` reads as; panics with its problems.
    pub(super) fn config(text: &str) -> Config {
        parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}\n{text}"))
    }
}
