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
//! claimed size is allocated. No size a payload declares is trusted further than its
//! own bytes can produce: a declaration beyond that is [`CodecError::Corrupt`], and
//! output room is never reserved (nor, for snappy, zeroed) past it.
//!
//! ## Memory
//!
//! `L` is the limit passed to [`Decompressor::decompress`], `n` the size of the input
//! to [`Compressor::compress`]. Measured with glibc's `mallinfo2` (release build, x86-64).
//!
//! **A [`Decompressor`]** appends at most `L` bytes to the caller's `Vec` and reserves
//! at most `L` beyond its length at the call; within that, room is reserved only for
//! what the payload's bytes can produce: 64/3 output bytes per input byte for snappy,
//! 255 for an lz4 block, 1032 for deflate, and for a zstd frame its raw and RLE blocks
//! exactly and 128 KiB (at most the window) per compressed block. A declared size is
//! used only within both bounds. Only snappy zero-fills (`snap` writes into
//! initialized memory): exactly the length a block declares, within those bounds. What
//! the decompressor itself holds:
//!
//! | codec | held between calls |
//! |---|---|
//! | none, snappy, lz4 | nothing (snap and liblz4 decode into the output; lz4 sizes blocks with a walk that copies nothing) |
//! | zstd | one context of 94 KiB (95 976 B), whatever window frames declare: a frame is decoded in one call into the output, which is its window |
//! | gzip | the provider's inflate state, one per thread, shared by that thread's decompressors: zlib 47 KiB, libdeflate 11 KiB, ISA-L 85 KiB, QAT one pooled QATzip session per thread at work (its zlib inflate state only during a call) |
//!
//! So a decompressor's peak is `L` + 94 KiB + the gzip provider's 11-85 KiB per thread.
//!
//! **A [`Compressor`]** appends the compressed bytes to the caller's `Vec`, making room
//! for the codec's bound for `n` first (snappy `32 + c + c/6` per chunk `c` and lz4 at
//! level 9 `20 + 1.1 c` per block `c`, both zero-filled then cut; lz4 HC the block's
//! size; zstd `n + n/256 + 64`; gzip about `n + n/4096 + 1 KiB`, QATzip its
//! `qzMaxCompressedLength`). What it holds:
//!
//! | codec, options | held between calls |
//! |---|---|
//! | none | nothing |
//! | snappy | 34 KiB (snap's 2 KiB and 32 KiB hash tables) |
//! | lz4, level 9 | 16 KiB (lz4_flex's hash table) |
//! | lz4, other levels | 256 KiB (liblz4's HC state, `LZ4_sizeofStateHC`) |
//! | zstd | the context's tables, sized by the level for `min(n, window)` and kept until zstd shrinks them (after 128 calls that need a third of it or less); see below |
//! | gzip | per thread and level, shared by that thread's compressors: zlib 371 KiB, libdeflate 656 KiB (levels 6 and 9), ISA-L 421 KiB (its level 3, Kafka 6-9), QAT a pooled QATzip session per level and thread at work (its deflate state only during a call) |
//!
//! zstd's context after one call, by level and input size (window 0; the tables stop
//! growing once `n` reaches the level's window):
//!
//! | level | n = 1 MiB | n = 16 MiB | n = 64 MiB |
//! |---|--:|--:|--:|
//! | -5, 1 | 1.3 MiB | 1.3 MiB | 1.3 MiB |
//! | 3 (default) | 2.5 MiB | 3.5 MiB | 3.5 MiB |
//! | 6 | | | 5.2 MiB |
//! | 9 | 11.7 MiB | 14.7 MiB | 14.7 MiB |
//! | 12 | 11.7 MiB | | 44.7 MiB |
//! | 15 | | | 68.7 MiB |
//! | 19 | 18.5 MiB | 89.5 MiB | 89.5 MiB |
//! | 20 | | 177.5 MiB | 193.5 MiB |
//! | 21 | | 209.5 MiB | 385.5 MiB |
//! | 22 | 18.5 MiB | 273.5 MiB | 705.5 MiB |
//!
//! `compression.zstd.window` 22 (long-distance matching, 4 MiB window) caps the
//! tables: at n = 64 MiB, 5.1 MiB at level 1, 5.8 MiB at 3, 55.5 MiB at 19, 71.5 MiB
//! at 22.

mod candidate;
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

pub use candidate::{Candidate, CandidateError};
pub use codec::{Codec, UnknownCodec};
pub use compressor::Compressor;
pub use decompressor::Decompressor;
pub use error::CodecError;
/// The gzip providers (KIP-1121): statuses, `auto`, fallback counters.
pub use kpress_deflate as gzip_providers;
pub use options::{CompressionOptions, OptionError};
