//! zstd framing (to be written).
