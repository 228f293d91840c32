use crate::ProviderKind;

/// Why a gzip payload could not be compressed or decompressed by a provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeflateError {
    /// The input is not valid gzip (or raw deflate inside a member).
    #[error("corrupt gzip payload ({provider}): {reason}")]
    Corrupt {
        provider: ProviderKind,
        reason: String,
    },
    /// The payload decompresses (or would) to more than the caller's limit.
    #[error("gzip payload decompresses to more than the {limit}-byte limit")]
    LimitExceeded { limit: usize },
    /// The provider's library reported a failure that says nothing about the data.
    #[error("{provider} gzip provider failed: {reason}")]
    Provider {
        provider: ProviderKind,
        reason: String,
    },
}

/// A provider that cannot be used on this host, or a name that is not a provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider was named explicitly but its library or device is not usable here.
    #[error("gzip provider {provider} is not available: {reason}")]
    Unavailable {
        provider: ProviderKind,
        reason: String,
    },
    /// QATzip was not probed: no configuration asked for `qat` or `auto`.
    #[error("QATzip not probed: no policy names qat or auto")]
    NotProbed,
    /// Not one of the provider names.
    #[error("unknown gzip provider {0:?}: allowed are {allowed}", allowed = crate::ProviderChoice::NAMES.join(", "))]
    UnknownName(String),
}
