//! The compiled rules: which [`RewritePolicy`] a topic gets, cached per topic name.
//!
//! Each rule (and the defaults) is compiled once into its policy at every notch of its
//! level ladder (the configured level first) and its overload fallback, so that under
//! load the rewrite only reads another precompiled policy: the rule's notch is an
//! atomic index, moved by [`PolicySet::end_window`] when `[overload] adaptive` is on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use kpress_batch::{PassReason, PolicyLookup, RewritePolicy, Target, TargetSource};
use kpress_codec::{Codec, CompressionOptions};

use crate::auto::AutoPolicy;
use crate::overload::{ladder, level_key, level_of, StepReason, Stepper, Window};
use crate::settings::{Compression, Config, CpuShare, Limits, OverloadSettings, TopicPolicy};
use crate::topic_match::TopicPattern;
use crate::topic_mode::{TopicCompression, TopicConfigSource, TopicModePolicies};

/// Topic names remembered before the cache starts over. Far above the topic count of
/// real clusters; the bound only matters against clients inventing names.
pub const CACHE_CAPACITY: usize = 65_536;

/// What `/policy`, the log and the gauge call the defaults' "rule".
pub const DEFAULTS_RULE: &str = "[defaults]";

/// Every rule of a policy file, ready for the Produce path.
#[derive(Debug)]
pub struct PolicySet {
    patterns: Vec<TopicPattern>,
    /// One per pattern, then the defaults last.
    rules: Vec<CompiledRule>,
    /// Topic name → index into `rules`.
    cache: RwLock<HashMap<Box<str>, usize>>,
    overload: OverloadSettings,
    /// Whether some rule sets `overload.max_cpu_share`: without one, the Produce path's
    /// CPU-share questions cost no lookup.
    cpu_shares: bool,
    /// Where topic mode learns topics' configurations; without one, topic-mode topics
    /// pass as sent (counted `topic_config_unavailable`).
    topic_configs: Option<Arc<dyn TopicConfigSource>>,
    /// Where auto rules learn each topic's chosen candidate; without one, their topics
    /// stay undecided.
    auto: Option<Arc<dyn AutoChoiceSource>>,
}

impl std::fmt::Debug for dyn TopicConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TopicConfigSource")
    }
}

/// Where auto rules learn the candidate chosen for each topic (the autopilot). Asked
/// once per partition of every Produce request: it must answer from memory.
pub trait AutoChoiceSource: Send + Sync {
    /// The candidate chosen for `topic` (by its canonical spec label, as
    /// `Candidate::to_string()` prints it), or None while undecided.
    fn auto_choice(&self, topic: &str) -> Option<Arc<str>>;
}

impl std::fmt::Debug for dyn AutoChoiceSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AutoChoiceSource")
    }
}

/// An auto rule's policies, compiled: one per candidate and the undecided one, each
/// keeping the original batch when the rewrite is not smaller, and topic mode's for
/// topics whose own configuration sets `compression.type`.
#[derive(Debug)]
struct CompiledAuto {
    settings: AutoPolicy,
    /// Each candidate's label (its spec as `Candidate` prints it) and policy, in
    /// `auto.candidates` order.
    candidates: Vec<(String, RewritePolicy)>,
    /// `auto.initial`'s policy (a pass as sent for `producer`): undecided topics'.
    initial: RewritePolicy,
    /// A pass as sent: the choice [`AUTO_AS_SENT`](crate::AUTO_AS_SENT).
    producer: RewritePolicy,
    /// Topic mode, for topics the operator pinned with a topic-level `compression.type`.
    pinned: TopicModePolicies,
}

impl CompiledAuto {
    fn new(settings: &AutoPolicy, base: &RewritePolicy, options: &CompressionOptions) -> Self {
        // Every choice keeps a batch that would grow as sent.
        let of = |candidate: Option<&kpress_codec::Candidate>| RewritePolicy {
            target: match candidate {
                Some(c) => Target::Codec {
                    codec: c.codec(),
                    options: c.options().clone(),
                },
                None => Target::Producer,
            },
            only_if_smaller: true,
            ..base.clone()
        };
        CompiledAuto {
            candidates: settings
                .candidates
                .iter()
                .map(|c| (c.to_string(), of(Some(c))))
                .collect(),
            initial: of(settings.initial.as_ref()),
            producer: of(None),
            pinned: TopicModePolicies::new(base, options),
            settings: settings.clone(),
        }
    }

    fn all(&self) -> impl Iterator<Item = &RewritePolicy> {
        self.candidates
            .iter()
            .map(|(_, p)| p)
            .chain(std::iter::once(&self.initial))
            .chain(self.pinned.all())
    }
}

/// Whether the topic's own configuration sets `compression.type` at topic level: the
/// operator pinned it, and an auto rule leaves it to topic mode.
fn pinned(known: &TopicCompression) -> bool {
    matches!(
        known,
        TopicCompression::Known {
            source: TargetSource::Topic,
            ..
        }
    )
}

/// One rule, compiled: its policy at each notch and under overload, and its load.
#[derive(Debug)]
struct CompiledRule {
    /// The rule's match pattern, or [`DEFAULTS_RULE`].
    name: String,
    /// The policy at each level of the rule's ladder, the configured level first; one
    /// entry for a codec without levels.
    notches: Vec<(Option<i32>, RewritePolicy)>,
    /// Index into `notches` in force now.
    notch: AtomicUsize,
    /// Under overload: the fallback, or a pass as sent.
    fallback: RewritePolicy,
    /// This window's waits for a work slot.
    waits: AtomicU64,
    waited_nanos: AtomicU64,
    misses: AtomicU64,
    stepper: Mutex<Stepper>,
    /// `overload.max_cpu_share`, and the rewrite CPU its topics' requests took in this
    /// window.
    max_cpu_share: Option<f64>,
    cpu_nanos: AtomicU64,
    /// Its policies by codec and level when it follows the topic's own configuration
    /// (`compression.type = "topic"`).
    topic_mode: Option<TopicModePolicies>,
    /// Its policies when the autopilot chooses (`compression.type = "auto"`).
    auto: Option<CompiledAuto>,
}

/// A rule's level moved by [`PolicySet::end_window`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelChange {
    /// The rule's match pattern, or [`DEFAULTS_RULE`].
    pub rule: String,
    pub codec: Codec,
    pub from: i32,
    pub to: i32,
    pub reason: StepReason,
}

/// A rule's level now, for `/policy` and the gauge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleLevel {
    /// The rule's match pattern, or [`DEFAULTS_RULE`].
    pub rule: String,
    pub codec: Codec,
    /// The level the rule sets, and the one in force.
    pub configured: i32,
    pub effective: i32,
}

impl CompiledRule {
    fn new(name: String, policy: &TopicPolicy, limits: &Limits, adaptive: bool) -> CompiledRule {
        let base = rewrite_policy(policy, limits);
        let levels = match policy.compression {
            Compression::Codec(codec) if adaptive => level_of(codec, &policy.options)
                .map(|level| (codec, ladder(codec, level, policy.overload.min_level))),
            _ => None,
        };
        let notches = match levels {
            Some((codec, levels)) => {
                let key = level_key(codec).expect("a codec with levels");
                levels
                    .into_iter()
                    .enumerate()
                    .map(|(i, level)| {
                        let mut at = base.clone();
                        if let (Target::Codec { options, .. }, true) = (&mut at.target, i > 0) {
                            options
                                .set_int(key, level.into())
                                .expect("a ladder level is in the codec's range");
                        }
                        (Some(level), at)
                    })
                    .collect()
            }
            None => {
                let level = match policy.compression {
                    Compression::Codec(codec) => level_of(codec, &policy.options),
                    Compression::Producer | Compression::Topic | Compression::Auto => None,
                };
                vec![(level, base.clone())]
            }
        };
        let topic_mode = (policy.compression == Compression::Topic)
            .then(|| TopicModePolicies::new(&base, &policy.options));
        let auto = (policy.compression == Compression::Auto)
            .then(|| CompiledAuto::new(&policy.auto, &base, &policy.options));
        // An auto rule's level-less notch is its undecided policy.
        let notches = match &auto {
            Some(auto) => vec![(None, auto.initial.clone())],
            None => notches,
        };
        // Under overload a topic-mode topic passes as sent: the broker converts it, as
        // it would without kpress.
        let fallback = match policy.overload.compression.fixed() {
            Some(fixed) if topic_mode.is_none() => RewritePolicy {
                target: Target::new(fixed, policy.overload.options(&policy.options)),
                ..base
            },
            _ => RewritePolicy {
                target: Target::Producer,
                ..base
            },
        };
        CompiledRule {
            name,
            notches,
            notch: AtomicUsize::new(0),
            fallback,
            waits: AtomicU64::new(0),
            waited_nanos: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            stepper: Mutex::new(Stepper::default()),
            max_cpu_share: policy.overload.max_cpu_share.map(CpuShare::fraction),
            cpu_nanos: AtomicU64::new(0),
            topic_mode,
            auto,
        }
    }

    fn policy(&self) -> &RewritePolicy {
        let notch = self.notch.load(Ordering::Relaxed);
        &self.notches[notch.min(self.notches.len() - 1)].1
    }

    fn level(&self) -> Option<RuleLevel> {
        let codec = self.codec()?;
        let configured = self.notches[0].0?;
        let notch = self.notch.load(Ordering::Relaxed);
        let effective = self.notches[notch.min(self.notches.len() - 1)].0?;
        Some(RuleLevel {
            rule: self.name.clone(),
            codec,
            configured,
            effective,
        })
    }

    fn codec(&self) -> Option<Codec> {
        match self.notches[0].1.target {
            Target::Codec { codec, .. } => Some(codec),
            Target::Producer | Target::Unresolved(_) => None,
        }
    }

    /// This window's figures, counted from zero again.
    fn take_window(&self) -> Window {
        Window {
            waits: self.waits.swap(0, Ordering::Relaxed),
            waited: Duration::from_nanos(self.waited_nanos.swap(0, Ordering::Relaxed)),
            misses: self.misses.swap(0, Ordering::Relaxed),
        }
    }
}

impl PolicySet {
    /// Compiles a valid [`Config`]'s `[defaults]` and `[[topics]]` with its `[limits]`
    /// and `[overload]`, with no source of topics' own configurations: topic-mode
    /// topics pass as sent.
    pub fn new(config: &Config) -> PolicySet {
        let adaptive = config.overload.adaptive;
        let mut patterns = Vec::with_capacity(config.topics.len());
        let mut rules = Vec::with_capacity(config.topics.len() + 1);
        for rule in &config.topics {
            patterns.push(rule.pattern.clone());
            rules.push(CompiledRule::new(
                rule.pattern.to_string(),
                &rule.policy,
                &config.limits,
                adaptive,
            ));
        }
        rules.push(CompiledRule::new(
            DEFAULTS_RULE.to_owned(),
            &config.defaults,
            &config.limits,
            adaptive,
        ));
        PolicySet {
            patterns,
            cpu_shares: rules.iter().any(|rule| rule.max_cpu_share.is_some()),
            rules,
            cache: RwLock::new(HashMap::new()),
            overload: config.overload,
            topic_configs: None,
            auto: None,
        }
    }

    /// [`new`](Self::new), with topic mode resolved from `source`.
    pub fn with_topic_configs(config: &Config, source: Arc<dyn TopicConfigSource>) -> PolicySet {
        PolicySet::with_sources(config, Some(source), None)
    }

    /// [`new`](Self::new), with topic mode resolved from `topic_configs` and auto
    /// rules' choices from `auto` (without it, auto topics stay undecided).
    pub fn with_sources(
        config: &Config,
        topic_configs: Option<Arc<dyn TopicConfigSource>>,
        auto: Option<Arc<dyn AutoChoiceSource>>,
    ) -> PolicySet {
        PolicySet {
            topic_configs,
            auto,
            ..PolicySet::new(config)
        }
    }

    /// Whether some topic's policy may follow the topic's own configuration (topic
    /// mode, and auto rules for topics pinned by a topic-level `compression.type`).
    pub fn has_topic_mode(&self) -> bool {
        self.rules
            .iter()
            .any(|rule| rule.topic_mode.is_some() || rule.auto.is_some())
    }

    /// Whether `topic`'s policy reads the topic's own configuration: topic mode, and
    /// auto rules (a topic-level `compression.type` pins the topic).
    pub fn follows_topic(&self, topic: &str) -> bool {
        let rule = &self.rules[self.policy_index(topic)];
        rule.topic_mode.is_some() || rule.auto.is_some()
    }

    /// The auto rule governing `topic`, if its rule is auto: the rule's index (in file
    /// order; the number of `[[topics]]` rules for `[defaults]`) and its settings. A
    /// topic an auto rule covers but its own configuration pins is included: see
    /// [`auto_decides`](Self::auto_decides).
    pub fn auto_rule(&self, topic: &str) -> Option<(usize, &AutoPolicy)> {
        let index = self.policy_index(topic);
        let auto = self.rules[index].auto.as_ref()?;
        Some((index, &auto.settings))
    }

    /// Whether the autopilot's choice is what `topic` gets: an auto rule covers it and
    /// no topic-level `compression.type` pins it.
    pub fn auto_decides(&self, topic: &str) -> bool {
        self.rules[self.policy_index(topic)].auto.is_some()
            && !pinned(&self.topic_compression(topic))
    }

    /// Every auto rule's name (its match pattern, or [`DEFAULTS_RULE`]) and settings,
    /// in file order, the defaults last.
    pub fn auto_rules(&self) -> Vec<(String, AutoPolicy)> {
        self.rules
            .iter()
            .filter_map(|rule| Some((rule.name.clone(), rule.auto.as_ref()?.settings.clone())))
            .collect()
    }

    /// An auto rule's policy for `topic`: topic mode's when the topic is pinned, the
    /// chosen candidate's, or the undecided one.
    fn auto_policy<'a>(&'a self, topic: &str, auto: &'a CompiledAuto) -> &'a RewritePolicy {
        let known = self.topic_compression(topic);
        if pinned(&known) {
            return auto.pinned.resolve(&known);
        }
        let Some(label) = self.auto.as_ref().and_then(|s| s.auto_choice(topic)) else {
            return &auto.initial;
        };
        if &*label == crate::AUTO_AS_SENT {
            return &auto.producer;
        }
        // A label not among the rule's candidates (a reload dropped it): undecided.
        auto.candidates
            .iter()
            .find(|(candidate, _)| candidate.as_str() == &*label)
            .map_or(&auto.initial, |(_, policy)| policy)
    }

    /// What `source` says of `topic`, for a topic-mode policy.
    fn topic_compression(&self, topic: &str) -> TopicCompression {
        self.topic_configs
            .as_ref()
            .map_or(TopicCompression::Unavailable, |s| {
                s.topic_compression(topic)
            })
    }

    /// Index of the first rule matching `topic`, `None` for the defaults.
    pub fn rule_index(&self, topic: &str) -> Option<usize> {
        let index = self.policy_index(topic);
        (index < self.patterns.len()).then_some(index)
    }

    fn policy_index(&self, topic: &str) -> usize {
        // A poisoned lock only means another thread panicked mid-insert of a plain map.
        if let Some(&index) = self
            .cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
        {
            return index;
        }
        let index = self
            .patterns
            .iter()
            .position(|p| p.matches(topic))
            .unwrap_or(self.patterns.len());
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(topic.into(), index);
        index
    }

    /// Topic names currently cached (for tests and metrics).
    pub fn cached_topics(&self) -> usize {
        self.cache.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl PolicySet {
    /// Ends an `[overload]` window: every rule's CPU share starts again, and with
    /// `adaptive` each rule's waits since the last call are judged and its level steps
    /// when a streak says so. The changes made, for the log.
    pub fn end_window(&self) -> Vec<LevelChange> {
        for rule in &self.rules {
            rule.cpu_nanos.store(0, Ordering::Relaxed);
        }
        if !self.overload.adaptive {
            return Vec::new();
        }
        let target = Duration::from_millis(self.overload.target_wait_ms);
        let mut changes = Vec::new();
        for rule in &self.rules {
            let window = rule.take_window();
            if rule.notches.len() < 2 {
                continue;
            }
            let mut stepper = rule.stepper.lock().unwrap_or_else(PoisonError::into_inner);
            let notch = rule.notch.load(Ordering::Relaxed);
            let Some((next, reason)) = stepper.window(&window, target, notch, rule.notches.len())
            else {
                continue;
            };
            rule.notch.store(next, Ordering::Relaxed);
            let (Some(from), Some(to), Some(codec)) =
                (rule.notches[notch].0, rule.notches[next].0, rule.codec())
            else {
                continue;
            };
            changes.push(LevelChange {
                rule: rule.name.clone(),
                codec,
                from,
                to,
                reason,
            });
        }
        changes
    }

    /// Each rule's level, configured and in force, for rules whose codec has levels;
    /// the defaults last.
    pub fn levels(&self) -> Vec<RuleLevel> {
        self.rules.iter().filter_map(CompiledRule::level).collect()
    }

    /// The level of rule `index` (in file order; `None`: the defaults), if its codec
    /// has levels.
    pub fn rule_level(&self, index: Option<usize>) -> Option<RuleLevel> {
        let index = index.unwrap_or(self.patterns.len());
        self.rules.get(index)?.level()
    }

    /// The `[overload]` settings the set was compiled with.
    pub fn overload_settings(&self) -> OverloadSettings {
        self.overload
    }
}

impl PolicyLookup for PolicySet {
    fn policy_for(&self, topic: &str) -> &RewritePolicy {
        let rule = &self.rules[self.policy_index(topic)];
        if let Some(auto) = &rule.auto {
            return self.auto_policy(topic, auto);
        }
        match &rule.topic_mode {
            None => rule.policy(),
            Some(mode) => mode.resolve(&self.topic_compression(topic)),
        }
    }

    fn target_source(&self, topic: &str) -> TargetSource {
        let rule = &self.rules[self.policy_index(topic)];
        if rule.auto.is_some() {
            // The autopilot's choice, unless the topic's own configuration pins it.
            let known = self.topic_compression(topic);
            return if pinned(&known) {
                known.source()
            } else {
                TargetSource::Auto
            };
        }
        match &rule.topic_mode {
            None => TargetSource::Rule,
            Some(_) => self.topic_compression(topic).source(),
        }
    }

    fn has_rule_for(&self, topic: &str) -> bool {
        self.rule_index(topic).is_some()
    }

    fn uses(&self, codec: Codec, options: &CompressionOptions) -> bool {
        self.rules.iter().any(|rule| {
            rule.fallback.target.is(codec, options)
                || rule
                    .notches
                    .iter()
                    .any(|(_, p)| p.target.is(codec, options))
                || rule
                    .topic_mode
                    .iter()
                    .flat_map(TopicModePolicies::all)
                    .any(|p| p.target.is(codec, options))
                || rule
                    .auto
                    .iter()
                    .flat_map(CompiledAuto::all)
                    .any(|p| p.target.is(codec, options))
        })
    }

    fn overload_policy_for(&self, topic: &str) -> &RewritePolicy {
        &self.rules[self.policy_index(topic)].fallback
    }

    fn note_rewrite_cpu(&self, topic: &str, cpu: Duration) {
        if !self.cpu_shares {
            return;
        }
        let rule = &self.rules[self.policy_index(topic)];
        if rule.max_cpu_share.is_some() {
            let nanos = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
            rule.cpu_nanos.fetch_add(nanos, Ordering::Relaxed);
        }
    }

    fn over_cpu_share(&self, topic: &str, slots: usize) -> bool {
        if !self.cpu_shares {
            return false;
        }
        let rule = &self.rules[self.policy_index(topic)];
        let Some(share) = rule.max_cpu_share else {
            return false;
        };
        let window_nanos = self.overload.window_ms as f64 * 1e6;
        rule.cpu_nanos.load(Ordering::Relaxed) as f64 >= share * window_nanos * slots as f64
    }

    fn note_wait(&self, topic: &str, waited: Duration, missed: bool) {
        if !self.overload.adaptive {
            return;
        }
        let rule = &self.rules[self.policy_index(topic)];
        if rule.notches.len() < 2 {
            return;
        }
        if missed {
            rule.misses.fetch_add(1, Ordering::Relaxed);
        } else {
            rule.waits.fetch_add(1, Ordering::Relaxed);
            let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
            rule.waited_nanos.fetch_add(nanos, Ordering::Relaxed);
        }
    }
}

/// A file's policy with the file's limits, as the batch core takes it. A topic-mode or
/// auto policy's target is unresolved here: [`PolicySet`] resolves it per topic.
pub fn rewrite_policy(policy: &TopicPolicy, limits: &Limits) -> RewritePolicy {
    let target = match policy.compression.fixed() {
        Some(fixed) => Target::new(fixed, policy.options.clone()),
        None => Target::Unresolved(PassReason::TopicConfigUnavailable),
    };
    RewritePolicy {
        target,
        mode: policy.recompress,
        max_batch_bytes: limits.max_batch_bytes,
        max_decompressed_bytes: limits.max_decompressed_bytes,
        max_decompression_ratio: limits.max_decompression_ratio,
        only_if_smaller: policy.only_if_smaller,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    const HEAD: &str = "[listener]\nbind = \"127.0.0.1:19092\"\n[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n";

    fn set(text: &str) -> PolicySet {
        PolicySet::new(&parse(&format!("{HEAD}{text}"), "t.toml").unwrap())
    }

    fn target(policy: &RewritePolicy) -> (&'static str, Option<i64>) {
        match &policy.target {
            Target::Producer => ("producer", None),
            Target::Unresolved(_) => ("unresolved", None),
            Target::Codec { codec, options } => (
                codec.name(),
                level_key(*codec).and_then(|key| options.get(key)),
            ),
        }
    }

    #[test]
    fn a_rule_falls_back_to_its_overload_setting_or_passes_as_sent() {
        let set = set("[defaults]\ncompression.type = \"zstd\"\n\
             [[topics]]\nmatch = \"heavy.*\"\ncompression.zstd.level = 19\n\
             overload.compression.type = \"lz4\"\n\
             [[topics]]\nmatch = \"cheap.*\"\ncompression.type = \"zstd\"\n\
             overload.compression.type = \"zstd\"\noverload.compression.zstd.level = 1\n");
        assert_eq!(target(set.policy_for("heavy.a")), ("zstd", Some(19)));
        assert_eq!(target(set.overload_policy_for("heavy.a")), ("lz4", Some(9)));
        assert_eq!(
            target(set.overload_policy_for("cheap.a")),
            ("zstd", Some(1))
        );
        assert_eq!(target(set.overload_policy_for("other")), ("producer", None));
        // Compressors of the fallbacks are in use.
        let lz4 = &set.overload_policy_for("heavy.a").target;
        let Target::Codec { codec, options } = lz4 else {
            panic!("{lz4:?}")
        };
        assert!(set.uses(*codec, options));
    }

    /// Notes `n` waits of `ms` for `topic` and ends the window.
    fn window(set: &PolicySet, topic: &str, n: u32, ms: u64, missed: bool) -> Vec<LevelChange> {
        for _ in 0..n {
            set.note_wait(topic, Duration::from_millis(ms), missed);
        }
        set.end_window()
    }

    const ADAPTIVE: &str = "[overload]\nadaptive = true\ntarget_wait_ms = 100\n\
         [[topics]]\nmatch = \"heavy.*\"\ncompression.type = \"zstd\"\n\
         compression.zstd.level = 19\noverload.min_level = 13\n";

    fn effective(set: &PolicySet) -> i32 {
        set.levels()[0].effective
    }

    #[test]
    fn a_pressured_rule_steps_down_its_ladder_and_back_up_when_calm() {
        let set = set(ADAPTIVE);
        assert_eq!(set.levels()[0].configured, 19);
        for _ in 0..2 {
            assert!(window(&set, "heavy.a", 1, 0, true).is_empty());
        }
        let changes = window(&set, "heavy.b", 1, 0, true);
        assert_eq!(
            changes,
            [LevelChange {
                rule: "heavy.*".into(),
                codec: Codec::Zstd,
                from: 19,
                to: 16,
                reason: StepReason::Missed {
                    windows: 3,
                    misses: 1
                },
            }]
        );
        assert_eq!(target(set.policy_for("heavy.a")), ("zstd", Some(16)));
        // Slow waits press too; the ladder stops at min_level.
        for _ in 0..9 {
            window(&set, "heavy.a", 4, 300, false);
        }
        assert_eq!(effective(&set), 13);
        assert_eq!(target(set.policy_for("heavy.a")), ("zstd", Some(13)));
        // Idle windows are calm: back up a notch every five, never above 19.
        for _ in 0..5 {
            set.end_window();
        }
        assert_eq!(effective(&set), 16);
        for _ in 0..20 {
            set.end_window();
        }
        assert_eq!(effective(&set), 19);
        assert_eq!(target(set.policy_for("heavy.a")), ("zstd", Some(19)));
    }

    #[test]
    fn levels_stay_put_without_adaptive_and_a_new_set_starts_at_the_configured_level() {
        let fixed = set(&ADAPTIVE.replace("adaptive = true", "adaptive = false"));
        for _ in 0..10 {
            assert!(window(&fixed, "heavy.a", 1, 0, true).is_empty());
        }
        assert_eq!(effective(&fixed), 19);
        let adaptive = set(ADAPTIVE);
        for _ in 0..3 {
            window(&adaptive, "heavy.a", 1, 0, true);
        }
        assert_eq!(effective(&adaptive), 16);
        // A reload compiles a new set: it starts again at the configured level.
        assert_eq!(effective(&set(ADAPTIVE)), 19);
    }

    #[test]
    fn a_rule_past_its_cpu_share_of_the_window_is_over_until_the_window_ends() {
        // A quarter of 2 slots over 1000 ms windows: 500 ms of CPU a window.
        let set = set("[overload]\nwindow_ms = 1000\n\
             [[topics]]\nmatch = \"heavy.*\"\ncompression.type = \"zstd\"\n\
             overload.max_cpu_share = 0.25\n\
             [[topics]]\nmatch = \"light.*\"\ncompression.type = \"lz4\"\n");
        let ms = Duration::from_millis;
        set.note_rewrite_cpu("heavy.a", ms(300));
        set.note_rewrite_cpu("heavy.b", ms(199));
        assert!(!set.over_cpu_share("heavy.a", 2));
        // The rule's topics share one budget; with one slot it is 250 ms.
        assert!(set.over_cpu_share("heavy.c", 1));
        set.note_rewrite_cpu("heavy.b", ms(1));
        assert!(set.over_cpu_share("heavy.a", 2));
        // A rule without a cap, and the defaults, are never over.
        set.note_rewrite_cpu("light.a", ms(10_000));
        assert!(!set.over_cpu_share("light.a", 2));
        assert!(!set.over_cpu_share("other", 2));
        // Each window starts again, adaptive or not.
        assert!(set.end_window().is_empty());
        assert!(!set.over_cpu_share("heavy.a", 2));
    }

    /// Choices from memory, as the autopilot answers.
    struct Choices(HashMap<&'static str, &'static str>);

    impl AutoChoiceSource for Choices {
        fn auto_choice(&self, topic: &str) -> Option<Arc<str>> {
            self.0.get(topic).map(|label| Arc::from(*label))
        }
    }

    /// The cluster's answers: `pinned.*` topics set `compression.type = gzip` at topic
    /// level, `inherits.*` inherit zstd from the broker.
    struct Cluster;

    impl TopicConfigSource for Cluster {
        fn topic_compression(&self, topic: &str) -> TopicCompression {
            let (codec, source) = if topic.starts_with("pinned.") {
                (Codec::Gzip, TargetSource::Topic)
            } else if topic.starts_with("inherits.") {
                (Codec::Zstd, TargetSource::BrokerDefault)
            } else {
                return TopicCompression::Pending;
            };
            TopicCompression::Known {
                compression: kpress_batch::CompressionType::Codec(codec),
                level: Some(2),
                source,
            }
        }
    }

    const AUTO: &str = "[[topics]]\nmatch = \"fixed.*\"\ncompression.type = \"lz4\"\n\
         [[topics]]\nmatch = \"*\"\ncompression.type = \"auto\"\n\
         auto.candidates = [\"zstd:3\", \"lz4\", \"snappy\"]\n\
         recompress = \"always\"\n";

    fn auto_set(text: &str, choices: &[(&'static str, &'static str)]) -> PolicySet {
        let config = parse(&format!("{HEAD}{text}"), "t.toml").unwrap();
        PolicySet::with_sources(
            &config,
            Some(Arc::new(Cluster)),
            Some(Arc::new(Choices(choices.iter().copied().collect()))),
        )
    }

    #[test]
    fn an_auto_topic_gets_its_choice_else_the_initial_policy() {
        let set = auto_set(
            AUTO,
            &[
                ("a", "lz4:9"),
                ("gone", "gzip:6"),
                ("pinned.a", "zstd:3"),
                ("inherits.a", "snappy"),
            ],
        );
        // Undecided: the initial policy, producer by default, still only if smaller.
        let undecided = set.policy_for("b");
        assert_eq!(undecided.target, Target::Producer);
        assert!(undecided.only_if_smaller);
        assert_eq!(set.target_source("b"), TargetSource::Auto);
        assert_eq!(set.target_source("a"), TargetSource::Auto);
        assert_eq!(TargetSource::Auto.as_str(), "auto");
        // Chosen: that candidate, never growing a batch, with the rule's other settings.
        let chosen = set.policy_for("a");
        assert_eq!(target(chosen), ("lz4", Some(9)));
        assert!(chosen.only_if_smaller);
        assert_eq!(chosen.mode, kpress_batch::RecompressMode::Always);
        // A label the rule does not list (after a reload): undecided.
        assert_eq!(set.policy_for("gone").target, Target::Producer);
        // The topic's own compression.type pins it: topic mode's answer.
        assert_eq!(target(set.policy_for("pinned.a")), ("gzip", Some(2)));
        assert_eq!(set.target_source("pinned.a"), TargetSource::Topic);
        assert!(!set.auto_decides("pinned.a"));
        // A compression.type the topic inherits pins nothing.
        assert_eq!(target(set.policy_for("inherits.a")), ("snappy", None));
        assert!(set.auto_decides("inherits.a"));
        // An earlier rule naming the topic wins.
        assert_eq!(target(set.policy_for("fixed.a")), ("lz4", Some(9)));
        assert!(set.auto_rule("fixed.a").is_none());
        assert!(!set.follows_topic("fixed.a"));
        assert!(set.follows_topic("a"));
        let (index, auto) = set.auto_rule("a").expect("an auto rule");
        assert_eq!(index, 1);
        assert_eq!(auto.candidates.len(), 3);
        let rules = set.auto_rules();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].0, "*");
        // Every candidate's compressor is in use; the overload fallback is producer.
        let mut zstd3 = CompressionOptions::default();
        zstd3.set_int("compression.zstd.level", 3).unwrap();
        assert!(set.uses(Codec::Zstd, &zstd3));
        assert!(set.uses(Codec::Snappy, &CompressionOptions::default()));
        assert_eq!(set.overload_policy_for("a").target, Target::Producer);
        assert!(set.levels().iter().all(|level| level.rule != "*"));
    }

    #[test]
    fn without_a_choice_source_auto_topics_stay_on_the_initial_policy() {
        let text = AUTO.replace("recompress", "auto.initial = \"zstd:3\"\nrecompress");
        let config = parse(&format!("{HEAD}{text}"), "t.toml").unwrap();
        for set in [PolicySet::new(&config), auto_set(&text, &[])] {
            let initial = set.policy_for("a");
            assert_eq!(target(initial), ("zstd", Some(3)));
            assert!(initial.only_if_smaller);
        }
        // Chosen to pass as sent: as sent, whatever the initial policy.
        let set = auto_set(&text, &[("random", crate::AUTO_AS_SENT)]);
        assert_eq!(set.policy_for("random").target, Target::Producer);
        // Without topic configurations nothing is pinned.
        assert_eq!(
            target(PolicySet::new(&config).policy_for("pinned.a")),
            ("zstd", Some(3))
        );
        assert!(PolicySet::new(&config).auto_decides("pinned.a"));
    }

    #[test]
    fn an_auto_policy_prints_its_settings() {
        let config = parse(
            &format!("{HEAD}[defaults]\ncompression.type = \"auto\"\n"),
            "t",
        )
        .unwrap();
        assert_eq!(
            config.defaults.to_string(),
            "auto (candidates zstd:3, lz4:9, gzip:6, snappy; initial producer; objective \
             bytes; budget none; min 30 samples, margin 2%, at most 4 changes/hour), \
             recompress codec-differs, only if smaller"
        );
        let config = parse(
            &format!(
                "{HEAD}[defaults]\ncompression.type = \"auto\"\nauto.candidates = [\"lz4\"]\n\
                 auto.initial = \"lz4:1\"\nauto.objective = \"cost\"\nauto.max_cores = 1.5\n\
                 auto.margin = 0.07\noverload.compression.type = \"lz4\"\n"
            ),
            "t",
        )
        .unwrap();
        assert_eq!(
            config.defaults.to_string(),
            "auto (candidates lz4:9; initial lz4:1; objective cost (USD 0.1 per GB stored, \
             0.02 per GB moved, 0.04 per core-hour); budget 1.5 cores; min 30 samples, margin \
             7%, at most 4 changes/hour), recompress codec-differs, only if smaller, under \
             overload lz4 (compression.lz4.level=9)"
        );
    }

    #[test]
    fn trials_follow_shadow_and_every_auto_rule() {
        let parsed = |text: &str| parse(&format!("{HEAD}{text}"), "t").unwrap();
        let labels = |config: &Config| -> Vec<String> {
            let trials = config.trial_settings().expect("trials");
            trials.candidates.iter().map(ToString::to_string).collect()
        };
        // No auto rule: [shadow] as written, or none.
        assert_eq!(parsed("").trial_settings(), None);
        let shadow = parsed("[shadow]\ncandidates = [\"lz4\"]\nsample = 0.5\n");
        assert_eq!(shadow.trial_settings(), shadow.shadow);
        // Auto without [shadow]: its defaults, with the auto candidates.
        let auto = parsed(AUTO);
        assert_eq!(auto.shadow, None);
        let trials = auto.trial_settings().unwrap();
        assert_eq!(trials.sample, crate::SHADOW_SAMPLE_DEFAULT);
        assert_eq!(labels(&auto), ["zstd:3", "lz4:9", "snappy"]);
        // Both: [shadow]'s first, then each auto rule's new ones, each once.
        let both = parsed(&format!(
            "[shadow]\ncandidates = [\"lz4\", \"gzip:1\"]\nsample = 0.5\n{AUTO}\
             [defaults]\ncompression.type = \"auto\"\nauto.candidates = [\"gzip:1\", \"none\"]\n"
        ));
        assert_eq!(both.trial_settings().unwrap().sample, 0.5);
        assert_eq!(
            labels(&both),
            ["lz4:9", "gzip:1", "zstd:3", "snappy", "none"]
        );
        assert_eq!(both.shadow.unwrap().candidates.len(), 2);
    }
}
