//! The policy in force, as one snapshot swapped whole on reload.

use std::fmt;
use std::sync::Arc;

use kpress_batch::PolicyLookup;
use kpress_config::ConsumerSettings;

use crate::shadow::ShadowTrials;

/// The policy in force, swapped whole: each Produce request is rewritten under its
/// rules and sampled for its shadow trials, both of the same snapshot.
#[derive(Clone)]
pub struct PolicySnapshot {
    /// Each topic's rewrite policy.
    pub rules: Arc<dyn PolicyLookup>,
    /// The shadow trials (`[shadow]`), or `None`.
    pub shadow: Option<ShadowTrials>,
    /// `[consumers]` and `[[clients]]`: how Fetch responses are re-encoded.
    pub consumers: Arc<ConsumerSettings>,
}

impl PolicySnapshot {
    /// A snapshot of `rules` with no shadow trials and `[consumers]`' defaults.
    pub fn rules_only(rules: Arc<dyn PolicyLookup>) -> PolicySnapshot {
        PolicySnapshot {
            rules,
            shadow: None,
            consumers: Arc::default(),
        }
    }
}

impl fmt::Debug for PolicySnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicySnapshot")
            .field("shadow", &self.shadow)
            .field("consumers", &self.consumers)
            .finish_non_exhaustive()
    }
}
