//! Which providers this host has, choosing one by name or `auto`, and the fallback
//! that keeps a batch from being lost when a provider fails.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::{
    DeflateError, GzipProvider, IsalProvider, LibdeflateProvider, ProviderError, ProviderKind,
    ProviderStatus, QatConfig, QatProvider, ZlibProvider,
};

/// The value of `compression.gzip.provider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProviderChoice {
    /// The best provider this host has (see [`Registry::auto_kind`]).
    Auto,
    /// Exactly this provider; missing is an error, never a silent substitute.
    Named(ProviderKind),
    /// The default: zlib, i.e. kpress's gzip output as without any provider option.
    #[default]
    Default,
}

impl ProviderChoice {
    /// The accepted names (`auto`, then [`ProviderKind::ALL`]'s), for error messages.
    pub const NAMES: [&'static str; 5] = ["auto", "qat", "isal", "libdeflate", "zlib"];

    pub fn name(self) -> &'static str {
        match self {
            ProviderChoice::Auto => "auto",
            ProviderChoice::Named(kind) => kind.name(),
            ProviderChoice::Default => ProviderKind::Zlib.name(),
        }
    }
}

impl fmt::Display for ProviderChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ProviderChoice {
    type Err = ProviderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("auto") {
            return Ok(ProviderChoice::Auto);
        }
        ProviderKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .map(ProviderChoice::Named)
            .ok_or_else(|| ProviderError::UnknownName(s.to_owned()))
    }
}

/// The gzip providers of this process: libdeflate and zlib always (built in), ISA-L
/// when `libisal.so.2` could be opened, QAT when QATzip could be opened and a session
/// set up. Both libraries are found at run time; one that is missing makes its
/// provider unavailable, with the loader's reason, never a failed start. QATzip is
/// probed on first need (QAT named, `auto`, or the statuses), so a process that never
/// asks does not load it; ISA-L, whose opening has no side effects, is opened whenever
/// it is named or a status is asked for.
#[derive(Debug)]
pub struct Registry {
    qat: OnceLock<Result<Arc<QatProvider>, ProviderError>>,
    qat_config: QatConfig,
    isal: Arc<IsalProvider>,
    libdeflate: Arc<LibdeflateProvider>,
    zlib: Arc<ZlibProvider>,
}

impl Registry {
    /// A registry that probes QATzip, when first needed, with the default
    /// [`QatConfig`] (software backup on).
    pub fn detect() -> Registry {
        Registry {
            qat: OnceLock::new(),
            qat_config: QatConfig::default(),
            isal: Arc::new(IsalProvider),
            libdeflate: Arc::new(LibdeflateProvider),
            zlib: Arc::new(ZlibProvider),
        }
    }

    /// A registry around an already probed QAT provider (or the reason there is none).
    pub fn with_qat(qat: Result<QatProvider, ProviderError>) -> Registry {
        Registry {
            qat: OnceLock::from(qat.map(Arc::new)),
            qat_config: QatConfig::default(),
            isal: Arc::new(IsalProvider),
            libdeflate: Arc::new(LibdeflateProvider),
            zlib: Arc::new(ZlibProvider),
        }
    }

    /// The process-wide registry.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(Registry::detect)
    }

    /// The QAT provider, probed (and its status logged) on first call.
    fn qat(&self) -> &Result<Arc<QatProvider>, ProviderError> {
        self.qat.get_or_init(|| {
            let qat = QatProvider::open(self.qat_config).map(Arc::new);
            match &qat {
                Ok(q) if q.hardware() => tracing::info!("gzip provider qat: {}", q.status().detail),
                Ok(q) => {
                    tracing::warn!("gzip provider qat without hardware: {}", q.status().detail)
                }
                Err(e) => tracing::info!("{e}"),
            }
            qat
        })
    }

    /// Logs every provider's status and what `auto` selects (for a start-up log).
    pub fn log_statuses(&self) {
        for s in self.statuses() {
            tracing::info!(
                provider = %s.provider,
                available = s.available,
                hardware = s.hardware,
                "gzip provider {}: {}",
                s.provider,
                s.detail
            );
        }
        tracing::info!("gzip provider auto = {}", self.auto_kind());
    }

    /// One provider by kind, or why it is not available.
    pub fn get(&self, kind: ProviderKind) -> Result<Arc<dyn GzipProvider>, ProviderError> {
        Ok(match kind {
            ProviderKind::Qat => self.qat().clone()?,
            ProviderKind::Isal => {
                IsalProvider::open()?;
                self.isal.clone()
            }
            ProviderKind::Libdeflate => self.libdeflate.clone(),
            ProviderKind::Zlib => self.zlib.clone(),
        })
    }

    /// The provider a configuration value selects.
    pub fn resolve(&self, choice: ProviderChoice) -> Result<Arc<dyn GzipProvider>, ProviderError> {
        match choice {
            ProviderChoice::Auto => self.get(self.auto_kind()),
            ProviderChoice::Named(kind) => self.get(kind),
            ProviderChoice::Default => self.get(ProviderKind::Zlib),
        }
    }

    /// As [`resolve`](Self::resolve), with zlib standing in (logged) when the chosen
    /// provider is not available: for callers whose configuration was checked at
    /// start, so that a provider lost since then does not lose batches.
    pub fn resolve_or_zlib(&self, choice: ProviderChoice) -> Arc<dyn GzipProvider> {
        self.resolve(choice).unwrap_or_else(|e| {
            tracing::error!("{e}; using zlib for gzip");
            self.zlib.clone()
        })
    }

    /// What `auto` means here: QAT when a QAT device is present; otherwise libdeflate,
    /// the fastest software provider whose level-6 output stays within 2% of zlib 6's
    /// size (the `gzip_providers` bench; ISA-L is faster still but its best level is
    /// 7-43% larger, and QATzip's software backup is zlib with per-call overhead).
    pub fn auto_kind(&self) -> ProviderKind {
        match self.qat() {
            Ok(qat) if qat.hardware() => ProviderKind::Qat,
            _ => ProviderKind::Libdeflate,
        }
    }

    /// Every provider's status, for the start-up log and the proxy's status output.
    /// Probes QATzip if nothing has yet.
    pub fn statuses(&self) -> Vec<ProviderStatus> {
        self.statuses_of(self.qat())
    }

    /// As [`statuses`](Self::statuses), but without probing QATzip: until something
    /// needed QAT (`qat` or `auto` configured), QAT reads unavailable, "not probed".
    /// ISA-L is opened to report it (cheap, and nothing else depends on it).
    pub fn statuses_without_probing(&self) -> Vec<ProviderStatus> {
        let not_probed = Err(ProviderError::NotProbed);
        self.statuses_of(self.qat.get().unwrap_or(&not_probed))
    }

    fn statuses_of(&self, qat: &Result<Arc<QatProvider>, ProviderError>) -> Vec<ProviderStatus> {
        let software = |provider, detail: &str| ProviderStatus {
            provider,
            available: true,
            hardware: false,
            detail: detail.to_owned(),
        };
        vec![
            match qat {
                Ok(qat) => qat.status(),
                Err(e) => ProviderStatus {
                    provider: ProviderKind::Qat,
                    available: false,
                    hardware: false,
                    detail: e.to_string(),
                },
            },
            IsalProvider::status(),
            software(ProviderKind::Libdeflate, "libdeflate (bundled)"),
            software(ProviderKind::Zlib, "flate2 with zlib-rs"),
        ]
    }
}

static COMPRESS_FALLBACKS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
static DECOMPRESS_FALLBACKS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

fn slot(kind: ProviderKind) -> usize {
    ProviderKind::ALL
        .iter()
        .position(|k| *k == kind)
        .expect("every kind is listed")
}

/// How many payloads `provider` failed to compress, that zlib compressed instead.
pub fn compress_fallbacks(provider: ProviderKind) -> u64 {
    COMPRESS_FALLBACKS[slot(provider)].load(Ordering::Relaxed)
}

/// How many payloads `provider` failed to decompress that zlib then decompressed.
pub fn decompress_fallbacks(provider: ProviderKind) -> u64 {
    DECOMPRESS_FALLBACKS[slot(provider)].load(Ordering::Relaxed)
}

/// Compresses with `provider`; if it fails, with zlib (counted in
/// [`compress_fallbacks`]). Returns the provider that produced the member.
pub fn compress_with_fallback(
    provider: &dyn GzipProvider,
    input: &[u8],
    level: u32,
    out: &mut Vec<u8>,
) -> Result<ProviderKind, DeflateError> {
    match provider.compress(input, level, out) {
        Ok(()) => Ok(provider.kind()),
        Err(e) if provider.kind() != ProviderKind::Zlib => {
            let n = COMPRESS_FALLBACKS[slot(provider.kind())].fetch_add(1, Ordering::Relaxed);
            if n == 0 {
                tracing::warn!("gzip provider {} failed ({e}); compressing with zlib instead (further fallbacks are counted)", provider.kind());
            }
            ZlibProvider.compress(input, level, out)?;
            Ok(ProviderKind::Zlib)
        }
        Err(e) => Err(e),
    }
}

/// Decompresses with `provider`; if it fails for any reason but the limit, zlib tries
/// too (counted in [`decompress_fallbacks`] when zlib succeeds) and zlib's error is
/// the answer when both fail.
pub fn decompress_with_fallback(
    provider: &dyn GzipProvider,
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<usize, DeflateError> {
    match provider.decompress(input, limit, out) {
        Ok(n) => Ok(n),
        Err(e @ DeflateError::LimitExceeded { .. }) => Err(e),
        Err(e) if provider.kind() != ProviderKind::Zlib => {
            let n = ZlibProvider.decompress(input, limit, out)?;
            let count = DECOMPRESS_FALLBACKS[slot(provider.kind())].fetch_add(1, Ordering::Relaxed);
            if count == 0 {
                tracing::warn!("gzip provider {} could not decompress a payload zlib could ({e}); further cases are counted", provider.kind());
            }
            Ok(n)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_what_parsing_accepts() {
        let parsed: Vec<&str> = ProviderChoice::NAMES
            .iter()
            .map(|name| name.parse::<ProviderChoice>().unwrap().name())
            .collect();
        assert_eq!(parsed, ProviderChoice::NAMES);
        let kinds: Vec<&str> = ProviderKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(ProviderChoice::NAMES[1..], kinds[..]);
        let err = "gzip9".parse::<ProviderChoice>().unwrap_err().to_string();
        assert!(
            err.ends_with("allowed are auto, qat, isal, libdeflate, zlib"),
            "{err}"
        );
    }
}
