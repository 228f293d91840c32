//! Test harness: real Kafka brokers and clients (to be written).
