//! The tables over every slice's metrics, built here where all the slices are known.

use crate::apis::produce::metrics::{
    PRODUCE_QUEUE_SECONDS, PRODUCE_REWRITE_SECONDS, REWRITE_SECONDS,
};
use crate::metrics::{BATCH_BYTES, BATCH_RECORDS, UPSTREAM_LATENCY};

/// Bucket bounds of every histogram of the crate, for the exporter (without them the
/// Prometheus exporter renders summaries, which cannot be aggregated).
pub const HISTOGRAM_BUCKETS: [(&str, &[f64]); 6] = [
    (REWRITE_SECONDS, &SECONDS_BUCKETS),
    (UPSTREAM_LATENCY, &SECONDS_BUCKETS),
    (PRODUCE_QUEUE_SECONDS, &SECONDS_BUCKETS),
    (PRODUCE_REWRITE_SECONDS, &SECONDS_BUCKETS),
    (BATCH_BYTES, &BATCH_BYTES_BUCKETS),
    (BATCH_RECORDS, &BATCH_RECORDS_BUCKETS),
];
/// 50 µs to 30 s.
const SECONDS_BUCKETS: [f64; 18] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
];
/// 1 KiB to 16 MiB, by powers of 2.
const BATCH_BYTES_BUCKETS: [f64; 15] = [
    1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0, 65536.0, 131072.0, 262144.0, 524288.0,
    1048576.0, 2097152.0, 4194304.0, 8388608.0, 16777216.0,
];
/// 1 to 100k records.
const BATCH_RECORDS_BUCKETS: [f64; 16] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0,
    50000.0, 100000.0,
];
