//! The compiled rules: which [`RewritePolicy`] a topic gets, cached per topic name.

use std::collections::HashMap;
use std::sync::RwLock;

use kpress_batch::{PolicyLookup, RewritePolicy, Target};
use kpress_codec::{Codec, CompressionOptions};

use crate::settings::{Config, Limits, TopicPolicy};
use crate::topic_match::TopicPattern;

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
}

impl PolicySet {
    /// Compiles a valid [`Config`]'s `[defaults]` and `[[topics]]` with its `[limits]`.
    pub fn new(config: &Config) -> PolicySet {
        let mut patterns = Vec::with_capacity(config.topics.len());
        let mut policies = Vec::with_capacity(config.topics.len() + 1);
        for rule in &config.topics {
            patterns.push(rule.pattern.clone());
            policies.push(rewrite_policy(&rule.policy, &config.limits));
        }
        policies.push(rewrite_policy(&config.defaults, &config.limits));
        PolicySet {
            patterns,
            policies,
            cache: RwLock::new(HashMap::new()),
        }
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
        &self.policies[self.policy_index(topic)]
    }

    fn has_rule_for(&self, topic: &str) -> bool {
        self.rule_index(topic).is_some()
    }

    fn uses(&self, codec: Codec, options: &CompressionOptions) -> bool {
        self.policies.iter().any(|p| p.target.is(codec, options))
    }
}

/// A file's policy with the file's limits, as the batch core takes it.
pub fn rewrite_policy(policy: &TopicPolicy, limits: &Limits) -> RewritePolicy {
    RewritePolicy {
        target: Target::new(policy.compression, policy.options.clone()),
        mode: policy.recompress,
        max_batch_bytes: limits.max_batch_bytes,
        max_decompressed_bytes: limits.max_decompressed_bytes,
        max_decompression_ratio: limits.max_decompression_ratio,
        only_if_smaller: policy.only_if_smaller,
    }
}
