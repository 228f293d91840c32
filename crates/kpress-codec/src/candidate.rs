//! A codec with its options in one short spec, as `kpress bench`, `kpress advise` and the
//! proxy's `[shadow] candidates` name them: `zstd:3`, `gzip:6:libdeflate`, `lz4:9:block=7`,
//! `zstd:3:window=22`, `snappy:block=65536`, `none`.
//!
//! After the codec come parts separated by `:`: a bare integer is the codec's level
//! (`compression.<codec>.level`), a bare provider name is gzip's
//! `compression.gzip.provider`, and `name=value` sets the codec's option `name`
//! (`level`, `buffer`, `block`, `window`, `provider`). Every value is checked against
//! Kafka's range as the policy file's keys are.

use std::fmt;
use std::str::FromStr;

use crate::options::{
    GZIP_BUFFER, GZIP_LEVEL, GZIP_PROVIDER, LZ4_BLOCK, LZ4_LEVEL, SNAPPY_BLOCK, ZSTD_LEVEL,
    ZSTD_WINDOW,
};
use crate::{Codec, CompressionOptions, OptionError};

/// A codec and the options it writes with, parsed from (and printed as) a spec.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Candidate {
    codec: Codec,
    options: CompressionOptions,
    /// The option keys the spec set, in the order [`Candidate::keys`] lists them.
    set: Vec<&'static str>,
}

/// A spec that does not name a codec with options kpress can write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CandidateError {
    #[error("empty compression spec: expected e.g. \"zstd:3\" or \"gzip:6:libdeflate\"")]
    Empty,
    #[error("{spec:?}: unknown codec {codec:?}: allowed are none, gzip, snappy, lz4, zstd")]
    UnknownCodec { spec: String, codec: String },
    #[error("{spec:?}: {codec} has no option {part:?}: it takes {allowed}")]
    NotForCodec {
        spec: String,
        codec: Codec,
        part: String,
        allowed: &'static str,
    },
    #[error("{spec:?}: {key} is given twice")]
    Repeated { spec: String, key: &'static str },
    #[error("{spec:?}: {source}")]
    Option {
        spec: String,
        #[source]
        source: OptionError,
    },
}

impl Candidate {
    /// `codec` with Kafka's default options.
    pub fn new(codec: Codec) -> Candidate {
        Candidate {
            codec,
            options: CompressionOptions::default(),
            set: Vec::new(),
        }
    }

    /// `codec` with `options`, naming in its spec every option of the codec that differs
    /// from Kafka's default (and always the level of a codec that has one).
    pub fn from_options(codec: Codec, options: &CompressionOptions) -> Candidate {
        let defaults = CompressionOptions::default();
        let mut options = options.clone();
        resolve_gzip_default_level(&mut options);
        let set = Candidate::keys(codec)
            .iter()
            .copied()
            .filter(|&key| {
                key == level_key(codec).unwrap_or("")
                    || options.get_text(key) != defaults.get_text(key)
            })
            .collect();
        Candidate {
            codec,
            options,
            set,
        }
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// The options to compress with (Kafka's defaults for every key the spec left out).
    pub fn options(&self) -> &CompressionOptions {
        &self.options
    }

    /// The options the spec names, as Kafka property names and values, e.g.
    /// `[("compression.zstd.level", "3")]`: what a policy rule needs to write this.
    pub fn properties(&self) -> Vec<(&'static str, String)> {
        self.set
            .iter()
            .filter_map(|&key| self.options.get_text(key).map(|value| (key, value)))
            .collect()
    }

    /// The option keys `codec` reads, in spec order.
    pub fn keys(codec: Codec) -> &'static [&'static str] {
        match codec {
            Codec::None => &[],
            Codec::Gzip => &[GZIP_LEVEL, GZIP_PROVIDER, GZIP_BUFFER],
            Codec::Snappy => &[SNAPPY_BLOCK],
            Codec::Lz4 => &[LZ4_LEVEL, LZ4_BLOCK],
            Codec::Zstd => &[ZSTD_LEVEL, ZSTD_WINDOW],
        }
    }
}

/// `compression.<codec>.level`, for the codecs that have one.
fn level_key(codec: Codec) -> Option<&'static str> {
    match codec {
        Codec::Gzip => Some(GZIP_LEVEL),
        Codec::Lz4 => Some(LZ4_LEVEL),
        Codec::Zstd => Some(ZSTD_LEVEL),
        Codec::None | Codec::Snappy => None,
    }
}

/// Kafka's gzip level -1 is zlib's default, 6: stored as 6, so `gzip` and `gzip:6`
/// are one candidate.
fn resolve_gzip_default_level(options: &mut CompressionOptions) {
    if options.gzip_level() < 0 {
        let level = options.gzip_effective_level();
        options
            .set_int(GZIP_LEVEL, level.into())
            .expect("zlib's default level is within Kafka's range");
    }
}

/// The short name of an option in a spec: the last part of its Kafka property name.
fn short_name(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

fn allowed_parts(codec: Codec) -> &'static str {
    match codec {
        Codec::None => "no options",
        Codec::Gzip => {
            "a level, a provider (auto, qat, isal, libdeflate, zlib), level=, provider=, buffer="
        }
        Codec::Snappy => "block=",
        Codec::Lz4 => "a level, level=, block=",
        Codec::Zstd => "a level, level=, window=",
    }
}

impl FromStr for Candidate {
    type Err = CandidateError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut parts = spec.trim().split(':').map(str::trim);
        let codec_name = parts.next().filter(|s| !s.is_empty());
        let Some(codec_name) = codec_name else {
            return Err(CandidateError::Empty);
        };
        let codec: Codec = match codec_name {
            "uncompressed" => Codec::None,
            name => name.parse().map_err(|_| CandidateError::UnknownCodec {
                spec: spec.to_owned(),
                codec: name.to_owned(),
            })?,
        };
        let mut candidate = Candidate::new(codec);
        for part in parts {
            let not_for_codec = || CandidateError::NotForCodec {
                spec: spec.to_owned(),
                codec,
                part: part.to_owned(),
                allowed: allowed_parts(codec),
            };
            let (key, value) = match part.split_once('=') {
                Some((name, value)) => {
                    let key = Candidate::keys(codec)
                        .iter()
                        .copied()
                        .find(|key| short_name(key) == name.trim())
                        .ok_or_else(not_for_codec)?;
                    (key, value.trim())
                }
                None if part.parse::<i64>().is_ok() => {
                    (level_key(codec).ok_or_else(not_for_codec)?, part)
                }
                None if codec == Codec::Gzip => (GZIP_PROVIDER, part),
                None => return Err(not_for_codec()),
            };
            if candidate.set.contains(&key) {
                return Err(CandidateError::Repeated {
                    spec: spec.to_owned(),
                    key,
                });
            }
            candidate
                .options
                .set(key, value)
                .map_err(|source| CandidateError::Option {
                    spec: spec.to_owned(),
                    source,
                })?;
            candidate.set.push(key);
        }
        resolve_gzip_default_level(&mut candidate.options);
        // The level is always named, so equal candidates print equal specs.
        if let Some(level) = level_key(codec) {
            if !candidate.set.contains(&level) {
                candidate.set.push(level);
            }
        }
        let order = Candidate::keys(codec);
        candidate
            .set
            .sort_by_key(|key| order.iter().position(|k| k == key));
        Ok(candidate)
    }
}

impl fmt::Display for Candidate {
    /// The canonical spec: codec, level, then gzip's provider, then `name=value` options.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.codec.name())?;
        for (key, value) in self.properties() {
            // The level and gzip's provider are bare parts; the others are named.
            if Some(key) == level_key(self.codec) || key == GZIP_PROVIDER {
                write!(f, ":{value}")?;
            } else {
                write!(f, ":{}={value}", short_name(key))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> Candidate {
        spec.parse().unwrap_or_else(|e| panic!("{spec}: {e}"))
    }

    #[test]
    fn specs_round_trip_in_canonical_form() {
        for (spec, canonical) in [
            ("zstd:3", "zstd:3"),
            ("zstd", "zstd:3"),
            ("zstd:-5:window=22", "zstd:-5:window=22"),
            ("zstd:window=22:level=19", "zstd:19:window=22"),
            ("gzip:6:libdeflate", "gzip:6:libdeflate"),
            ("gzip:zlib:1", "gzip:1:zlib"),
            ("gzip", "gzip:6"),
            ("lz4:9", "lz4:9"),
            ("lz4:17:block=7", "lz4:17:block=7"),
            ("snappy", "snappy"),
            ("snappy:block=4096", "snappy:block=4096"),
            ("none", "none"),
            ("uncompressed", "none"),
        ] {
            let candidate = parse(spec);
            assert_eq!(candidate.to_string(), canonical, "{spec}");
            assert_eq!(parse(canonical), candidate, "{spec}");
        }
    }

    #[test]
    fn options_are_those_of_the_spec() {
        let c = parse("gzip:9:libdeflate");
        assert_eq!(c.codec(), Codec::Gzip);
        assert_eq!(c.options().gzip_level(), 9);
        assert_eq!(
            c.properties(),
            vec![
                (GZIP_LEVEL, "9".to_owned()),
                (GZIP_PROVIDER, "libdeflate".to_owned())
            ]
        );
        let c = parse("zstd:1:window=20");
        assert_eq!(c.options().zstd_level(), 1);
        assert_eq!(c.options().zstd_window(), 20);
    }

    #[test]
    fn from_options_names_what_differs_from_kafka_defaults() {
        let mut options = CompressionOptions::default();
        options.set(ZSTD_WINDOW, "22").unwrap();
        options.set(LZ4_LEVEL, "12").unwrap();
        assert_eq!(
            Candidate::from_options(Codec::Zstd, &options).to_string(),
            "zstd:3:window=22"
        );
        assert_eq!(
            Candidate::from_options(Codec::Lz4, &options).to_string(),
            "lz4:12"
        );
        assert_eq!(
            Candidate::from_options(Codec::Snappy, &options).to_string(),
            "snappy"
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        assert_eq!("".parse::<Candidate>(), Err(CandidateError::Empty));
        for (spec, says) in [
            ("brotli:3", "unknown codec \"brotli\""),
            ("snappy:3", "snappy has no option \"3\""),
            ("none:1", "none has no option \"1\""),
            ("zstd:fast", "zstd has no option \"fast\""),
            ("lz4:window=22", "lz4 has no option \"window=22\""),
            ("zstd:23", "compression.zstd.level = 23 is out of range"),
            ("gzip:0", "compression.gzip.level = 0 is out of range"),
            (
                "gzip:6:brotli",
                "compression.gzip.provider = \"brotli\" is not allowed",
            ),
            ("zstd:3:level=4", "compression.zstd.level is given twice"),
            ("lz4:block=9", "compression.lz4.block = 9 is out of range"),
        ] {
            let err = spec.parse::<Candidate>().expect_err(spec).to_string();
            assert!(err.contains(says), "{spec}: {err}");
            assert!(err.starts_with(&format!("{spec:?}")), "{spec}: {err}");
        }
    }
}
