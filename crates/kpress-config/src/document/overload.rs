//! `[overload]`: whether rules' levels step down under load and back up after it, and
//! how a window of load is judged.

use toml::de::DeTable;

use super::Walk;
use crate::settings::OverloadSettings;

pub(super) const KEYS: [&str; 3] = ["adaptive", "target_wait_ms", "window_ms"];

/// `target_wait_ms`' range: at most `max_rewrite_wait_ms`' own.
const TARGET_WAIT_MS: (i64, i64) = (1, 30_000);
/// `window_ms`' range: long enough to hold several rewrites, short enough to react
/// within a minute.
const WINDOW_MS: (i64, i64) = (100, 60_000);

impl Walk<'_> {
    pub(super) fn overload(&mut self, table: &DeTable<'_>) -> Option<OverloadSettings> {
        let keys = self.known_keys("overload", table, &KEYS);
        let mut settings = OverloadSettings::default();
        let mut ok = true;
        if let Some((_, value)) = keys.get("adaptive") {
            match self.boolean("overload.adaptive", value) {
                Some(b) => settings.adaptive = b,
                None => ok = false,
            }
        }
        for (name, field, (min, max)) in [
            (
                "target_wait_ms",
                &mut settings.target_wait_ms,
                TARGET_WAIT_MS,
            ),
            ("window_ms", &mut settings.window_ms, WINDOW_MS),
        ] {
            if let Some((_, value)) = keys.get(name) {
                let key = format!("overload.{name}");
                match self.integer_in(&key, value, min, max, &format!("{min}..{max}")) {
                    Some(n) => *field = n as u64,
                    None => ok = false,
                }
            }
        }
        ok.then_some(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{config, one_problem, HEAD};

    fn overload(lines: &str) -> String {
        format!("{HEAD}[overload]\n{lines}\n")
    }

    #[test]
    fn defaults_and_values_are_read() {
        let c = config(HEAD);
        assert!(!c.overload.adaptive);
        assert_eq!(
            (c.overload.target_wait_ms, c.overload.window_ms),
            (100, 1000)
        );
        let c = config(&overload(
            "adaptive = true\ntarget_wait_ms = 50\nwindow_ms = 2000",
        ));
        assert!(c.overload.adaptive);
        assert_eq!(
            (c.overload.target_wait_ms, c.overload.window_ms),
            (50, 2000)
        );
    }

    #[test]
    fn bad_values_name_key_value_and_range() {
        assert_eq!(
            one_problem(&overload("target_wait_ms = 0")),
            "t.toml:6:18: overload.target_wait_ms = 0: out of range (allowed: 1..30000)"
        );
        assert_eq!(
            one_problem(&overload("window_ms = 60001")),
            "t.toml:6:13: overload.window_ms = 60001: out of range (allowed: 100..60000)"
        );
        assert_eq!(
            one_problem(&overload("adaptive = \"yes\"")),
            "t.toml:6:12: overload.adaptive = \"yes\": must be true or false, not string \
             (allowed: true, false)"
        );
        assert!(one_problem(&overload("adaptiv = true"))
            .starts_with("t.toml:6:1: overload.adaptiv: unknown key in [overload]"));
    }
}
