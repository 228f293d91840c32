//! The compiled rules: which [`RewritePolicy`] a topic gets, cached per topic name.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kpress_batch::{PassReason, PolicyLookup, RewritePolicy, Target, TargetSource};
use kpress_codec::{Codec, CompressionOptions};

use crate::settings::{Compression, Config, Limits, TopicPolicy};
use crate::topic_match::TopicPattern;
use crate::topic_mode::{TopicCompression, TopicConfigSource, TopicModePolicies};

/// Topic names remembered before the cache starts over. Far above the topic count of
/// real clusters; the bound only matters against clients inventing names.
pub const CACHE_CAPACITY: usize = 65_536;

/// Every rule of a policy file, ready for the Produce path.
#[derive(Debug)]
pub struct PolicySet {
    patterns: Vec<TopicPattern>,
    /// One per pattern, then the default policy last.
    policies: Vec<RewritePolicy>,
    /// Topic name → index into `policies`.
    cache: RwLock<HashMap<Box<str>, usize>>,
    /// Per entry of `policies`: its policies by codec and level when it follows the
    /// topic's own configuration (`compression.type = "topic"`).
    topic_mode: Vec<Option<TopicModePolicies>>,
    /// Where topic mode learns topics' configurations; without one, topic-mode topics
    /// pass as sent (counted `topic_config_unavailable`).
    topic_configs: Option<Arc<dyn TopicConfigSource>>,
}

impl std::fmt::Debug for dyn TopicConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TopicConfigSource")
    }
}

impl PolicySet {
    /// Compiles a valid [`Config`]'s `[defaults]` and `[[topics]]` with its `[limits]`,
    /// with no source of topics' own configurations: topic-mode topics pass as sent.
    pub fn new(config: &Config) -> PolicySet {
        let mut patterns = Vec::with_capacity(config.topics.len());
        let mut own = Vec::with_capacity(config.topics.len() + 1);
        for rule in &config.topics {
            patterns.push(rule.pattern.clone());
            own.push(&rule.policy);
        }
        own.push(&config.defaults);
        let policies = own
            .iter()
            .map(|p| rewrite_policy(p, &config.limits))
            .collect::<Vec<_>>();
        let topic_mode = own
            .iter()
            .zip(&policies)
            .map(|(own, compiled)| {
                (own.compression == Compression::Topic)
                    .then(|| TopicModePolicies::new(compiled, &own.options))
            })
            .collect();
        PolicySet {
            patterns,
            policies,
            cache: RwLock::new(HashMap::new()),
            topic_mode,
            topic_configs: None,
        }
    }

    /// [`new`](Self::new), with topic mode resolved from `source`.
    pub fn with_topic_configs(config: &Config, source: Arc<dyn TopicConfigSource>) -> PolicySet {
        PolicySet {
            topic_configs: Some(source),
            ..PolicySet::new(config)
        }
    }

    /// Whether some topic's policy follows the topic's own configuration.
    pub fn has_topic_mode(&self) -> bool {
        self.topic_mode.iter().any(Option::is_some)
    }

    /// Whether `topic`'s policy follows the topic's own configuration.
    pub fn follows_topic(&self, topic: &str) -> bool {
        self.topic_mode[self.policy_index(topic)].is_some()
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

impl PolicyLookup for PolicySet {
    fn policy_for(&self, topic: &str) -> &RewritePolicy {
        let index = self.policy_index(topic);
        match &self.topic_mode[index] {
            None => &self.policies[index],
            Some(mode) => mode.resolve(&self.topic_compression(topic)),
        }
    }

    fn target_source(&self, topic: &str) -> TargetSource {
        match &self.topic_mode[self.policy_index(topic)] {
            None => TargetSource::Rule,
            Some(_) => self.topic_compression(topic).source(),
        }
    }

    fn has_rule_for(&self, topic: &str) -> bool {
        self.rule_index(topic).is_some()
    }

    fn uses(&self, codec: Codec, options: &CompressionOptions) -> bool {
        self.policies
            .iter()
            .chain(self.topic_mode.iter().flatten().flat_map(|m| m.all()))
            .any(|p| p.target.is(codec, options))
    }
}

/// A file's policy with the file's limits, as the batch core takes it. A topic-mode
/// policy's target is unresolved here: [`PolicySet`] resolves it per topic.
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
