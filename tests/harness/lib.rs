//! Harness for kpress's integration tests: real Apache Kafka brokers (KRaft, jars from
//! Maven Central cached by `scripts/setup.sh`), real clients (Java kafka-clients,
//! librdkafka through kcat and confluent-kafka), Kafka's own `DumpLogSegments`, and the
//! built `kpress` binary.
//!
//! Everything runs on loopback with free ports and temporary directories, and every
//! process started here is killed when its handle drops (or, for a handle kept in a
//! `static`, by a watchdog when the test process exits).

mod background_producer;
pub mod bare_requests;
pub mod batch_headers;
pub mod capture;
pub mod class_sharing;
mod client_cli;
pub mod cluster;
pub mod codec_bombs;
pub mod compression;
pub mod confluent;
pub mod cpu_time;
pub mod data;
pub mod dump;
pub mod hosts;
pub mod java;
pub mod java_client;
pub mod java_recompression;
pub mod kafkajs;
pub mod kcat;
pub mod kpress;
pub mod kpress_fleet;
pub mod liveness_producer;
pub mod measure;
pub mod metadata;
pub mod node_faults;
pub mod paths;
pub mod ports;
pub mod pre_zstd_client;
pub mod proc_stat;
pub mod proc_status;
pub mod process;
pub mod producer_perf;
pub mod raw_batch;
pub mod raw_produce;
pub mod secure_stream;
pub mod steady_producer;
pub mod timed_producer;
pub mod tls;
mod wire_reader;
pub mod workloads;

pub use cluster::KafkaCluster;
pub use compression::Compression;
pub use dump::{dump_log_segment, dump_log_segments, DumpedBatch};
pub use paths::{kafka_old_version, kafka_version};
