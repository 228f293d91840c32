//! Compression options under Kafka's property names: KIP-390's levels (shipped in
//! Kafka 3.8) and KIP-780's buffer, block and window options.

use std::fmt;

use kpress_deflate::{ProviderChoice, Registry};

/// Kafka's default gzip level: -1 means zlib's default, level 6.
pub const GZIP_LEVEL_DEFAULT: i32 = -1;
/// Kafka's default lz4 level: 9 selects the fast compressor, every other level LZ4 HC.
pub const LZ4_LEVEL_DEFAULT: i32 = 9;
/// Kafka's default zstd level.
pub const ZSTD_LEVEL_DEFAULT: i32 = 3;
/// Java's `GZIPOutputStream` buffer in Kafka's producer.
pub const GZIP_BUFFER_DEFAULT: usize = 8192;
/// xerial snappy-java's block (chunk) size.
pub const SNAPPY_BLOCK_DEFAULT: usize = 32 * 1024;
/// LZ4 frame block size code 4 = 64 KiB, Kafka's choice.
pub const LZ4_BLOCK_DEFAULT: u8 = 4;
/// zstd window log 0 = long-distance mode off, the library picks the window.
pub const ZSTD_WINDOW_DEFAULT: u8 = 0;

/// Every option key this crate accepts, in the order operators meet them.
pub const OPTION_KEYS: [&str; 7] = [
    GZIP_LEVEL,
    GZIP_BUFFER,
    SNAPPY_BLOCK,
    LZ4_LEVEL,
    LZ4_BLOCK,
    ZSTD_LEVEL,
    ZSTD_WINDOW,
];

pub const GZIP_LEVEL: &str = "compression.gzip.level";
pub const GZIP_BUFFER: &str = "compression.gzip.buffer";
pub const SNAPPY_BLOCK: &str = "compression.snappy.block";
pub const LZ4_LEVEL: &str = "compression.lz4.level";
pub const LZ4_BLOCK: &str = "compression.lz4.block";
pub const ZSTD_LEVEL: &str = "compression.zstd.level";
pub const ZSTD_WINDOW: &str = "compression.zstd.window";
/// KIP-1121's `compression.gzip.provider`: which deflate implementation writes and
/// reads gzip (see `kpress-deflate`). Its value is a name, not an integer.
pub const GZIP_PROVIDER: &str = "compression.gzip.provider";
/// Options whose values are names rather than integers.
pub const TEXT_OPTION_KEYS: [&str; 1] = [GZIP_PROVIDER];
/// The values `compression.gzip.provider` accepts.
pub const GZIP_PROVIDER_VALUES: &str = "auto, qat, isal, libdeflate, zlib";

/// Settings for every codec at once; a compressor reads the ones of its own codec.
///
/// Construct with [`Default`] (Kafka's defaults) and change keys with [`set`](Self::set),
/// which checks Kafka's ranges.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompressionOptions {
    gzip_level: i32,
    gzip_buffer: usize,
    snappy_block: usize,
    lz4_level: i32,
    lz4_block: u8,
    zstd_level: i32,
    zstd_window: u8,
    gzip_provider: ProviderChoice,
}

impl Default for CompressionOptions {
    fn default() -> Self {
        CompressionOptions {
            gzip_level: GZIP_LEVEL_DEFAULT,
            gzip_buffer: GZIP_BUFFER_DEFAULT,
            snappy_block: SNAPPY_BLOCK_DEFAULT,
            lz4_level: LZ4_LEVEL_DEFAULT,
            lz4_block: LZ4_BLOCK_DEFAULT,
            zstd_level: ZSTD_LEVEL_DEFAULT,
            zstd_window: ZSTD_WINDOW_DEFAULT,
            gzip_provider: ProviderChoice::Default,
        }
    }
}

/// An option that cannot be set: unknown key, not a number, out of Kafka's range, not
/// one of the names allowed, or a provider this host does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("unknown compression option {key:?}: known options are {}, {}", OPTION_KEYS.join(", "), TEXT_OPTION_KEYS.join(", "))]
    UnknownKey { key: String },
    #[error("{key} = {value:?} is not an integer: allowed {allowed}")]
    NotAnInteger {
        key: &'static str,
        value: String,
        allowed: Allowed,
    },
    #[error("{key} = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        key: &'static str,
        value: i64,
        allowed: Allowed,
    },
    #[error("{key} = {value:?} is not allowed: allowed {allowed}")]
    NotAllowed {
        key: &'static str,
        value: String,
        allowed: &'static str,
    },
    /// A provider named explicitly that this host cannot run: an error when the
    /// option is set (configuration, start), never a silent substitute.
    #[error("{key} = {value:?} cannot be used on this host: {reason}")]
    Unavailable {
        key: &'static str,
        value: String,
        reason: String,
    },
}

impl OptionError {
    /// The option key the error is about, as the operator wrote it.
    pub fn key(&self) -> &str {
        match self {
            OptionError::UnknownKey { key } => key,
            OptionError::NotAnInteger { key, .. }
            | OptionError::OutOfRange { key, .. }
            | OptionError::NotAllowed { key, .. }
            | OptionError::Unavailable { key, .. } => key,
        }
    }
}

/// The allowed values of an option, printable for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// Any integer in `min..=max`.
    Range { min: i64, max: i64 },
    /// `-1` (the library default) or `min..=max`.
    DefaultOrRange { default: i64, min: i64, max: i64 },
    /// At least `min`, up to what fits in memory.
    AtLeast { min: i64 },
    /// `0` (off) or `min..=max`.
    OffOrRange { min: i64, max: i64 },
}

impl Allowed {
    fn contains(self, v: i64) -> bool {
        match self {
            Allowed::Range { min, max } => (min..=max).contains(&v),
            Allowed::DefaultOrRange { default, min, max } => {
                v == default || (min..=max).contains(&v)
            }
            // Beyond 1 GiB a buffer or block is a typo, not a tuning choice.
            Allowed::AtLeast { min } => (min..=1 << 30).contains(&v),
            Allowed::OffOrRange { min, max } => v == 0 || (min..=max).contains(&v),
        }
    }
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Allowed::Range { min, max } => write!(f, "{min}..{max}"),
            Allowed::DefaultOrRange { default, min, max } => {
                write!(f, "{default} (default) or {min}..{max}")
            }
            Allowed::AtLeast { min } => write!(f, "{min}..{}", 1 << 30),
            Allowed::OffOrRange { min, max } => write!(f, "0 (off) or {min}..{max}"),
        }
    }
}

/// The allowed values of `key`, or `None` for an unknown key.
pub fn allowed_values(key: &str) -> Option<Allowed> {
    Some(match key {
        GZIP_LEVEL => Allowed::DefaultOrRange {
            default: -1,
            min: 1,
            max: 9,
        },
        GZIP_BUFFER => Allowed::AtLeast { min: 512 },
        SNAPPY_BLOCK => Allowed::AtLeast { min: 1024 },
        LZ4_LEVEL => Allowed::Range { min: 1, max: 17 },
        LZ4_BLOCK => Allowed::Range { min: 4, max: 7 },
        ZSTD_LEVEL => Allowed::Range {
            min: -131072,
            max: 22,
        },
        ZSTD_WINDOW => Allowed::OffOrRange { min: 10, max: 22 },
        _ => return None,
    })
}

impl CompressionOptions {
    /// Sets one option from its textual value, checking Kafka's range for it (or, for
    /// `compression.gzip.provider`, the name and that this host has the provider).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        if key == GZIP_PROVIDER {
            return self.set_gzip_provider(value);
        }
        let (key, allowed) = canonical(key)?;
        let parsed: i64 = value
            .trim()
            .parse()
            .map_err(|_| OptionError::NotAnInteger {
                key,
                value: value.to_owned(),
                allowed,
            })?;
        self.set_int(key, parsed)
    }

    /// Sets one option from an integer value, checking Kafka's range for it.
    pub fn set_int(&mut self, key: &str, value: i64) -> Result<(), OptionError> {
        if key == GZIP_PROVIDER {
            return Err(OptionError::NotAllowed {
                key: GZIP_PROVIDER,
                value: value.to_string(),
                allowed: GZIP_PROVIDER_VALUES,
            });
        }
        let (key, allowed) = canonical(key)?;
        if !allowed.contains(value) {
            return Err(OptionError::OutOfRange {
                key,
                value,
                allowed,
            });
        }
        // In range means it fits the field: every range above is within i32 and usize.
        match key {
            GZIP_LEVEL => self.gzip_level = value as i32,
            GZIP_BUFFER => self.gzip_buffer = value as usize,
            SNAPPY_BLOCK => self.snappy_block = value as usize,
            LZ4_LEVEL => self.lz4_level = value as i32,
            LZ4_BLOCK => self.lz4_block = value as u8,
            ZSTD_LEVEL => self.zstd_level = value as i32,
            ZSTD_WINDOW => self.zstd_window = value as u8,
            _ => unreachable!("canonical() returned a key without a field"),
        }
        Ok(())
    }

    /// `compression.gzip.provider`: a provider name or `auto`. The provider must be
    /// available on this host (`kpress_deflate::Registry::global`), so a missing
    /// one is reported here, when the configuration is read.
    pub fn set_gzip_provider(&mut self, value: &str) -> Result<(), OptionError> {
        let choice: ProviderChoice = value.parse().map_err(|_| OptionError::NotAllowed {
            key: GZIP_PROVIDER,
            value: value.to_owned(),
            allowed: GZIP_PROVIDER_VALUES,
        })?;
        Registry::global()
            .resolve(choice)
            .map_err(|e| OptionError::Unavailable {
                key: GZIP_PROVIDER,
                value: value.to_owned(),
                reason: e.to_string(),
            })?;
        self.gzip_provider = choice;
        Ok(())
    }

    /// `compression.gzip.provider`; [`ProviderChoice::Default`] (zlib) when not set.
    pub fn gzip_provider(&self) -> ProviderChoice {
        self.gzip_provider
    }

    /// The value of any option as text, as `set` would accept it back.
    pub fn get_text(&self, key: &str) -> Option<String> {
        match key {
            GZIP_PROVIDER => Some(self.gzip_provider.name().to_owned()),
            _ => self.get(key).map(|v| v.to_string()),
        }
    }

    /// The value of one integer option, as `set` would accept it back.
    pub fn get(&self, key: &str) -> Option<i64> {
        Some(match key {
            GZIP_LEVEL => self.gzip_level.into(),
            GZIP_BUFFER => self.gzip_buffer as i64,
            SNAPPY_BLOCK => self.snappy_block as i64,
            LZ4_LEVEL => self.lz4_level.into(),
            LZ4_BLOCK => self.lz4_block.into(),
            ZSTD_LEVEL => self.zstd_level.into(),
            ZSTD_WINDOW => self.zstd_window.into(),
            _ => return None,
        })
    }

    /// `compression.gzip.level`: -1 (zlib's default, 6) or 1-9.
    pub fn gzip_level(&self) -> i32 {
        self.gzip_level
    }

    /// The gzip level with Kafka's -1 resolved to zlib's default, 6.
    pub fn gzip_effective_level(&self) -> u32 {
        if self.gzip_level < 0 {
            6
        } else {
            self.gzip_level as u32
        }
    }

    /// `compression.gzip.buffer` (KIP-780): accepted and kept; gzip output does not
    /// depend on it, since every provider deflates a batch in one call with room for
    /// all of it (zlib-rs's stream would otherwise depend on the room per call).
    pub fn gzip_buffer(&self) -> usize {
        self.gzip_buffer
    }

    /// `compression.snappy.block`: uncompressed bytes per xerial chunk.
    pub fn snappy_block(&self) -> usize {
        self.snappy_block
    }

    /// `compression.lz4.level`: 9 = fast compressor, any other = LZ4 HC at that level.
    pub fn lz4_level(&self) -> i32 {
        self.lz4_level
    }

    /// `compression.lz4.block`: LZ4 frame block size code, 4..=7.
    pub fn lz4_block(&self) -> u8 {
        self.lz4_block
    }

    /// The LZ4 block size in bytes for the block code: 64 KiB, 256 KiB, 1 MiB or 4 MiB.
    pub fn lz4_block_bytes(&self) -> usize {
        1 << (8 + 2 * usize::from(self.lz4_block))
    }

    /// `compression.zstd.level`.
    pub fn zstd_level(&self) -> i32 {
        self.zstd_level
    }

    /// `compression.zstd.window`: 0 (long mode off) or the window log 10..=22.
    pub fn zstd_window(&self) -> u8 {
        self.zstd_window
    }
}

fn canonical(key: &str) -> Result<(&'static str, Allowed), OptionError> {
    let key =
        OPTION_KEYS
            .into_iter()
            .find(|k| *k == key)
            .ok_or_else(|| OptionError::UnknownKey {
                key: key.to_owned(),
            })?;
    Ok((
        key,
        allowed_values(key).expect("every listed key has a range"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let o = CompressionOptions::default();
        assert_eq!(o.gzip_level(), -1);
        assert_eq!(o.gzip_effective_level(), 6);
        assert_eq!(o.gzip_buffer(), 8192);
        assert_eq!(o.snappy_block(), 32768);
        assert_eq!(o.lz4_level(), 9);
        assert_eq!(o.lz4_block(), 4);
        assert_eq!(o.lz4_block_bytes(), 64 * 1024);
        assert_eq!(o.zstd_level(), 3);
        assert_eq!(o.zstd_window(), 0);
    }

    #[test]
    fn every_option_accepts_its_bounds_and_refuses_one_past() {
        let cases: [(&str, &[i64], &[i64]); 7] = [
            (GZIP_LEVEL, &[-1, 1, 9], &[-2, 0, 10]),
            (GZIP_BUFFER, &[512, 1 << 30], &[511, 0, -1, (1 << 30) + 1]),
            (SNAPPY_BLOCK, &[1024, 1 << 30], &[1023, 0]),
            (LZ4_LEVEL, &[1, 9, 17], &[0, 18, -1]),
            (LZ4_BLOCK, &[4, 7], &[3, 8]),
            (ZSTD_LEVEL, &[-131072, 0, 22], &[-131073, 23]),
            (ZSTD_WINDOW, &[0, 10, 22], &[1, 9, 23, -1]),
        ];
        for (key, good, bad) in cases {
            for &v in good {
                let mut o = CompressionOptions::default();
                o.set(key, &v.to_string()).unwrap();
                assert_eq!(o.get(key), Some(v), "{key}");
            }
            for &v in bad {
                let err = CompressionOptions::default()
                    .set(key, &v.to_string())
                    .unwrap_err();
                let msg = err.to_string();
                assert!(
                    matches!(err, OptionError::OutOfRange { .. }),
                    "{key}={v}: {msg}"
                );
                assert!(
                    msg.contains(key) && msg.contains(&v.to_string()) && msg.contains("allowed"),
                    "{msg}"
                );
            }
        }
    }

    #[test]
    fn lz4_block_codes_map_to_frame_sizes() {
        let mut o = CompressionOptions::default();
        for (code, bytes) in [(4, 64 << 10), (5, 256 << 10), (6, 1 << 20), (7, 4 << 20)] {
            o.set_int(LZ4_BLOCK, code).unwrap();
            assert_eq!(o.lz4_block_bytes(), bytes);
        }
    }

    #[test]
    fn gzip_provider_defaults_to_zlib_and_takes_the_five_names() {
        let mut o = CompressionOptions::default();
        assert_eq!(o.gzip_provider(), ProviderChoice::Default);
        assert_eq!(o.get_text(GZIP_PROVIDER).as_deref(), Some("zlib"));
        // libdeflate and zlib are built in and auto always resolves; isal and qat are
        // accepted only where their libraries open (kpress-tests' provider tests).
        for name in ["libdeflate", "zlib", "auto", "LibDeflate"] {
            o.set(GZIP_PROVIDER, name).unwrap();
            assert_eq!(o.gzip_provider().name(), name.to_ascii_lowercase());
        }
        assert_eq!(o.get_text(GZIP_LEVEL).as_deref(), Some("-1"));
        // The error text's list is the one parsing accepts.
        assert_eq!(GZIP_PROVIDER_VALUES, ProviderChoice::NAMES.join(", "));
    }

    #[test]
    fn a_bad_gzip_provider_names_key_value_and_allowed_set() {
        let err = CompressionOptions::default()
            .set(GZIP_PROVIDER, "brotli")
            .unwrap_err();
        assert_eq!(err.key(), GZIP_PROVIDER);
        assert_eq!(
            err.to_string(),
            "compression.gzip.provider = \"brotli\" is not allowed: allowed auto, qat, isal, libdeflate, zlib"
        );
        let err = CompressionOptions::default()
            .set_int(GZIP_PROVIDER, 3)
            .unwrap_err();
        assert!(matches!(err, OptionError::NotAllowed { .. }), "{err}");
        let err = CompressionOptions::default()
            .set("compression.gzip.providr", "zlib")
            .unwrap_err();
        assert!(err.to_string().contains(GZIP_PROVIDER), "{err}");
    }

    #[test]
    fn unknown_keys_and_non_integers_name_the_problem() {
        let err = CompressionOptions::default()
            .set("compression.brotli.level", "3")
            .unwrap_err();
        assert_eq!(err.key(), "compression.brotli.level");
        assert!(err.to_string().contains("compression.zstd.level"));
        let err = CompressionOptions::default()
            .set(ZSTD_LEVEL, "high")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "compression.zstd.level = \"high\" is not an integer: allowed -131072..22"
        );
    }
}
