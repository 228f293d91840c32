//! gzip through interchangeable deflate providers, as Kafka's KIP-1121 proposes:
//! QAT through QATzip, ISA-L, libdeflate and zlib (flate2 over zlib-rs, the default).
//!
//! Every provider writes exactly one RFC 1952 member (librdkafka reads only the
//! first) framed by [`member`], the one gzip header/trailer implementation, and reads
//! one or more members within a caller's limit, checking each CRC-32 and ISIZE. Any
//! provider's output is readable by every other and by the standard codec.
//!
//! libdeflate and zlib are built in. ISA-L (`libisal.so.2`) and QATzip
//! (`libqatzip.so.3`) are never linked: `isal-sys` and `qat-sys` open them at run
//! time, and a host without one reports that provider unavailable, with the reason.
//!
//! [`Registry`] knows which providers this host has ([`ProviderStatus`]), resolves
//! `compression.gzip.provider` ([`ProviderChoice`]: `auto`, a name, or the zlib
//! default) and [`compress_with_fallback`] keeps a batch when a provider fails.
//!
//! Levels are zlib's 1..=9; each provider documents its mapping:
//!
//! | provider   | Kafka/zlib level → provider level |
//! |------------|------------------------------------|
//! | zlib       | same                               |
//! | libdeflate | same (its 0-12 scale is modelled on zlib's) |
//! | qat        | same (QATzip deflate levels are 1-9) |
//! | isal       | 1→0, 2→1, 3-5→2, 6-9→3 (ISA-L has 0-3) |

mod error;
mod isal;
mod libdeflate;
pub mod member;
mod provider;
mod qat;
mod registry;
mod zlib;

pub use error::{DeflateError, ProviderError};
pub use isal::{isal_level, IsalProvider};
pub use libdeflate::LibdeflateProvider;
pub use provider::{GzipProvider, ProviderKind, ProviderStatus};
pub use qat::{
    status_name as qat_status_name, QatConfig, QatProvider, MAX_CALLS_WITHOUT_HARDWARE,
    MAX_SESSION_STARTS_WITHOUT_HARDWARE,
};
pub use registry::{
    compress_fallbacks, compress_with_fallback, decompress_fallbacks, decompress_with_fallback,
    ProviderChoice, Registry,
};
pub use zlib::ZlibProvider;
