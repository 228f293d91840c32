//! The five Kafka compression types, named as clients, topics and `kpress` name them.

use std::fmt;

/// A Kafka record batch compression type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    /// All five, in Kafka's attribute order (0..=4).
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The name used by `compression.type`, kcat's `-z` and `kpress --compression`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// The name `DumpLogSegments` prints as `compresscodec`.
    pub fn dump_name(self) -> &'static str {
        // Kafka prints CompressionType.name, which is the same lowercase name.
        self.name()
    }

    /// Parses a `compression.type` / `compresscodec` name.
    pub fn from_name(name: &str) -> Option<Compression> {
        Compression::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
