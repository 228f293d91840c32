//! Policies for unit tests that need one shape of rule set, not a policy file.

use kpress_batch::{PolicyLookup, RewritePolicy};
use kpress_codec::{Codec, CompressionOptions};

/// One policy for every topic, with another under overload.
pub(crate) struct WithFallback {
    pub(crate) normal: RewritePolicy,
    pub(crate) fallback: RewritePolicy,
}

impl WithFallback {
    /// `normal` normally, `fallback` under overload, at Kafka's default options.
    pub(crate) fn codecs(normal: Codec, fallback: Codec) -> WithFallback {
        WithFallback {
            normal: RewritePolicy::to_codec(normal, CompressionOptions::default()),
            fallback: RewritePolicy::to_codec(fallback, CompressionOptions::default()),
        }
    }
}

impl PolicyLookup for WithFallback {
    fn policy_for(&self, _topic: &str) -> &RewritePolicy {
        &self.normal
    }

    fn uses(&self, codec: Codec, options: &CompressionOptions) -> bool {
        self.normal.target.is(codec, options) || self.fallback.target.is(codec, options)
    }

    fn overload_policy_for(&self, _topic: &str) -> &RewritePolicy {
        &self.fallback
    }
}
