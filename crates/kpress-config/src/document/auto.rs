//! The `auto.*` keys of `[defaults]` and `[[topics]]`, and the `[autopilot]` section.

use std::ops::Range;
use std::time::Duration;

use kpress_codec::Candidate;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::policy::MATCH_KEY;
use super::{ReadKeys, Walk};
use crate::auto::{
    trial_candidates, AutoBudget, AutoObjective, AutopilotSettings, AUTOPILOT_WINDOW_MS_MAX,
    AUTOPILOT_WINDOW_MS_MIN, AUTO_MAX_CHANGES_PER_HOUR_MAX, AUTO_MAX_CORES_MAX,
    AUTO_MIN_SAMPLES_MAX, AUTO_PRICE_MAX,
};
use crate::settings::{
    Compression, CpuShare, ShadowSettings, TopicPolicy, TopicRule, SHADOW_CANDIDATES_MAX,
};
use crate::topic_match::{is_legal_topic_char, TOPIC_NAME_MAX_CHARS};

pub(super) const AUTO_CANDIDATES: &str = "auto.candidates";
const AUTO_INITIAL: &str = "auto.initial";
pub(super) const AUTO_MAX_CORES: &str = "auto.max_cores";
pub(super) const AUTO_MAX_CPU_SHARE: &str = "auto.max_cpu_share";
const AUTO_OBJECTIVE: &str = "auto.objective";
const AUTO_PRICE_PER_GB_STORED: &str = "auto.price_per_gb_stored";
const AUTO_PRICE_PER_GB_MOVED: &str = "auto.price_per_gb_moved";
const AUTO_PRICE_PER_CORE_HOUR: &str = "auto.price_per_core_hour";
const AUTO_MIN_SAMPLES: &str = "auto.min_samples";
const AUTO_MARGIN: &str = "auto.margin";
const AUTO_MAX_CHANGES_PER_HOUR: &str = "auto.max_changes_per_hour";

/// `auto.*` keys of a `[defaults]` or `[[topics]]` table, read by `compression.type =
/// "auto"` alone.
pub(super) const AUTO_KEYS: [&str; 11] = [
    AUTO_CANDIDATES,
    AUTO_INITIAL,
    AUTO_MAX_CORES,
    AUTO_MAX_CPU_SHARE,
    AUTO_OBJECTIVE,
    AUTO_PRICE_PER_GB_STORED,
    AUTO_PRICE_PER_GB_MOVED,
    AUTO_PRICE_PER_CORE_HOUR,
    AUTO_MIN_SAMPLES,
    AUTO_MARGIN,
    AUTO_MAX_CHANGES_PER_HOUR,
];

/// Keys of `[autopilot]`.
pub(super) const KEYS: [&str; 4] = ["topic", "share", "window_ms", "replication_factor"];

const INITIAL_ALLOWED: &str = "\"producer\" (pass as sent) or a codec spec such as \"zstd:3\"";
const PRICE_ALLOWED: &str = "0 <= USD <= 1000000";
const TOPIC_ALLOWED: &str =
    "1..249 characters of a-z, A-Z, 0-9, '.', '_', '-'; not \".\" or \"..\"";
const REPLICATION_FACTOR_ALLOWED: &str = "-1 (the broker's default) or 1..32767";

impl Walk<'_> {
    /// Reads the `auto.*` key `name` into `policy.auto`; `None`, reported, when its
    /// value is wrong.
    pub(super) fn auto_key(
        &mut self,
        policy: &mut TopicPolicy,
        name: &str,
        value: &Spanned<DeValue<'_>>,
    ) -> Option<()> {
        let auto = &mut policy.auto;
        match name {
            AUTO_CANDIDATES => {
                auto.candidates = self.candidates(name, value)?;
            }
            AUTO_INITIAL => {
                let text = self.string(name, value)?;
                auto.initial = match text {
                    "producer" => None,
                    spec => match spec.parse::<Candidate>() {
                        Ok(candidate) => Some(candidate),
                        Err(err) => {
                            self.sink.bad_value(
                                name,
                                &value.span(),
                                err.to_string(),
                                Some(INITIAL_ALLOWED.to_owned()),
                            );
                            return None;
                        }
                    },
                };
            }
            AUTO_MAX_CORES => {
                let cores = self.number_in(
                    name,
                    value,
                    f64::MIN_POSITIVE,
                    AUTO_MAX_CORES_MAX,
                    &format!("0 < cores <= {AUTO_MAX_CORES_MAX}"),
                )?;
                auto.budget = AutoBudget::Cores(cores);
            }
            AUTO_MAX_CPU_SHARE => {
                let share = self
                    .fraction(name, value, f64::MIN_POSITIVE, "0 < share <= 1")
                    .and_then(CpuShare::new)?;
                auto.budget = AutoBudget::CpuShare(share);
            }
            AUTO_OBJECTIVE => {
                auto.objective = self.choice(name, value, "objective", &AutoObjective::CHOICES)?;
            }
            AUTO_PRICE_PER_GB_STORED | AUTO_PRICE_PER_GB_MOVED | AUTO_PRICE_PER_CORE_HOUR => {
                let price = self.number_in(name, value, 0.0, AUTO_PRICE_MAX, PRICE_ALLOWED)?;
                let prices = &mut auto.prices;
                match name {
                    AUTO_PRICE_PER_GB_STORED => prices.stored_per_gb = price,
                    AUTO_PRICE_PER_GB_MOVED => prices.moved_per_gb = price,
                    _ => prices.core_hour = price,
                }
            }
            AUTO_MIN_SAMPLES => {
                let n = self.integer_in(
                    name,
                    value,
                    1,
                    AUTO_MIN_SAMPLES_MAX as i64,
                    &format!("1..{AUTO_MIN_SAMPLES_MAX}"),
                )?;
                auto.min_samples = n as u64;
            }
            AUTO_MARGIN => {
                auto.margin = self.fraction(name, value, 0.0, "0..1")?;
            }
            AUTO_MAX_CHANGES_PER_HOUR => {
                let n = self.integer_in(
                    name,
                    value,
                    1,
                    i64::from(AUTO_MAX_CHANGES_PER_HOUR_MAX),
                    &format!("1..{AUTO_MAX_CHANGES_PER_HOUR_MAX}"),
                )?;
                auto.max_changes_per_hour = n as u32;
            }
            _ => unreachable!("called with an auto key"),
        }
        Some(())
    }

    /// `auto.max_cores` and `auto.max_cpu_share` set in one table (at `cores` and
    /// `share`): one budget only.
    pub(super) fn two_budgets(&mut self, cores: &Range<usize>, share: &Range<usize>) {
        let (line, _) = crate::problem::line_column(self.sink.text(), cores.start);
        self.sink.bad_value(
            AUTO_MAX_CPU_SHARE,
            share,
            format!(
                "beside auto.max_cores (line {line}): the budget is in cores or a share of \
                 rewrite CPU, not both"
            ),
            Some("one of auto.max_cores, auto.max_cpu_share".to_owned()),
        );
    }

    pub(super) fn autopilot(&mut self, table: &DeTable<'_>) -> Option<AutopilotSettings> {
        let keys = self.known_keys("autopilot", table, &KEYS);
        let mut settings = AutopilotSettings::default();
        let mut ok = true;
        if let Some((_, v)) = keys.get("topic") {
            match self.topic_name("autopilot.topic", v) {
                Some(topic) => settings.topic = topic,
                None => ok = false,
            }
        }
        if let Some((_, v)) = keys.get("share") {
            match self.boolean("autopilot.share", v) {
                Some(share) => settings.share = share,
                None => ok = false,
            }
        }
        if let Some((_, v)) = keys.get("window_ms") {
            match self.integer_in(
                "autopilot.window_ms",
                v,
                AUTOPILOT_WINDOW_MS_MIN as i64,
                AUTOPILOT_WINDOW_MS_MAX as i64,
                &format!("{AUTOPILOT_WINDOW_MS_MIN}..{AUTOPILOT_WINDOW_MS_MAX}"),
            ) {
                Some(ms) => settings.window = Duration::from_millis(ms as u64),
                None => ok = false,
            }
        }
        if let Some((_, v)) = keys.get("replication_factor") {
            let key = "autopilot.replication_factor";
            match self.integer(key, v, Some(REPLICATION_FACTOR_ALLOWED.to_owned())) {
                Some(n) if n == -1 || (1..=i64::from(i16::MAX)).contains(&n) => {
                    settings.replication_factor = n as i16
                }
                Some(_) => {
                    self.sink.bad_value(
                        key,
                        &v.span(),
                        "out of range",
                        Some(REPLICATION_FACTOR_ALLOWED.to_owned()),
                    );
                    ok = false;
                }
                None => ok = false,
            }
        }
        ok.then_some(settings)
    }

    /// A legal Kafka topic name.
    fn topic_name(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<String> {
        let text = self.string(key, value)?;
        let chars = text.chars().count();
        let problem = if text.is_empty() || chars > TOPIC_NAME_MAX_CHARS {
            Some(format!("has {chars} characters"))
        } else if text == "." || text == ".." {
            Some("is not a topic name Kafka takes".to_owned())
        } else {
            text.chars()
                .find(|c| !is_legal_topic_char(*c))
                .map(|c| format!("holds {c:?}, which Kafka refuses in topic names"))
        };
        match problem {
            Some(message) => {
                self.sink
                    .bad_value(key, &value.span(), message, Some(TOPIC_ALLOWED.to_owned()));
                None
            }
            None => Some(text.to_owned()),
        }
    }
}

impl Walk<'_> {
    /// Refuses a file whose trial candidates (`[shadow] candidates` and every auto
    /// rule's `auto.candidates`, without repeats) number more than
    /// [`SHADOW_CANDIDATES_MAX`], at the first rule that passes it.
    pub(super) fn trial_cap(
        &mut self,
        shadow: Option<&ShadowSettings>,
        defaults: &TopicPolicy,
        topics: &[TopicRule],
        keys: &ReadKeys,
    ) {
        let shadow_candidates = shadow.map_or(&[][..], |s| s.candidates.as_slice());
        let no_keys = Vec::new();
        let tables = topics
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let name = format!("the rule at line {} ({})", rule.line, rule.pattern);
                (&rule.policy, keys.rules.get(i).unwrap_or(&no_keys), name)
            })
            .chain(std::iter::once((
                defaults,
                &keys.defaults,
                "[defaults]".to_owned(),
            )));
        let mut auto = Vec::new();
        for (policy, set, name) in tables {
            if policy.compression != Compression::Auto {
                continue;
            }
            auto.push(&policy.auto);
            let union = trial_candidates(shadow_candidates, auto.iter().copied());
            if union.len() <= SHADOW_CANDIDATES_MAX {
                continue;
            }
            let at = [AUTO_CANDIDATES, "compression.type", MATCH_KEY]
                .iter()
                .find_map(|wanted| set.iter().find(|k| k.name == *wanted));
            let Some(at) = at else {
                continue;
            };
            self.sink.bad_value(
                &at.name,
                &at.value,
                format!(
                    "{name} makes the shadow trials' candidates ([shadow] candidates and \
                     every auto rule's auto.candidates, each once) number {}, above \
                     {SHADOW_CANDIDATES_MAX}: each is a label of the shadow metrics",
                    union.len()
                ),
                Some(format!(
                    "at most {SHADOW_CANDIDATES_MAX} distinct candidates in all"
                )),
            );
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{config, one_problem, problems, HEAD};
    use crate::auto::*;
    use crate::settings::Compression;
    use crate::{AutoBudget, AutoObjective, CpuShare};

    fn defaults(lines: &str) -> String {
        format!("{HEAD}[defaults]\ncompression.type = \"auto\"\n{lines}\n")
    }

    fn labels(candidates: &[kpress_codec::Candidate]) -> Vec<String> {
        candidates.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn auto_alone_takes_every_default() {
        let c = config(&defaults(""));
        assert_eq!(c.defaults.compression, Compression::Auto);
        let auto = &c.defaults.auto;
        assert_eq!(auto.candidates, default_candidates());
        assert_eq!(
            labels(&auto.candidates),
            ["zstd:3", "lz4:9", "gzip:6", "snappy"]
        );
        assert_eq!(auto.initial, None);
        assert_eq!(auto.budget, AutoBudget::Unlimited);
        assert_eq!(auto.objective, AutoObjective::Bytes);
        assert_eq!(auto.prices, AutoPrices::default());
        assert_eq!(auto.prices.stored_per_gb, 0.10);
        assert_eq!(auto.prices.moved_per_gb, 0.02);
        assert_eq!(auto.prices.core_hour, 0.04);
        assert_eq!(auto.min_samples, 30);
        assert_eq!(auto.margin, 0.02);
        assert_eq!(auto.max_changes_per_hour, 4);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.autopilot, AutopilotSettings::default());
        assert_eq!(c.autopilot.topic, "_kpress_autopilot");
        assert!(c.autopilot.share);
        assert_eq!(c.autopilot.window, Duration::from_secs(60));
        assert_eq!(c.autopilot.replication_factor, -1);
        // `[shadow]` stays what the file says.
        assert_eq!(c.shadow, None);
    }

    #[test]
    fn every_auto_key_is_read_and_rules_inherit_them() {
        let c = config(&format!(
            "{HEAD}[defaults]\nauto.min_samples = 50\nauto.objective = \"cost\"\n\
             [[topics]]\nmatch = \"logs.*\"\ncompression.type = \"auto\"\n\
             auto.candidates = [\"zstd:6\", \"lz4:1\"]\nauto.initial = \"lz4\"\n\
             auto.max_cores = 1.5\nauto.price_per_gb_stored = 0.5\n\
             auto.price_per_gb_moved = 0\nauto.price_per_core_hour = 2\n\
             auto.margin = 0.1\nauto.max_changes_per_hour = 60\n\
             [[topics]]\nmatch = \"b\"\ncompression.type = \"auto\"\nauto.max_cpu_share = 0.5\n"
        ));
        let a = &c.topics[0].policy.auto;
        assert_eq!(labels(&a.candidates), ["zstd:6", "lz4:1"]);
        assert_eq!(a.initial, Some("lz4:9".parse().unwrap()));
        assert_eq!(a.budget, AutoBudget::Cores(1.5));
        assert_eq!(a.objective, AutoObjective::Cost);
        assert_eq!(a.min_samples, 50);
        assert_eq!(
            a.prices,
            AutoPrices {
                stored_per_gb: 0.5,
                moved_per_gb: 0.0,
                core_hour: 2.0
            }
        );
        assert_eq!(a.margin, 0.1);
        assert_eq!(a.max_changes_per_hour, 60);
        let b = &c.topics[1].policy.auto;
        assert_eq!(b.budget, AutoBudget::CpuShare(CpuShare::new(0.5).unwrap()));
        assert_eq!(b.min_samples, 50);
        assert_eq!(b.candidates, default_candidates());
        // [defaults] is not auto: its auto.* keys are read by the rules inheriting them.
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn each_auto_key_names_its_range() {
        for (line, expected) in [
            (
                "auto.candidates = \"zstd\"",
                "t.toml:7:19: auto.candidates = \"zstd\": must be an array of spec strings, \
                 not string",
            ),
            (
                "auto.candidates = []",
                "t.toml:7:19: auto.candidates = []: has 0 candidates: each is a label of the \
                 shadow metrics, so 1..16",
            ),
            (
                "auto.candidates = [\"lz4\", \"lz4:9\"]",
                "t.toml:7:27: auto.candidates = \"lz4:9\": \"lz4:9\" repeats the candidate lz4",
            ),
            (
                "auto.candidates = [\"brotli\"]",
                "t.toml:7:20: auto.candidates = \"brotli\": \"brotli\": unknown codec \"brotli\"",
            ),
            (
                "auto.initial = \"brotli\"",
                "t.toml:7:16: auto.initial = \"brotli\": \"brotli\": unknown codec \"brotli\": \
                 allowed are none, gzip, snappy, lz4, zstd (allowed: \"producer\" (pass as sent) \
                 or a codec spec such as \"zstd:3\")",
            ),
            (
                "auto.max_cores = 0",
                "t.toml:7:18: auto.max_cores = 0: out of range (allowed: 0 < cores <= 1024)",
            ),
            (
                "auto.max_cores = 2000",
                "t.toml:7:18: auto.max_cores = 2000: out of range (allowed: 0 < cores <= 1024)",
            ),
            (
                "auto.max_cpu_share = 1.5",
                "t.toml:7:22: auto.max_cpu_share = 1.5: out of range (allowed: 0 < share <= 1)",
            ),
            (
                "auto.objective = \"Cost\"",
                "t.toml:7:18: auto.objective = \"Cost\": unknown objective: names are \
                 case-sensitive, write \"cost\" (allowed: \"bytes\", \"cost\")",
            ),
            (
                "auto.price_per_gb_stored = -1",
                "t.toml:7:28: auto.price_per_gb_stored = -1: out of range \
                 (allowed: 0 <= USD <= 1000000)",
            ),
            (
                "auto.price_per_gb_moved = \"x\"",
                "t.toml:7:27: auto.price_per_gb_moved = \"x\": must be a number, not string \
                 (allowed: 0 <= USD <= 1000000)",
            ),
            (
                "auto.price_per_core_hour = inf",
                "t.toml:7:28: auto.price_per_core_hour = inf: out of range \
                 (allowed: 0 <= USD <= 1000000)",
            ),
            (
                "auto.min_samples = 0",
                "t.toml:7:20: auto.min_samples = 0: out of range (allowed: 1..1000000)",
            ),
            (
                "auto.margin = 1.5",
                "t.toml:7:15: auto.margin = 1.5: out of range (allowed: 0..1)",
            ),
            (
                "auto.max_changes_per_hour = 0",
                "t.toml:7:29: auto.max_changes_per_hour = 0: out of range (allowed: 1..60)",
            ),
        ] {
            let p = one_problem(&defaults(line));
            assert!(p.starts_with(expected), "{line}:\n{p}\n{expected}");
        }
    }

    #[test]
    fn a_misspelt_auto_key_is_named_with_the_auto_keys() {
        let p = one_problem(&defaults("auto.margn = 0.1"));
        assert!(
            p.starts_with("t.toml:7:6: auto.margn: unknown key in [defaults]"),
            "{p}"
        );
        assert!(p.ends_with("did you mean auto.margin?"), "{p}");
        assert!(p.contains("auto.max_changes_per_hour"), "{p}");
    }

    #[test]
    fn one_budget_only() {
        assert_eq!(
            one_problem(&defaults("auto.max_cores = 2\nauto.max_cpu_share = 0.5")),
            "t.toml:8:22: auto.max_cpu_share = 0.5: beside auto.max_cores (line 7): the budget \
             is in cores or a share of rewrite CPU, not both (allowed: one of auto.max_cores, \
             auto.max_cpu_share)"
        );
        // A rule's budget replaces the one it inherits.
        let c = config(&format!(
            "{HEAD}[defaults]\ncompression.type = \"auto\"\nauto.max_cores = 2\n\
             [[topics]]\nmatch = \"a\"\nauto.max_cpu_share = 0.25\n"
        ));
        assert_eq!(
            c.topics[0].policy.auto.budget,
            AutoBudget::CpuShare(CpuShare::new(0.25).unwrap())
        );
    }

    #[test]
    fn trial_candidates_past_the_cap_name_the_rule() {
        let specs = |range: std::ops::Range<i32>| {
            range
                .map(|l| format!("\"zstd:{l}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let text = format!(
            "{HEAD}[shadow]\ncandidates = [{}]\n\
             [[topics]]\nmatch = \"logs.*\"\ncompression.type = \"auto\"\n\
             auto.candidates = [{}]\n",
            specs(1..10),
            specs(8..18)
        );
        let p = one_problem(&text);
        assert!(
            p.starts_with("t.toml:10:19: auto.candidates = [\"zstd:8\", "),
            "{p}"
        );
        assert!(
            p.ends_with(
                ": the rule at line 8 (logs.*) makes the shadow trials' candidates ([shadow] \
                 candidates and every auto rule's auto.candidates, each once) number 17, above \
                 16: each is a label of the shadow metrics (allowed: at most 16 distinct \
                 candidates in all)"
            ),
            "{p}"
        );
        // Candidates both lists name count once.
        let text = text.replace(&specs(8..18), &specs(3..10));
        assert_eq!(config(&text).trial_settings().unwrap().candidates.len(), 9);
    }

    #[test]
    fn autopilot_section() {
        let c = config(&format!(
            "{HEAD}[autopilot]\ntopic = \"fleet.auto-pilot_1\"\nshare = false\n\
             window_ms = 1000\nreplication_factor = 3\n"
        ));
        assert_eq!(
            c.autopilot,
            AutopilotSettings {
                topic: "fleet.auto-pilot_1".into(),
                share: false,
                window: Duration::from_millis(1000),
                replication_factor: 3,
            }
        );
        for (line, expected) in [
            (
                "topic = \"a b\"",
                "t.toml:6:9: autopilot.topic = \"a b\": holds ' ', which Kafka refuses in \
                 topic names (allowed: 1..249 characters of a-z, A-Z, 0-9, '.', '_', '-'; not \
                 \".\" or \"..\")",
            ),
            (
                "topic = \"..\"",
                "t.toml:6:9: autopilot.topic = \"..\": is not a topic name Kafka takes",
            ),
            (
                "topic = \"\"",
                "t.toml:6:9: autopilot.topic = \"\": has 0 characters",
            ),
            (
                "share = 1",
                "t.toml:6:9: autopilot.share = 1: must be true or false, not integer",
            ),
            (
                "window_ms = 99",
                "t.toml:6:13: autopilot.window_ms = 99: out of range (allowed: 100..3600000)",
            ),
            (
                "window_ms = 3600001",
                "t.toml:6:13: autopilot.window_ms = 3600001: out of range \
                 (allowed: 100..3600000)",
            ),
            (
                "replication_factor = 0",
                "t.toml:6:22: autopilot.replication_factor = 0: out of range (allowed: -1 \
                 (the broker's default) or 1..32767)",
            ),
            (
                "replication_factor = 32768",
                "t.toml:6:22: autopilot.replication_factor = 32768: out of range",
            ),
            (
                "topics = \"x\"",
                "t.toml:6:1: autopilot.topics: unknown key in [autopilot]",
            ),
            (
                "window = 1",
                "t.toml:6:1: autopilot.window: unknown key in [autopilot]",
            ),
        ] {
            let p = one_problem(&format!("{HEAD}[autopilot]\n{line}\n"));
            assert!(p.starts_with(expected), "{line}:\n{p}\n{expected}");
        }
        let long = "t".repeat(250);
        assert!(!problems(&format!("{HEAD}[autopilot]\ntopic = \"{long}\"\n")).is_empty());
    }

    #[test]
    fn auto_keys_on_a_rule_that_is_not_auto_warn() {
        let c = config(&format!(
            "{HEAD}[[topics]]\nmatch = \"a\"\ncompression.type = \"zstd\"\nauto.margin = 0.1\n\
             [[topics]]\nmatch = \"b\"\ncompression.type = \"auto\"\ncompression.zstd.level = 9\n\
             compression.lz4.block = 5\n"
        ));
        let warnings: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            warnings,
            [
                "t.toml:8:15: auto.margin = 0.1: has no effect: compression.type \"zstd\" is \
                 not \"auto\", the only compression.type reading auto.* keys",
                "t.toml:12:26: compression.zstd.level = 9: has no effect: compression.type \
                 \"auto\" writes each candidate at the level its spec names (auto.candidates)",
                "t.toml:13:25: compression.lz4.block = 5: has no effect: compression.type \
                 \"auto\" writes each candidate with the options its spec names \
                 (auto.candidates)",
            ]
        );
        let c = config(&format!(
            "{HEAD}[overload]\nadaptive = true\n\
             [defaults]\ncompression.type = \"auto\"\noverload.min_level = 1\n"
        ));
        assert_eq!(
            c.warnings[1].to_string(),
            "t.toml:9:22: overload.min_level = 1: has no effect: compression.type \"auto\": \
             adaptive levels do not step the autopilot's candidates"
        );
    }
}
