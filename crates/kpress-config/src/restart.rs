//! Which sections of a policy file change live on reload and which only at start, and
//! what a reloaded file changes in the latter: one warning per key, with its place.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use crate::problem::{line_column, shortened, Problem};
use crate::settings::Config;

/// Sections a running kpress applies on reload.
pub const LIVE_SECTIONS: [&str; 7] = [
    "defaults",
    "topics",
    "log",
    "shadow",
    "overload",
    "consumers",
    "clients",
];
/// Sections fixed at start: a reload that changes them applies the rest of the file and
/// keeps these as they were until kpress restarts.
pub const RESTART_SECTIONS: [&str; 5] = ["listener", "upstream", "limits", "admin", "autopilot"];

/// The keys of [`RESTART_SECTIONS`] as a file writes them, with their places, so that a
/// reload can name each key it cannot apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestartKeys {
    source_name: String,
    /// Each present section's name and its header's line and column.
    sections: Vec<(String, (usize, usize))>,
    /// Dotted names from the root (`limits.max_rewrite_wait_ms`), in file order.
    keys: Vec<WrittenKey>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct WrittenKey {
    name: String,
    /// The value's source text, trimmed.
    value: String,
    line: usize,
    column: usize,
}

impl RestartKeys {
    /// Reads the restart-only sections of a parsed file's root table.
    pub(crate) fn read(text: &str, source_name: &str, root: &DeTable<'_>) -> RestartKeys {
        let mut out = RestartKeys {
            source_name: source_name.to_owned(),
            ..RestartKeys::default()
        };
        for (key, value) in root.iter() {
            let name = key.get_ref().as_ref();
            if !RESTART_SECTIONS.contains(&name) {
                continue;
            }
            out.sections
                .push((name.to_owned(), line_column(text, key.span().start)));
            if let DeValue::Table(table) = value.get_ref() {
                out.flatten(text, name, table);
            }
        }
        out.keys.sort_by_key(|k| (k.line, k.column));
        out
    }

    fn flatten(&mut self, text: &str, prefix: &str, table: &DeTable<'_>) {
        for (key, value) in table.iter() {
            let name = format!("{prefix}.{}", key.get_ref());
            match value.get_ref() {
                DeValue::Table(inner) if !inner.is_empty() => self.flatten(text, &name, inner),
                _ => {
                    let span: Range<usize> = value.span();
                    let (line, column) = line_column(text, span.start);
                    self.keys.push(WrittenKey {
                        name,
                        value: text.get(span).unwrap_or("").trim().to_owned(),
                        line,
                        column,
                    });
                }
            }
        }
    }

    fn key(&self, name: &str) -> Option<&WrittenKey> {
        self.keys.iter().find(|k| k.name == name)
    }

    fn section_at(&self, section: &str) -> (usize, usize) {
        self.sections
            .iter()
            .find(|(name, _)| name == section)
            .map_or((1, 1), |(_, at)| *at)
    }
}

impl Config {
    /// What this file (read on reload) changes in the sections `running` (the policy in
    /// force) fixed at start: one warning per key set, changed or removed, located in
    /// this file, saying it takes effect on restart. Empty when those sections mean the
    /// same as `running`'s, however written.
    pub fn restart_changes(&self, running: &Config) -> Vec<Problem> {
        let new = &self.restart_keys;
        let old = &running.restart_keys;
        let mut out = Vec::new();
        for section in RESTART_SECTIONS {
            let same = match section {
                "listener" => self.listener == running.listener,
                "upstream" => self.upstream == running.upstream,
                "limits" => self.limits == running.limits,
                "autopilot" => self.autopilot == running.autopilot,
                _ => self.admin == running.admin,
            };
            if same {
                continue;
            }
            let prefix = format!("{section}.");
            let in_section = |k: &&WrittenKey| k.name.starts_with(&prefix);
            let before = out.len();
            for key in new.keys.iter().filter(in_section) {
                let message = match old.key(&key.name) {
                    Some(was) if was.value == key.value => continue,
                    Some(was) => format!(
                        "changed (running: {}): takes effect on restart; until then the \
                         running value stays in force",
                        shortened(&was.value)
                    ),
                    None => "not set when kpress started: takes effect on restart; until \
                             then the running value stays in force"
                        .to_owned(),
                };
                out.push(Problem {
                    source_name: new.source_name.clone(),
                    line: key.line,
                    column: key.column,
                    key: Some(key.name.clone()),
                    value: Some(shortened(&key.value)),
                    message,
                    allowed: None,
                    did_you_mean: None,
                });
            }
            let (line, column) = new.section_at(section);
            for key in old.keys.iter().filter(in_section) {
                if new.key(&key.name).is_none() {
                    out.push(Problem {
                        source_name: new.source_name.clone(),
                        line,
                        column,
                        key: Some(key.name.clone()),
                        value: None,
                        message: format!(
                            "removed (running: {}): takes effect on restart; until then the \
                             running value stays in force",
                            shortened(&key.value)
                        ),
                        allowed: None,
                        did_you_mean: None,
                    });
                }
            }
            // Same text, another meaning (a relative path read from another directory).
            if out.len() == before {
                out.push(Problem {
                    source_name: new.source_name.clone(),
                    line,
                    column,
                    key: Some(format!("[{section}]")),
                    value: None,
                    message: "changed: takes effect on restart; until then the running \
                              section stays in force"
                        .to_owned(),
                    allowed: None,
                    did_you_mean: None,
                });
            }
        }
        out.sort_by_key(|p| (p.line, p.column));
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::parse;

    const HEAD: &str = "[listener]\nbind = \"127.0.0.1:19092\"\n\
         [upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n";

    fn changes(running: &str, new: &str) -> Vec<String> {
        let running = parse(&format!("{HEAD}{running}"), "old.toml").unwrap();
        let new = parse(&format!("{HEAD}{new}"), "new.toml").unwrap();
        new.restart_changes(&running)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn each_changed_added_or_removed_restart_key_is_named_where_it_stands() {
        assert_eq!(
            changes(
                "[limits]\nmax_rewrite_wait_ms = 500\nmax_connections = 10\n",
                "[overload]\nadaptive = true\n[limits]\nmax_rewrite_wait_ms = 200\n\
                 max_batch_bytes = 100000\n[admin]\nbind = \"127.0.0.1:9464\"\n"
            ),
            [
                "new.toml:7:2: limits.max_connections: removed (running: 10): takes effect on \
                 restart; until then the running value stays in force",
                "new.toml:8:23: limits.max_rewrite_wait_ms = 200: changed (running: 500): \
                 takes effect on restart; until then the running value stays in force",
                "new.toml:9:19: limits.max_batch_bytes = 100000: not set when kpress started: \
                 takes effect on restart; until then the running value stays in force",
                "new.toml:11:8: admin.bind = \"127.0.0.1:9464\": not set when kpress started: \
                 takes effect on restart; until then the running value stays in force",
            ]
        );
    }

    #[test]
    fn live_sections_and_same_meaning_draw_nothing() {
        assert!(changes(
            "[overload]\nadaptive = false\n[log]\nlevel = \"info\"\n",
            "[overload]\nadaptive = true\n[log]\nlevel = \"debug\"\n[shadow]\ncandidates = [\"lz4:9\"]\n\
             [[topics]]\nmatch = \"a\"\ncompression.type = \"lz4\"\n"
        )
        .is_empty());
        // The default written out, or the same value written otherwise, changes nothing.
        assert!(changes("", "[limits]\nmax_rewrite_wait_ms = 500\n").is_empty());
        assert!(changes(
            "[limits]\nmax_rewrite_wait_ms = 500\n",
            "[limits]\nmax_rewrite_wait_ms = 0x1f4\n"
        )
        .is_empty());
    }

    #[test]
    fn consumers_and_client_rules_change_live() {
        assert!(changes(
            "[consumers]\ncodec = \"lz4\"\n",
            "[consumers]\ncodec = \"gzip\"\ncache_bytes = 0\n\
             [[clients]]\nmatch = \"a\"\naccept = [\"gzip\"]\n"
        )
        .is_empty());
    }

    #[test]
    fn nested_tables_are_named_in_full() {
        assert_eq!(
            changes(
                "[upstream.tls]\nserver_name = \"a.internal\"\n",
                "[upstream.tls]\nserver_name = \"b.internal\"\n"
            ),
            [
                "new.toml:6:15: upstream.tls.server_name = \"b.internal\": changed (running: \
              \"a.internal\"): takes effect on restart; until then the running value stays \
              in force"
            ]
        );
    }
}
