//! Kafka RecordBatch v2: a view over its bytes and recompression (to be written).
