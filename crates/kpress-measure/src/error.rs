use kpress_codec::{Candidate, CodecError};

/// Why a measurement could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeasureError {
    #[error("nothing to measure: no records")]
    NoRecords,
    #[error("{candidate}: compressing failed: {source}")]
    Compress {
        candidate: Candidate,
        #[source]
        source: CodecError,
    },
    #[error("{candidate}: decompressing its own output failed: {source}")]
    Decompress {
        candidate: Candidate,
        #[source]
        source: CodecError,
    },
    /// A codec that does not give back what it was given: a bug, never a measurement.
    #[error("{candidate}: decompressed output differs from the records compressed")]
    RoundTrip { candidate: Candidate },
    #[error("the segment holds no readable record batch ({damaged} damaged, {skipped} skipped)")]
    NoBatches { damaged: usize, skipped: usize },
}
