//! Shared helpers for the benches (to be written).
