//! What a rewrite should produce for one topic: target codec, mode and limits.

use kpress_codec::{Codec, CompressionOptions};
use std::fmt;

use crate::stats::PassReason;
use std::str::FromStr;

/// Kafka's `max.message.bytes` default: 1 MiB plus the 12-byte log overhead.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 1_048_588;
/// 64 x Kafka's 1 MiB `message.max.bytes`: a batch inflating past this is refused.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

/// 1000: a batch whose records would inflate more than this many times their
/// compressed size passes through. Real producer data stays far below it (the
/// datasets reach about 30x in zstd); bombs reach it after a few KiB of input.
pub const DEFAULT_MAX_DECOMPRESSION_RATIO: usize = 1000;

/// A `compression.type` value, with Kafka's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionType {
    /// `producer`: keep whatever the producer sent.
    Producer,
    /// A codec; `none` (the producer's name) and `uncompressed` (the topic's) are
    /// both [`Codec::None`].
    Codec(Codec),
}

impl CompressionType {
    /// The values [`FromStr`] accepts, for error messages.
    pub const ALLOWED: &'static str = "producer, none (or uncompressed), gzip, snappy, lz4, zstd";

    /// `producer` or the codec's name.
    pub fn name(self) -> &'static str {
        match self {
            CompressionType::Producer => "producer",
            CompressionType::Codec(codec) => codec.name(),
        }
    }
}

impl fmt::Display for CompressionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses Kafka's `compression.type` names: lower case, as Kafka requires.
impl FromStr for CompressionType {
    type Err = UnknownTarget;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "producer" => CompressionType::Producer,
            "none" | "uncompressed" => CompressionType::Codec(Codec::None),
            "gzip" => CompressionType::Codec(Codec::Gzip),
            "snappy" => CompressionType::Codec(Codec::Snappy),
            "lz4" => CompressionType::Codec(Codec::Lz4),
            "zstd" => CompressionType::Codec(Codec::Zstd),
            _ => return Err(UnknownTarget(s.to_owned())),
        })
    }
}

/// The codec batches should end up in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Keep whatever the producer sent (Kafka's `compression.type=producer`).
    Producer,
    /// Recompress into `codec` with `options`.
    Codec {
        codec: Codec,
        options: CompressionOptions,
    },
    /// The target is not known (the topic's own configuration was not learned yet, or
    /// cannot be): batches pass as sent, counted under the reason.
    Unresolved(PassReason),
}

impl Target {
    /// Whether this target compresses into `codec` with `options`.
    pub fn is(&self, codec: Codec, options: &CompressionOptions) -> bool {
        matches!(self, Target::Codec { codec: c, options: o } if *c == codec && o == options)
    }

    /// The target for a `compression.type` and the codec's options.
    pub fn new(compression: CompressionType, options: CompressionOptions) -> Target {
        match compression {
            CompressionType::Producer => Target::Producer,
            CompressionType::Codec(codec) => Target::Codec { codec, options },
        }
    }

    /// The target for a `compression.type` value (see [`CompressionType`]).
    pub fn from_name(name: &str, options: CompressionOptions) -> Result<Target, UnknownTarget> {
        Ok(Target::new(name.parse()?, options))
    }

    /// `producer`, the codec's name, or the reason an unresolved target passes.
    pub fn name(&self) -> &'static str {
        match self {
            Target::Producer => "producer",
            Target::Codec { codec, .. } => codec.name(),
            Target::Unresolved(reason) => reason.as_str(),
        }
    }

    /// Whether batches pass as sent without looking past their header.
    pub fn keeps_batches(&self) -> bool {
        matches!(self, Target::Producer | Target::Unresolved(_))
    }
}

/// A `compression.type` value that is neither `producer` nor a codec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compression type {0:?}: allowed are {allowed}", allowed = CompressionType::ALLOWED)]
pub struct UnknownTarget(pub String);

/// When a batch already in the target codec is re-encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecompressMode {
    /// Only batches in another codec are rewritten, as the broker does (`codec-differs`).
    #[default]
    CodecDiffers,
    /// Same-codec batches are re-encoded too, at the target's settings (`always`).
    Always,
}

impl RecompressMode {
    pub fn name(self) -> &'static str {
        match self {
            RecompressMode::CodecDiffers => "codec-differs",
            RecompressMode::Always => "always",
        }
    }
}

impl fmt::Display for RecompressMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A recompress mode name other than `codec-differs` or `always`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown recompress mode {0:?}: allowed are codec-differs, always")]
pub struct UnknownMode(pub String);

impl FromStr for RecompressMode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [RecompressMode::CodecDiffers, RecompressMode::Always]
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownMode(s.to_owned()))
    }
}

/// How to rewrite the batches of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewritePolicy {
    pub target: Target,
    pub mode: RecompressMode,
    /// Largest batch (all bytes, as `max.message.bytes` counts) a rewrite may produce.
    pub max_batch_bytes: usize,
    /// Most bytes a batch's records may decompress to before it is passed through.
    pub max_decompressed_bytes: usize,
    /// A batch whose records would inflate more than this many times their
    /// compressed size passes through.
    pub max_decompression_ratio: usize,
    /// Keep the original when the rewrite is not smaller than it (`not_smaller`).
    /// Off by default: like Kafka's topic `compression.type`, the policy's codec is
    /// stored whatever its size (it may have been chosen for CPU, not size), limited
    /// only by `max_batch_bytes`. A target of `none` is never held to it.
    pub only_if_smaller: bool,
}

impl Default for RewritePolicy {
    fn default() -> Self {
        RewritePolicy {
            target: Target::Producer,
            mode: RecompressMode::default(),
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            max_decompressed_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES,
            max_decompression_ratio: DEFAULT_MAX_DECOMPRESSION_RATIO,
            only_if_smaller: false,
        }
    }
}

impl RewritePolicy {
    /// The default policy with `codec` at `options` as target.
    pub fn to_codec(codec: Codec, options: CompressionOptions) -> RewritePolicy {
        RewritePolicy {
            target: Target::Codec { codec, options },
            ..RewritePolicy::default()
        }
    }
}

/// Where a topic's target codec came from, for the `target_source` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetSource {
    /// A policy rule (or `[defaults]`) names the codec.
    Rule,
    /// The topic's own `compression.type`.
    Topic,
    /// A broker's configuration (dynamic, dynamic default or static) the topic inherits.
    BrokerDefault,
    /// Kafka's built-in default the topic inherits.
    Default,
    /// Topic mode, but the topic's configuration is not known (pending or failed).
    Unresolved,
    /// `compression.type = "auto"`: the autopilot's choice for the topic, or the rule's
    /// initial policy while it has none.
    Auto,
}

impl TargetSource {
    pub const ALL: [TargetSource; 6] = [
        TargetSource::Rule,
        TargetSource::Topic,
        TargetSource::BrokerDefault,
        TargetSource::Default,
        TargetSource::Unresolved,
        TargetSource::Auto,
    ];

    /// snake_case label for metrics and `/policy`.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetSource::Rule => "rule",
            TargetSource::Topic => "topic",
            TargetSource::BrokerDefault => "broker_default",
            TargetSource::Default => "default",
            TargetSource::Unresolved => "unresolved",
            TargetSource::Auto => "auto",
        }
    }
}

impl fmt::Display for TargetSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Finds the policy of a topic; the proxy asks it once per topic per Produce request.
pub trait PolicyLookup: Send + Sync {
    fn policy_for(&self, topic: &str) -> &RewritePolicy;

    /// Whether a rule names `topic` (rather than the defaults covering it): such
    /// topics get metric labels of their own.
    fn has_rule_for(&self, topic: &str) -> bool {
        let _ = topic;
        false
    }

    /// Whether some topic's policy compresses into `codec` with `options`: compressors
    /// for settings no policy uses any more can be dropped.
    fn uses(&self, codec: Codec, options: &CompressionOptions) -> bool;

    /// Where `topic`'s target comes from: a rule unless the policy follows the
    /// topic's own configuration.
    fn target_source(&self, topic: &str) -> TargetSource {
        let _ = topic;
        TargetSource::Rule
    }

    /// The policy of `topic` under overload: what its batches become when their
    /// rewrite could not start in time (a cheaper setting). Unless a rule says
    /// otherwise, they pass as sent.
    fn overload_policy_for(&self, topic: &str) -> &RewritePolicy {
        let _ = topic;
        pass_as_sent()
    }

    /// Notes that a rewrite of `topic`'s batches waited `waited` for its work slot, or
    /// gave up waiting (`missed`): what policies that adapt to load go by.
    fn note_wait(&self, topic: &str, waited: std::time::Duration, missed: bool) {
        let _ = (topic, waited, missed);
    }

    /// Notes the thread CPU time the rewrite of `topic`'s batches in one request took:
    /// what a cap on a policy's share of rewrite CPU counts.
    fn note_rewrite_cpu(&self, topic: &str, cpu: std::time::Duration) {
        let _ = (topic, cpu);
    }

    /// Whether `topic`'s policy has spent its share of the rewrite CPU of `slots` work
    /// slots in the current window: its requests then take the overload policy
    /// without waiting for a slot.
    fn over_cpu_share(&self, topic: &str, slots: usize) -> bool {
        let _ = (topic, slots);
        false
    }
}

/// The policy that keeps every batch as sent.
pub fn pass_as_sent() -> &'static RewritePolicy {
    static PASS: std::sync::OnceLock<RewritePolicy> = std::sync::OnceLock::new();
    PASS.get_or_init(RewritePolicy::default)
}

/// One policy for every topic.
impl PolicyLookup for RewritePolicy {
    fn policy_for(&self, _topic: &str) -> &RewritePolicy {
        self
    }

    fn uses(&self, codec: Codec, options: &CompressionOptions) -> bool {
        self.target.is(codec, options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!(
            Target::from_name("producer", CompressionOptions::default()),
            Ok(Target::Producer)
        );
        assert_eq!(
            Target::from_name("zstd", CompressionOptions::default())
                .unwrap()
                .name(),
            "zstd"
        );
        // Kafka's names are lower case; the producer's `none` and the topic's
        // `uncompressed` both mean no codec.
        assert!(Target::from_name("ZSTD", CompressionOptions::default()).is_err());
        for name in ["none", "uncompressed"] {
            assert_eq!(
                name.parse::<CompressionType>(),
                Ok(CompressionType::Codec(Codec::None))
            );
        }
        let err = Target::from_name("brotli", CompressionOptions::default()).unwrap_err();
        assert!(err.to_string().contains("producer, none"));
        assert_eq!("always".parse(), Ok(RecompressMode::Always));
        assert_eq!("codec-differs".parse(), Ok(RecompressMode::CodecDiffers));
        assert!("sometimes".parse::<RecompressMode>().is_err());
        let p = RewritePolicy::default();
        assert_eq!(p.target, Target::Producer);
        assert_eq!(p.max_batch_bytes, 1_048_588);
        assert_eq!(p.max_decompressed_bytes, 64 * 1024 * 1024);
        assert!(!p.only_if_smaller);
        assert_eq!(p.policy_for("any").target, Target::Producer);
    }
}
