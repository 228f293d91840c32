//! What a valid file sets that cannot take effect, each located at its value with the
//! reason: keys of `[defaults]` and `[[topics]]` their table's policy (and, for
//! `[defaults]`, every rule inheriting them) never reads, `[overload]` keys read only by
//! adaptive levels while they are off, contradictory waits, rules an earlier rule
//! always wins over, and a CA nobody checks certificates against.

use std::ops::Range;

use kpress_codec::options::{GZIP_PROVIDER, OPTION_KEYS};
use kpress_codec::Codec;
use toml::de::{DeTable, DeValue};

use super::policy::{SetKey, MATCH_KEY};
use crate::overload::{ladder, level_of, LEVEL_KEYS};
use crate::problem::ProblemSink;
use crate::settings::{Compression, Config, TopicPolicy};
use crate::topic_match::TopicPattern;

/// The keys of `[defaults]` (empty without one) and of each rule, in rule order.
pub(super) struct PolicyKeys<'a> {
    pub(super) defaults: &'a [SetKey],
    pub(super) rules: &'a [Vec<SetKey>],
}

/// Adds every warning about `config` to `sink`.
pub(super) fn warn(
    sink: &mut ProblemSink<'_>,
    root: &DeTable<'_>,
    config: &Config,
    keys: &PolicyKeys<'_>,
) {
    unreachable_rules(sink, config, keys);
    rule_keys(sink, config, keys);
    defaults_keys(sink, config, keys);
    overload_keys(sink, root, config);
    unchecked_ca(sink, root, config);
}

/// `upstream.tls.ca` beside `verify = false`: any certificate is accepted, so the CA
/// is never read for a check.
fn unchecked_ca(sink: &mut ProblemSink<'_>, root: &DeTable<'_>, config: &Config) {
    if config.upstream.tls.as_ref().is_none_or(|tls| tls.verify) {
        return;
    }
    let ca = root
        .get("upstream")
        .and_then(|upstream| match upstream.get_ref() {
            DeValue::Table(t) => t.get("tls"),
            _ => None,
        })
        .and_then(|tls| match tls.get_ref() {
            DeValue::Table(t) => t.get("ca"),
            _ => None,
        });
    if let Some(ca) = ca {
        sink.bad_value(
            "upstream.tls.ca",
            &ca.span(),
            "has no effect: upstream.tls.verify = false accepts any certificate, so none is \
             checked against this CA",
            None,
        );
    }
}

/// What a policy writes: its own codec, each topic's own, or nothing (as sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    AsSent,
    TopicsOwn,
    Codec(Codec),
    /// `auto`: each topic's chosen candidate, at the level and options of its spec.
    Auto,
}

/// What a table's policy compresses with, and where its `compression.type` came from.
struct Targets {
    normal: Writes,
    /// The overload fallback's codec; `None`: batches pass as sent under overload.
    fallback: Option<Codec>,
    /// `compression.type "zstd"`, with `(from [defaults])` or `(the default)` when
    /// the table does not set it.
    described: String,
}

fn targets(policy: &TopicPolicy, sets_type: bool, defaults_set_type: Option<bool>) -> Targets {
    let normal = match policy.compression {
        Compression::Producer => Writes::AsSent,
        Compression::Topic => Writes::TopicsOwn,
        Compression::Codec(codec) => Writes::Codec(codec),
        Compression::Auto => Writes::Auto,
    };
    let fallback = match (normal, policy.overload.compression) {
        (Writes::TopicsOwn, _) => None,
        (_, Compression::Codec(codec)) => Some(codec),
        _ => None,
    };
    let from = match (sets_type, defaults_set_type) {
        (true, _) => "",
        (false, Some(true)) => " (from [defaults])",
        (false, _) => " (the default)",
    };
    Targets {
        normal,
        fallback,
        described: format!("compression.type \"{}\"{from}", policy.compression.name()),
    }
}

/// The codec a `compression.<codec>.*` or `overload.compression.<codec>.*` key is of.
fn codec_of(key: &str) -> Option<Codec> {
    let rest = key.strip_prefix("overload.").unwrap_or(key);
    rest.strip_prefix("compression.")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// Why `key` of a table whose policy is `policy` has no effect on it; `None` when it
/// has one.
fn unused(key: &str, policy: &TopicPolicy, t: &Targets, adaptive: bool) -> Option<String> {
    let as_sent = t.normal == Writes::AsSent && t.fallback.is_none();
    let described = &t.described;
    if key.starts_with("auto.") {
        return (t.normal != Writes::Auto).then(|| {
            format!("{described} is not \"auto\", the only compression.type reading auto.* keys")
        });
    }
    if LEVEL_KEYS.contains(&key) {
        let codec = codec_of(key)?;
        return match t.normal {
            Writes::Codec(c) if c == codec => None,
            Writes::Auto => Some(format!(
                "{described} writes each candidate at the level its spec names \
                 (auto.candidates){}",
                if t.fallback == Some(codec) {
                    format!(
                        "; the overload fallback takes overload.compression.{}.level",
                        codec.name()
                    )
                } else {
                    String::new()
                }
            )),
            Writes::TopicsOwn => Some(format!(
                "{described} stores each topic's own level (its compression.{}.level): \
                 name a codec beside it to set a level",
                codec.name()
            )),
            Writes::AsSent => Some(format!("{described} passes batches as sent")),
            Writes::Codec(c) => Some(format!(
                "{described} writes {}, not {}{}",
                c.name(),
                codec.name(),
                if t.fallback == Some(codec) {
                    format!(
                        "; the overload fallback takes overload.compression.{}.level",
                        codec.name()
                    )
                } else {
                    String::new()
                }
            )),
        };
    }
    if OPTION_KEYS.contains(&key) {
        let codec = codec_of(key)?;
        return match (t.normal, t.fallback) {
            (Writes::TopicsOwn, _) => None,
            (Writes::Codec(c), _) if c == codec => None,
            (_, Some(f)) if f == codec => None,
            (Writes::Auto, _) => Some(format!(
                "{described} writes each candidate with the options its spec names \
                 (auto.candidates)"
            )),
            _ if as_sent => Some(format!("{described} passes batches as sent")),
            (_, Some(f)) => Some(format!(
                "neither {described} nor its overload fallback ({}) writes {}",
                f.name(),
                codec.name()
            )),
            (Writes::Codec(c), None) => Some(format!(
                "{described} writes {}, not {}",
                c.name(),
                codec.name()
            )),
            (_, None) => Some(format!("{described} passes batches as sent")),
        };
    }
    match key {
        GZIP_PROVIDER | "recompress" | "only_if_smaller" | "overload.max_cpu_share" if as_sent => {
            Some(format!(
                "{described} passes batches as sent and overload.compression.type is \
                 \"producer\": kpress rewrites none of them"
            ))
        }
        "overload.compression.type" if t.normal == Writes::TopicsOwn => Some(format!(
            "{described} passes batches as sent under overload: name a codec beside it to \
             have a fallback"
        )),
        "overload.compression.gzip.level"
        | "overload.compression.lz4.level"
        | "overload.compression.zstd.level" => {
            let codec = codec_of(key)?;
            match (t.normal, t.fallback) {
                (_, Some(f)) if f == codec => None,
                (Writes::TopicsOwn, _) => {
                    Some(format!("{described} passes batches as sent under overload"))
                }
                (_, Some(f)) => Some(format!(
                    "the overload fallback is {}, not {}",
                    f.name(),
                    codec.name()
                )),
                (_, None) => Some(
                    "overload.compression.type is \"producer\": batches pass as sent under \
                     overload"
                        .to_owned(),
                ),
            }
        }
        "overload.min_level" => match t.normal {
            _ if !adaptive => Some("[overload] adaptive is off: levels never step down".to_owned()),
            Writes::Auto => Some(format!(
                "{described}: adaptive levels do not step the autopilot's candidates"
            )),
            Writes::Codec(codec) if level_of(codec, &policy.options).is_some() => None,
            _ => Some(format!("{described} has no level to step down")),
        },
        _ => None,
    }
}

/// Each rule's own keys its policy never reads.
fn rule_keys(sink: &mut ProblemSink<'_>, config: &Config, keys: &PolicyKeys<'_>) {
    let defaults_set_type = sets(keys.defaults, "compression.type");
    for (rule, set) in config.topics.iter().zip(keys.rules) {
        let t = targets(
            &rule.policy,
            sets(set, "compression.type"),
            Some(defaults_set_type),
        );
        for key in set {
            if let Some(why) = unused(&key.name, &rule.policy, &t, config.overload.adaptive) {
                sink.bad_value(&key.name, &key.value, format!("has no effect: {why}"), None);
            }
        }
    }
}

/// `[defaults]` keys that neither `[defaults]` nor any rule inheriting them reads.
fn defaults_keys(sink: &mut ProblemSink<'_>, config: &Config, keys: &PolicyKeys<'_>) {
    let adaptive = config.overload.adaptive;
    let t = targets(
        &config.defaults,
        sets(keys.defaults, "compression.type"),
        None,
    );
    for key in keys.defaults {
        let Some(why) = unused(&key.name, &config.defaults, &t, adaptive) else {
            continue;
        };
        let mut heirs = config
            .topics
            .iter()
            .zip(keys.rules)
            .filter(|(_, set)| !sets(set, &key.name))
            .peekable();
        if heirs.peek().is_none() {
            sink.bad_value(&key.name, &key.value, format!("has no effect: {why}"), None);
            continue;
        }
        let any_reads = heirs.any(|(rule, set)| {
            let t = targets(&rule.policy, sets(set, "compression.type"), Some(true));
            unused(&key.name, &rule.policy, &t, adaptive).is_none()
        });
        if !any_reads {
            sink.bad_value(
                &key.name,
                &key.value,
                format!("has no effect: {why}, and no rule inheriting it reads it either"),
                None,
            );
        }
    }
}

fn sets(keys: &[SetKey], name: &str) -> bool {
    keys.iter().any(|k| k.name == name)
}

/// Rules an earlier rule always wins over: an exact name an earlier pattern matches,
/// and any rule after a `*` glob.
fn unreachable_rules(sink: &mut ProblemSink<'_>, config: &Config, keys: &PolicyKeys<'_>) {
    for (i, (rule, set)) in config.topics.iter().zip(keys.rules).enumerate() {
        let Some(at) = set.iter().find(|k| k.name == MATCH_KEY) else {
            continue;
        };
        let earlier = config.topics[..i].iter().find(|e| match &rule.pattern {
            TopicPattern::Exact(name) => e.pattern.matches(name),
            _ => matches!(&e.pattern, TopicPattern::Glob { glob, .. } if glob == "*"),
        });
        if let Some(earlier) = earlier {
            sink.bad_value(
                MATCH_KEY,
                &at.value,
                format!(
                    "has no effect: the rule at line {} ({}) matches every topic this one \
                     does, and the first match wins",
                    earlier.line, earlier.pattern
                ),
                None,
            );
        }
    }
}

/// `[overload]` keys adaptive levels alone read while they are off, `adaptive` with no
/// rule to step, and a target wait the deadline makes unreachable.
fn overload_keys(sink: &mut ProblemSink<'_>, root: &DeTable<'_>, config: &Config) {
    let overload = &config.overload;
    let at = |section: &str, key: &str| -> Option<Range<usize>> {
        match root.get(section)?.get_ref() {
            DeValue::Table(table) => Some(table.get(key)?.span()),
            _ => None,
        }
    };
    let policies =
        || std::iter::once(&config.defaults).chain(config.topics.iter().map(|r| &r.policy));
    if !overload.adaptive {
        if let Some(span) = at("overload", "target_wait_ms") {
            sink.bad_value(
                "overload.target_wait_ms",
                &span,
                "has no effect: [overload] adaptive is off, and only adaptive levels judge \
                 the mean wait",
                None,
            );
        }
        let caps = policies().any(|p| p.overload.max_cpu_share.is_some());
        if let (Some(span), false) = (at("overload", "window_ms"), caps) {
            sink.bad_value(
                "overload.window_ms",
                &span,
                "has no effect: [overload] adaptive is off and no rule sets \
                 overload.max_cpu_share, the two things windows are for",
                None,
            );
        }
        return;
    }
    let steps = policies().any(|p| match p.compression {
        Compression::Codec(codec) => level_of(codec, &p.options)
            .is_some_and(|level| ladder(codec, level, p.overload.min_level).len() > 1),
        _ => false,
    });
    if let (Some(span), false) = (at("overload", "adaptive"), steps) {
        sink.bad_value(
            "overload.adaptive",
            &span,
            "has no effect: no rule (nor [defaults]) names a codec with a level to step \
             down (gzip, lz4 or zstd above its overload.min_level)",
            None,
        );
    }
    let deadline = config.limits.max_rewrite_wait_ms as u64;
    if overload.target_wait_ms < deadline {
        return;
    }
    let why = format!(
        "a wait that long misses the deadline, so the mean wait of the rewrites that got a \
         slot never reaches the target: only missed deadlines press levels down \
         (target_wait_ms {} >= max_rewrite_wait_ms {deadline})",
        overload.target_wait_ms
    );
    if let Some(span) = at("overload", "target_wait_ms") {
        sink.bad_value(
            "overload.target_wait_ms",
            &span,
            format!("at or above [limits] max_rewrite_wait_ms: {why}"),
            Some(format!("below {deadline}")),
        );
    } else if let Some(span) = at("limits", "max_rewrite_wait_ms") {
        sink.bad_value(
            "limits.max_rewrite_wait_ms",
            &span,
            format!("at or below [overload] target_wait_ms: {why}"),
            Some(format!("above {}", overload.target_wait_ms)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{config, HEAD};

    /// The warnings `text` (after [`HEAD`], lines 1..=4) loads with, as printed.
    fn warnings(text: &str) -> Vec<String> {
        config(&format!("{HEAD}{text}"))
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// The warning for `compression.CODEC.level = LEVEL` at `at` (line:column) under
    /// compression.type "topic" set `by` the default or [defaults].
    fn topic_mode_level(at: &str, codec: &str, level: u32, by: &str) -> String {
        format!(
            "t.toml:{at}: compression.{codec}.level = {level}: has no effect: compression.type \
             \"topic\" ({by}) stores each topic's own level (its compression.{codec}.level): \
             name a codec beside it to set a level"
        )
    }

    #[test]
    fn a_level_beside_an_inherited_topic_mode_is_named() {
        assert_eq!(
            warnings("[[topics]]\nmatch = \"logs.*\"\ncompression.zstd.level = 19\n"),
            [topic_mode_level("7:26", "zstd", 19, "the default")]
        );
        assert_eq!(
            warnings(
                "[defaults]\ncompression.type = \"topic\"\n\
                 [[topics]]\nmatch = \"a\"\ncompression.gzip.level = 9\n\
                 compression.lz4.level = 12\n"
            ),
            [
                topic_mode_level("9:26", "gzip", 9, "from [defaults]"),
                topic_mode_level("10:25", "lz4", 12, "from [defaults]"),
            ]
        );
        // KIP-780 options do apply in topic mode: to whichever codec the topic names.
        assert!(warnings(
            "[[topics]]\nmatch = \"a\"\ncompression.zstd.window = 20\ncompression.lz4.block = 5\n"
        )
        .is_empty());
    }

    #[test]
    fn a_defaults_level_warns_only_when_no_rule_inheriting_it_reads_it() {
        assert_eq!(
            warnings("[defaults]\ncompression.zstd.level = 9\n"),
            [topic_mode_level("6:26", "zstd", 9, "the default")]
        );
        assert_eq!(
            warnings(
                "[defaults]\ncompression.zstd.level = 9\n\
                 [[topics]]\nmatch = \"a\"\ncompression.type = \"lz4\"\n"
            ),
            [topic_mode_level("6:26", "zstd", 9, "the default")
                + ", and no rule inheriting it reads it either"]
        );
        // A rule naming zstd inherits the level: it takes effect there.
        assert!(warnings(
            "[defaults]\ncompression.zstd.level = 9\n\
             [[topics]]\nmatch = \"a\"\ncompression.type = \"zstd\"\n"
        )
        .is_empty());
    }

    #[test]
    fn overload_keys_beside_an_inherited_topic_mode_are_named() {
        assert_eq!(
            warnings(
                "[[topics]]\nmatch = \"a\"\noverload.compression.type = \"lz4\"\n\
                 overload.compression.lz4.level = 1\noverload.max_cpu_share = 0.5\n"
            ),
            [
                "t.toml:7:29: overload.compression.type = \"lz4\": has no effect: \
                 compression.type \"topic\" (the default) passes batches as sent under \
                 overload: name a codec beside it to have a fallback",
                "t.toml:8:34: overload.compression.lz4.level = 1: has no effect: \
                 compression.type \"topic\" (the default) passes batches as sent under overload",
            ]
        );
    }

    #[test]
    fn keys_a_pass_through_or_another_codec_never_reads_are_named() {
        assert_eq!(
            warnings(
                "[[topics]]\nmatch = \"a\"\ncompression.type = \"producer\"\n\
                 compression.zstd.level = 9\nrecompress = \"always\"\n"
            ),
            [
                "t.toml:8:26: compression.zstd.level = 9: has no effect: compression.type \
                 \"producer\" passes batches as sent",
                "t.toml:9:14: recompress = \"always\": has no effect: compression.type \
                 \"producer\" passes batches as sent and overload.compression.type is \
                 \"producer\": kpress rewrites none of them",
            ]
        );
        // A fallback rewrites a pass-through rule's batches under overload, with the
        // rule's options.
        assert!(warnings(
            "[[topics]]\nmatch = \"a\"\ncompression.type = \"producer\"\n\
             overload.compression.type = \"zstd\"\ncompression.zstd.window = 20\n\
             recompress = \"always\"\n"
        )
        .is_empty());
        assert_eq!(
            warnings(
                "[[topics]]\nmatch = \"a\"\ncompression.type = \"lz4\"\n\
                 compression.zstd.level = 9\ncompression.zstd.window = 20\n\
                 overload.compression.zstd.level = 1\n"
            ),
            [
                "t.toml:8:26: compression.zstd.level = 9: has no effect: compression.type \
                 \"lz4\" writes lz4, not zstd",
                "t.toml:9:27: compression.zstd.window = 20: has no effect: compression.type \
                 \"lz4\" writes lz4, not zstd",
                "t.toml:10:35: overload.compression.zstd.level = 1: has no effect: \
                 overload.compression.type is \"producer\": batches pass as sent under overload",
            ]
        );
    }

    #[test]
    fn overload_settings_adaptive_levels_alone_read_are_named_while_off() {
        assert_eq!(
            warnings(
                "[overload]\ntarget_wait_ms = 50\nwindow_ms = 500\n\
                 [[topics]]\nmatch = \"a\"\ncompression.type = \"zstd\"\noverload.min_level = 1\n"
            ),
            [
                "t.toml:6:18: overload.target_wait_ms = 50: has no effect: [overload] \
                 adaptive is off, and only adaptive levels judge the mean wait",
                "t.toml:7:13: overload.window_ms = 500: has no effect: [overload] adaptive \
                 is off and no rule sets overload.max_cpu_share, the two things windows are for",
                "t.toml:11:22: overload.min_level = 1: has no effect: [overload] adaptive is \
                 off: levels never step down",
            ]
        );
        // A CPU share is judged over windows, adaptive or not.
        assert!(warnings(
            "[overload]\nwindow_ms = 500\n[[topics]]\nmatch = \"a\"\n\
             overload.max_cpu_share = 0.5\n"
        )
        .is_empty());
        assert_eq!(
            warnings("[overload]\nadaptive = true\n"),
            [
                "t.toml:6:12: overload.adaptive = true: has no effect: no rule (nor [defaults]) \
              names a codec with a level to step down (gzip, lz4 or zstd above its \
              overload.min_level)"
            ]
        );
    }

    #[test]
    fn a_target_wait_at_or_above_the_deadline_is_named_where_it_is_set() {
        const RULE: &str = "[[topics]]\nmatch = \"a\"\ncompression.type = \"zstd\"\n\
             compression.zstd.level = 19\n";
        assert_eq!(
            warnings(&format!(
                "[overload]\nadaptive = true\ntarget_wait_ms = 500\n{RULE}"
            )),
            [
                "t.toml:7:18: overload.target_wait_ms = 500: at or above [limits] \
              max_rewrite_wait_ms: a wait that long misses the deadline, so the mean wait of \
              the rewrites that got a slot never reaches the target: only missed deadlines \
              press levels down (target_wait_ms 500 >= max_rewrite_wait_ms 500) \
              (allowed: below 500)"
            ]
        );
        assert_eq!(
            warnings(&format!(
                "[limits]\nmax_rewrite_wait_ms = 80\n[overload]\nadaptive = true\n{RULE}"
            )),
            [
                "t.toml:6:23: limits.max_rewrite_wait_ms = 80: at or below [overload] \
              target_wait_ms: a wait that long misses the deadline, so the mean wait of the \
              rewrites that got a slot never reaches the target: only missed deadlines press \
              levels down (target_wait_ms 100 >= max_rewrite_wait_ms 80) (allowed: above 100)"
            ]
        );
        assert!(warnings(&format!(
            "[limits]\nmax_rewrite_wait_ms = 80\n[overload]\nadaptive = true\n\
             target_wait_ms = 40\n{RULE}"
        ))
        .is_empty());
    }

    #[test]
    fn a_rule_an_earlier_one_always_wins_over_is_named() {
        assert_eq!(
            warnings(
                "[[topics]]\nmatch = \"logs.*\"\ncompression.type = \"zstd\"\n\
                 [[topics]]\nmatch = \"logs.app\"\ncompression.type = \"lz4\"\n\
                 [[topics]]\nmatch = \"*\"\n[[topics]]\nmatch = \"re:x.*\"\n"
            ),
            [
                "t.toml:9:9: match = \"logs.app\": has no effect: the rule at line 6 (logs.*) \
                 matches every topic this one does, and the first match wins",
                "t.toml:14:9: match = \"re:x.*\": has no effect: the rule at line 12 (*) \
                 matches every topic this one does, and the first match wins",
            ]
        );
    }

    #[test]
    fn a_ca_beside_verify_false_is_named() {
        assert_eq!(
            warnings("[upstream.tls]\nca = \"ca.pem\"\nverify = false\n"),
            [
                "t.toml:6:6: upstream.tls.ca = \"ca.pem\": has no effect: upstream.tls.verify = \
              false accepts any certificate, so none is checked against this CA"
            ]
        );
        assert!(warnings("[upstream.tls]\nca = \"ca.pem\"\n").is_empty());
    }

    #[test]
    fn settings_that_take_effect_draw_no_warning() {
        assert!(warnings(
            "[overload]\nadaptive = true\ntarget_wait_ms = 50\nwindow_ms = 500\n\
             [defaults]\ncompression.type = \"zstd\"\ncompression.zstd.level = 9\n\
             only_if_smaller = true\noverload.compression.type = \"lz4\"\n\
             overload.compression.lz4.level = 1\noverload.min_level = 3\n\
             [[topics]]\nmatch = \"logs.*\"\ncompression.type = \"topic\"\n\
             compression.gzip.provider = \"zlib\"\nrecompress = \"always\"\n\
             overload.max_cpu_share = 0.5\n"
        )
        .is_empty());
    }
}
