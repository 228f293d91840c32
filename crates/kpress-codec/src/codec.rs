//! The five codecs a Kafka record batch can carry, as numbered in its attributes.

use std::fmt;
use std::str::FromStr;

/// A record batch codec, numbered as in bits 0-2 of a v2 batch's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Codec {
    /// All codecs, in attribute order.
    pub const ALL: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    /// The codec named by attribute bits 0-2, or `None` for the unassigned ids 5-7.
    pub fn from_attributes(attributes: u16) -> Option<Codec> {
        match attributes & 0x07 {
            0 => Some(Codec::None),
            1 => Some(Codec::Gzip),
            2 => Some(Codec::Snappy),
            3 => Some(Codec::Lz4),
            4 => Some(Codec::Zstd),
            _ => None,
        }
    }

    /// The codec id written into attribute bits 0-2.
    pub fn id(self) -> u16 {
        self as u16
    }

    /// Kafka's name for the codec, as used by `compression.type`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of Kafka's five codecs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown codec {0:?}: allowed are none, gzip, snappy, lz4, zstd")]
pub struct UnknownCodec(pub String);

impl FromStr for Codec {
    type Err = UnknownCodec;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Codec::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownCodec(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids_round_trip() {
        for codec in Codec::ALL {
            assert_eq!(codec.name().parse::<Codec>().unwrap(), codec);
            assert_eq!(Codec::from_attributes(codec.id()), Some(codec));
        }
        // Bit 4 (transactional) does not disturb the codec bits.
        assert_eq!(Codec::from_attributes(0x0014), Some(Codec::Zstd));
        assert_eq!(Codec::from_attributes(5), None);
        assert!("brotli".parse::<Codec>().is_err());
    }
}
