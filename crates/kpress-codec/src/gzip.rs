//! gzip framing (to be written).
