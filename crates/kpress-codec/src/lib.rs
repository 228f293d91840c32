//! Kafka-exact compression codecs for record batch payloads, without I/O.
//!
//! Each codec writes the framing that both Apache Kafka's Java client and librdkafka
//! read (the README's "Codec framing" section), and reads what either writes:
//!
//! | codec  | writes                                    | reads                         |
//! |--------|-------------------------------------------|-------------------------------|
//! | gzip   | exactly one RFC 1952 member               | one or more members           |
//! | snappy | xerial framing, `compression.snappy.block`| xerial framing or raw snappy  |
//! | lz4    | one LZ4 frame, independent blocks         | the first frame only          |
//! | zstd   | one frame with content size, window ≤ 2^27| standard frames, window ≤ 2^27|
//!
//! gzip goes through the deflate provider `compression.gzip.provider` selects (crate
//! `kpress-deflate`: zlib by default, or QAT through QATzip, ISA-L, libdeflate, or
//! `auto`); every provider writes the same one-member framing and reads any other's.
//!
//! Decompression is always bounded: a caller passes the most bytes it will accept and a
//! payload that would exceed it fails with [`CodecError::LimitExceeded`] before the
//! claimed size is allocated.

mod codec;
mod compressor;
mod decompressor;
mod error;
mod gzip;
mod lz4;
pub mod options;
mod snappy;
mod spare;
mod xxh32;
mod zstd;
mod zstd_frame;

pub use codec::{Codec, UnknownCodec};
pub use compressor::Compressor;
pub use decompressor::Decompressor;
pub use error::CodecError;
/// The gzip providers (KIP-1121): statuses, `auto`, fallback counters.
pub use kpress_deflate as gzip_providers;
pub use options::{CompressionOptions, OptionError};
