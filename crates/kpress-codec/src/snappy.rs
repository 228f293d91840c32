//! snappy framing (to be written).
