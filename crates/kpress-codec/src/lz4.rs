//! lz4 framing (to be written).
