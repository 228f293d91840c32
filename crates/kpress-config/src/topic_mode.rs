//! `compression.type = "topic"`: the codec and level a topic's own configuration names,
//! resolved to one of a rule's policies compiled in advance, so the Produce path looks
//! up a policy and never builds one.

use kpress_batch::{CompressionType, PassReason, RewritePolicy, Target, TargetSource};
use kpress_codec::options::{GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL};
use kpress_codec::{Codec, CompressionOptions};

/// What kpress knows of a topic's own `compression.type` and level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCompression {
    /// The cluster answered: the effective `compression.type`, the level of that codec
    /// (`None` when the broker has no such key: before Kafka 3.8, or `producer`), and
    /// where the `compression.type` came from.
    Known {
        compression: CompressionType,
        level: Option<i32>,
        source: TargetSource,
    },
    /// A lookup has been asked for and not answered yet.
    Pending,
    /// The broker refused kpress's principal (no `DESCRIBE_CONFIGS` on the topic).
    Denied,
    /// No answer kpress can use: a timeout, a broker without DescribeConfigs, a cache
    /// at its bound, a value kpress does not take, or no lookup at all.
    Unavailable,
}

impl TopicCompression {
    /// The `target_source` of batches under this answer.
    pub fn source(&self) -> TargetSource {
        match self {
            TopicCompression::Known { source, .. } => *source,
            _ => TargetSource::Unresolved,
        }
    }
}

/// Where topic mode learns each topic's configuration (the proxy's cache of the
/// cluster's answers). Asked once per partition of every Produce request: it must
/// answer from memory and never wait for the cluster.
pub trait TopicConfigSource: Send + Sync {
    fn topic_compression(&self, topic: &str) -> TopicCompression;
}

/// zstd levels compiled in advance: its fast negative levels down to -7, and every
/// positive level. A topic at a level outside passes as sent (the broker then stores
/// it as it always did).
const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = -7..=22;
/// gzip's levels, with -1 (the codec's default) first.
const GZIP_LEVELS: [i32; 10] = [-1, 1, 2, 3, 4, 5, 6, 7, 8, 9];
const LZ4_LEVELS: std::ops::RangeInclusive<i32> = 1..=17;

/// One topic-mode rule's policies: for every codec and level a topic may name, the
/// rule's other settings (recompress, only_if_smaller, gzip provider, buffer, block
/// and window options, limits) with that codec and level.
#[derive(Debug)]
pub struct TopicModePolicies {
    pending: RewritePolicy,
    denied: RewritePolicy,
    unavailable: RewritePolicy,
    producer: RewritePolicy,
    none: RewritePolicy,
    snappy: RewritePolicy,
    gzip: Vec<RewritePolicy>,
    lz4: Vec<RewritePolicy>,
    zstd: Vec<RewritePolicy>,
}

impl TopicModePolicies {
    /// `base` is the rule's own policy (its target is replaced), `options` its
    /// `compression.*` options (each level is replaced).
    pub fn new(base: &RewritePolicy, options: &CompressionOptions) -> TopicModePolicies {
        let with_target = |target: Target| RewritePolicy {
            target,
            ..base.clone()
        };
        let at = |codec: Codec, key: Option<&str>, level: i32| {
            let mut options = options.clone();
            if let Some(key) = key {
                // Every level listed here is within the codec's range.
                let _ = options.set_int(key, i64::from(level));
            }
            with_target(Target::Codec { codec, options })
        };
        TopicModePolicies {
            pending: with_target(Target::Unresolved(PassReason::TopicConfigPending)),
            denied: with_target(Target::Unresolved(PassReason::TopicConfigDenied)),
            unavailable: with_target(Target::Unresolved(PassReason::TopicConfigUnavailable)),
            producer: with_target(Target::Producer),
            none: at(Codec::None, None, 0),
            snappy: at(Codec::Snappy, None, 0),
            gzip: GZIP_LEVELS
                .iter()
                .map(|&l| at(Codec::Gzip, Some(GZIP_LEVEL), l))
                .collect(),
            lz4: LZ4_LEVELS
                .map(|l| at(Codec::Lz4, Some(LZ4_LEVEL), l))
                .collect(),
            zstd: ZSTD_LEVELS
                .map(|l| at(Codec::Zstd, Some(ZSTD_LEVEL), l))
                .collect(),
        }
    }

    /// The policy for what kpress knows of a topic. A level the topic does not report
    /// is the codec's Kafka default.
    pub fn resolve(&self, known: &TopicCompression) -> &RewritePolicy {
        let (compression, level) = match *known {
            TopicCompression::Known {
                compression, level, ..
            } => (compression, level),
            TopicCompression::Pending => return &self.pending,
            TopicCompression::Denied => return &self.denied,
            TopicCompression::Unavailable => return &self.unavailable,
        };
        let codec = match compression {
            CompressionType::Producer => return &self.producer,
            CompressionType::Codec(codec) => codec,
        };
        let found = match codec {
            Codec::None => Some(&self.none),
            Codec::Snappy => Some(&self.snappy),
            Codec::Gzip => {
                let level = level.unwrap_or(kpress_codec::options::GZIP_LEVEL_DEFAULT);
                GZIP_LEVELS
                    .iter()
                    .position(|&l| l == level)
                    .map(|i| &self.gzip[i])
            }
            Codec::Lz4 => {
                let level = level.unwrap_or(kpress_codec::options::LZ4_LEVEL_DEFAULT);
                index_in(&LZ4_LEVELS, level).map(|i| &self.lz4[i])
            }
            Codec::Zstd => {
                let level = level.unwrap_or(kpress_codec::options::ZSTD_LEVEL_DEFAULT);
                index_in(&ZSTD_LEVELS, level).map(|i| &self.zstd[i])
            }
        };
        found.unwrap_or(&self.unavailable)
    }

    /// Every policy here, for asking which codec settings are in use.
    pub fn all(&self) -> impl Iterator<Item = &RewritePolicy> {
        [
            &self.pending,
            &self.denied,
            &self.unavailable,
            &self.producer,
            &self.none,
            &self.snappy,
        ]
        .into_iter()
        .chain(&self.gzip)
        .chain(&self.lz4)
        .chain(&self.zstd)
    }
}

fn index_in(levels: &std::ops::RangeInclusive<i32>, level: i32) -> Option<usize> {
    levels
        .contains(&level)
        .then(|| (level - levels.start()) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_batch::RecompressMode;
    use kpress_codec::options::ZSTD_WINDOW;

    fn known(compression: &str, level: Option<i32>) -> TopicCompression {
        TopicCompression::Known {
            compression: compression.parse().unwrap(),
            level,
            source: TargetSource::Topic,
        }
    }

    fn rule() -> TopicModePolicies {
        let mut options = CompressionOptions::default();
        options.set_int(ZSTD_WINDOW, 20).unwrap();
        let base = RewritePolicy {
            mode: RecompressMode::Always,
            only_if_smaller: true,
            max_batch_bytes: 4096,
            ..RewritePolicy::default()
        };
        TopicModePolicies::new(&base, &options)
    }

    fn plain() -> TopicModePolicies {
        TopicModePolicies::new(&RewritePolicy::default(), &CompressionOptions::default())
    }

    #[test]
    fn the_topic_names_codec_and_level_and_the_rule_the_rest() {
        let set = rule();
        let zstd10 = set.resolve(&known("zstd", Some(10)));
        let Target::Codec { codec, options } = &zstd10.target else {
            panic!("{:?}", zstd10.target)
        };
        assert_eq!(*codec, Codec::Zstd);
        assert_eq!(options.get(ZSTD_LEVEL), Some(10));
        assert_eq!(options.get(ZSTD_WINDOW), Some(20));
        assert_eq!(zstd10.mode, RecompressMode::Always);
        assert!(zstd10.only_if_smaller);
        assert_eq!(zstd10.max_batch_bytes, 4096);
        let gzip1 = set.resolve(&known("gzip", Some(1)));
        let mut gzip_options = CompressionOptions::default();
        gzip_options.set_int(ZSTD_WINDOW, 20).unwrap();
        gzip_options.set_int(GZIP_LEVEL, 1).unwrap();
        assert!(gzip1.target.is(Codec::Gzip, &gzip_options));
        let lz4 = set.resolve(&known("lz4", Some(17)));
        assert_eq!(lz4.target.name(), "lz4");
        let Target::Codec { options, .. } = &lz4.target else {
            unreachable!()
        };
        assert_eq!(options.get(LZ4_LEVEL), Some(17));
    }

    #[test]
    fn an_unreported_level_is_the_codecs_kafka_default() {
        let set = plain();
        for (codec, key, default) in [
            ("zstd", ZSTD_LEVEL, 3),
            ("lz4", LZ4_LEVEL, 9),
            ("gzip", GZIP_LEVEL, -1),
        ] {
            let Target::Codec { options, .. } = &set.resolve(&known(codec, None)).target else {
                panic!("{codec}")
            };
            assert_eq!(options.get(key), Some(default), "{codec}");
        }
    }

    #[test]
    fn producer_uncompressed_and_unknowns() {
        let set = plain();
        assert_eq!(
            set.resolve(&known("producer", None)).target,
            Target::Producer
        );
        let none = set.resolve(&known("uncompressed", None));
        assert_eq!(none.target.name(), "none");
        for (answer, reason) in [
            (TopicCompression::Pending, PassReason::TopicConfigPending),
            (TopicCompression::Denied, PassReason::TopicConfigDenied),
            (
                TopicCompression::Unavailable,
                PassReason::TopicConfigUnavailable,
            ),
            // Outside the levels compiled in advance: as sent, counted.
            (
                known("zstd", Some(-100)),
                PassReason::TopicConfigUnavailable,
            ),
            (known("lz4", Some(40)), PassReason::TopicConfigUnavailable),
        ] {
            assert_eq!(set.resolve(&answer).target, Target::Unresolved(reason));
        }
        assert_eq!(TopicCompression::Pending.source(), TargetSource::Unresolved);
        assert_eq!(known("zstd", None).source(), TargetSource::Topic);
        // 6 fixed, 10 gzip, 17 lz4, 30 zstd levels.
        assert_eq!(set.all().count(), 63);
    }
}
