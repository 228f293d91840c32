//! The tokio I/O of the kpress proxy (being written).
