//! Errors, each saying whose fault it is: the client's, the broker's or kpress's own.

/// Who caused a [`ProtocolError`]; decides what the proxy does next
/// (forward the original bytes, close the connection, log a bug).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The client sent bytes that do not parse: forward them untouched and let
    /// the broker answer with the proper Kafka error.
    Client,
    /// The broker sent bytes that do not parse: relay them untouched.
    Broker,
    /// kpress itself could not encode what it decoded: a kpress bug.
    Proxy,
}

/// A low-level decoding problem at a byte offset of the message body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("needs {needed} bytes at offset {at}, only {remaining} remain")]
    Truncated {
        at: usize,
        needed: usize,
        remaining: usize,
    },
    #[error("negative length {length} at offset {at}")]
    NegativeLength { at: usize, length: i64 },
    #[error("count {count} at offset {at} cannot fit in the {remaining} bytes that remain")]
    CountTooLarge {
        at: usize,
        count: u64,
        remaining: usize,
    },
    #[error("unsigned varint at offset {at} is longer than 5 bytes")]
    VarintTooLong { at: usize },
    #[error("{field} at offset {at} is not UTF-8")]
    NotUtf8 { at: usize, field: &'static str },
    #[error("null {field} at offset {at} where the schema forbids null")]
    UnexpectedNull { at: usize, field: &'static str },
    #[error("{trailing} trailing bytes after the message body")]
    TrailingBytes { trailing: usize },
    /// A tagged field whose tag or size Kafka cannot read (over `i32::MAX`), or
    /// whose tag is not above the previous one (Kafka requires ascending tags).
    #[error("invalid tagged field at offset {at}: tag {tag}, {size} bytes")]
    InvalidTaggedField { at: usize, tag: u32, size: u32 },
    #[error("header length {header_len} exceeds the {payload_len}-byte payload")]
    HeaderBeyondPayload {
        header_len: usize,
        payload_len: usize,
    },
    #[error("{0}")]
    Decode(String),
}

impl WireError {
    /// The same error for a sub-buffer that starts at `offset` of the body.
    pub(crate) fn shifted(self, offset: usize) -> WireError {
        match self {
            WireError::Truncated {
                at,
                needed,
                remaining,
            } => WireError::Truncated {
                at: at + offset,
                needed,
                remaining,
            },
            WireError::NegativeLength { at, length } => WireError::NegativeLength {
                at: at + offset,
                length,
            },
            WireError::CountTooLarge {
                at,
                count,
                remaining,
            } => WireError::CountTooLarge {
                at: at + offset,
                count,
                remaining,
            },
            WireError::VarintTooLong { at } => WireError::VarintTooLong { at: at + offset },
            WireError::UnexpectedNull { at, field } => WireError::UnexpectedNull {
                at: at + offset,
                field,
            },
            WireError::NotUtf8 { at, field } => WireError::NotUtf8 {
                at: at + offset,
                field,
            },
            WireError::InvalidTaggedField { at, tag, size } => WireError::InvalidTaggedField {
                at: at + offset,
                tag,
                size,
            },
            other => other,
        }
    }
}

/// Why a request or response could not be parsed or rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The client sent a request kpress cannot parse.
    #[error("client sent a malformed {api} v{version} request: {source}")]
    MalformedRequest {
        api: &'static str,
        version: i16,
        #[source]
        source: WireError,
    },
    /// The broker sent a response kpress cannot parse.
    #[error("broker sent a malformed {api} v{version} response: {source}")]
    MalformedResponse {
        api: &'static str,
        version: i16,
        #[source]
        source: WireError,
    },
    /// A version kpress does not parse (it caps such versions in ApiVersions,
    /// so a client using one ignored what kpress told it).
    #[error("{api} v{version} is not supported by kpress (supported: v{min}-v{max})")]
    UnsupportedVersion {
        api: &'static str,
        version: i16,
        min: i16,
        max: i16,
    },
    /// Re-encoding a message kpress decoded failed.
    #[error("kpress failed to encode {api} v{version}: {reason}")]
    Encode {
        api: &'static str,
        version: i16,
        reason: String,
    },
}

impl ProtocolError {
    /// Whose fault the error is.
    pub fn fault(&self) -> Fault {
        match self {
            ProtocolError::MalformedRequest { .. } => Fault::Client,
            ProtocolError::UnsupportedVersion { .. } => Fault::Client,
            ProtocolError::MalformedResponse { .. } => Fault::Broker,
            ProtocolError::Encode { .. } => Fault::Proxy,
        }
    }
}

/// `Ok` when `version` of `api` is one kpress parses (`min..=max`).
pub(crate) fn check_version(
    api: &'static str,
    version: i16,
    min: i16,
    max: i16,
) -> Result<(), ProtocolError> {
    if (min..=max).contains(&version) {
        Ok(())
    } else {
        Err(ProtocolError::UnsupportedVersion {
            api,
            version,
            min,
            max,
        })
    }
}

/// Wraps a [`WireError`] in a client request of `api` at `version`.
pub(crate) fn malformed_request(
    api: &'static str,
    version: i16,
) -> impl Fn(WireError) -> ProtocolError {
    move |source| ProtocolError::MalformedRequest {
        api,
        version,
        source,
    }
}

/// Wraps a [`WireError`] in a broker response of `api` at `version`.
pub(crate) fn malformed_response(
    api: &'static str,
    version: i16,
) -> impl Fn(WireError) -> ProtocolError {
    move |source| ProtocolError::MalformedResponse {
        api,
        version,
        source,
    }
}
