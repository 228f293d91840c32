//! `[log]`: what kpress logs when no flag or environment variable says.

use toml::de::DeTable;

use super::Walk;
use crate::settings::{LogSettings, LOG_LEVELS};

pub(super) const KEYS: [&str; 1] = ["level"];

impl Walk<'_> {
    /// `[log]`: `level` only.
    pub(super) fn log(&mut self, table: &DeTable<'_>) -> Option<LogSettings> {
        let keys = self.known_keys("log", table, &KEYS);
        let level = match keys.get("level") {
            Some((_, value)) => {
                let choices = LOG_LEVELS.map(|level| (level, level));
                Some(self.choice("log.level", value, "log level", &choices)?)
            }
            None => None,
        };
        Some(LogSettings { level })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{config, one_problem, HEAD};
    use crate::settings::LOG_LEVELS;

    fn log(line: &str) -> String {
        format!("{HEAD}[log]\n{line}\n")
    }

    #[test]
    fn every_level_is_read_and_none_is_the_default() {
        for level in LOG_LEVELS {
            let c = config(&log(&format!("level = \"{level}\"")));
            assert_eq!(c.log.level, Some(level));
        }
        assert_eq!(config(HEAD).log.level, None);
        assert_eq!(config(&format!("{HEAD}[log]\n")).log.level, None);
    }

    #[test]
    fn a_bad_level_lists_the_levels() {
        let allowed = LOG_LEVELS.map(|l| format!("\"{l}\"")).join(", ");
        assert_eq!(
            one_problem(&log("level = \"INFO\"")),
            format!(
                "t.toml:6:9: log.level = \"INFO\": unknown log level: names are case-sensitive, \
                 write \"info\" (allowed: {allowed})"
            )
        );
        assert_eq!(
            one_problem(&log("level = \"verbose\"")),
            format!("t.toml:6:9: log.level = \"verbose\": unknown log level (allowed: {allowed})")
        );
        assert_eq!(
            one_problem(&log("level = 3")),
            format!(
                "t.toml:6:9: log.level = 3: must be a string, not integer (allowed: {allowed})"
            )
        );
    }

    #[test]
    fn level_is_the_only_key() {
        assert_eq!(
            one_problem(&log("levle = \"info\"")),
            "t.toml:6:1: log.levle: unknown key in [log] (allowed: level); did you mean level?"
        );
    }
}
