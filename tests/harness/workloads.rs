//! Deterministic workloads for choosing a codec per topic: records of topics of
//! different kinds (JSON documents and events, text logs, metrics, already-compressed
//! blobs, random bytes), each generated from a seed, grouped into batches of a shape
//! (a few records, or a producer's large `batch.size`). The same seed gives the same
//! records, so a test can measure what each codec makes of exactly what it sent.

use crate::data::Dataset;
use std::io::Write;
use std::sync::OnceLock;

/// A small, fast, seeded generator (SplitMix64): reproducible on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `0.0..1.0`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// What a topic carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// NGINX Plus status documents (`datasets/nginxplus_status.ndjson`, ~5.5 KB each).
    Json,
    /// Small generated JSON events (~250 B) with the same keys in every record.
    Events,
    /// Apache access log lines (`datasets/apache_access.log`, ~236 B each).
    Logs,
    /// Influx line protocol metrics: tags from small sets, fields with random values.
    Metrics,
    /// gzip'd blobs (each ~4 KiB of log lines, compressed, from a pool of 2048 made
    /// once): compress no further.
    Compressed,
    /// Random bytes (1 KiB a record): nothing compresses them.
    Random,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Json,
        Kind::Events,
        Kind::Logs,
        Kind::Metrics,
        Kind::Compressed,
        Kind::Random,
    ];

    /// A short name for topic names and reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Json => "json",
            Kind::Events => "events",
            Kind::Logs => "logs",
            Kind::Metrics => "metrics",
            Kind::Compressed => "compressed",
            Kind::Random => "random",
        }
    }

    /// Whether the right answer is to store its batches as sent: no codec makes them
    /// meaningfully smaller.
    pub fn incompressible(self) -> bool {
        matches!(self, Kind::Compressed | Kind::Random)
    }
}

/// Record values of one [`Kind`], generated from a seed.
#[derive(Debug, Clone)]
pub struct Generator {
    kind: Kind,
    rng: Rng,
    /// The next line of a dataset, or the next event's sequence number.
    cursor: u64,
    /// A record a batch of [`Shape::Bytes`] had no room for: the next one returned.
    pending: Option<Vec<u8>>,
}

fn dataset_lines(dataset: Dataset) -> &'static [Vec<u8>] {
    static APACHE: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    static NGINX: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    let cell = match dataset {
        Dataset::ApacheAccessLog => &APACHE,
        Dataset::NginxPlusStatus => &NGINX,
    };
    cell.get_or_init(|| {
        let lines = dataset.records();
        assert!(!lines.is_empty(), "{} is empty", dataset.file_name());
        lines
    })
}

const EVENT_TYPES: [&str; 5] = ["page_view", "click", "add_to_cart", "checkout", "login"];
const COUNTRIES: [&str; 8] = ["DE", "FR", "US", "BR", "IN", "JP", "GB", "ES"];
const METRICS: [&str; 4] = ["cpu", "mem", "disk", "net"];
const REGIONS: [&str; 3] = ["eu-west-1", "us-east-1", "ap-south-1"];
/// Bytes of a random record.
const RANDOM_RECORD_BYTES: usize = 1024;
/// Bytes of log text in each compressed blob.
const BLOB_TEXT_BYTES: usize = 4096;
/// Compressed blobs made (~1 KiB each): more than a 1 MiB batch holds.
const BLOB_POOL: usize = 2048;

impl Generator {
    pub fn new(kind: Kind, seed: u64) -> Generator {
        let mut rng = Rng::new(seed ^ (kind as u64).wrapping_mul(0x51_7cc1_b727_220a));
        let cursor = rng.below(1 << 20);
        Generator {
            kind,
            rng,
            cursor,
            pending: None,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The next record value.
    pub fn next_record(&mut self) -> Vec<u8> {
        if let Some(record) = self.pending.take() {
            return record;
        }
        match self.kind {
            Kind::Json => self.next_line(Dataset::NginxPlusStatus),
            Kind::Logs => self.next_line(Dataset::ApacheAccessLog),
            Kind::Events => self.next_event(),
            Kind::Metrics => self.next_metric(),
            Kind::Compressed => self.next_blob(),
            Kind::Random => {
                let mut record = vec![0; RANDOM_RECORD_BYTES];
                self.rng.fill(&mut record);
                record
            }
        }
    }

    /// Holds `record` back to be the next one returned.
    fn put_back(&mut self, record: Vec<u8>) {
        self.pending = Some(record);
    }

    /// The next `n` record values.
    pub fn records(&mut self, n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|_| self.next_record()).collect()
    }

    fn next_line(&mut self, dataset: Dataset) -> Vec<u8> {
        let lines = dataset_lines(dataset);
        let line = lines[(self.cursor % lines.len() as u64) as usize].clone();
        self.cursor += 1;
        line
    }

    fn next_event(&mut self) -> Vec<u8> {
        self.cursor += 1;
        let r = &mut self.rng;
        format!(
            "{{\"event_id\":\"{:016x}\",\"seq\":{},\"type\":\"{}\",\"user_id\":{},\
             \"session\":\"s-{:08x}\",\"country\":\"{}\",\"amount\":{:.2},\
             \"ts\":{},\"client\":{{\"os\":\"linux\",\"app\":\"shop\",\"version\":\"4.{}.{}\"}}}}",
            r.next_u64(),
            self.cursor,
            EVENT_TYPES[r.below(EVENT_TYPES.len() as u64) as usize],
            r.below(100_000),
            r.below(1 << 20),
            COUNTRIES[r.below(COUNTRIES.len() as u64) as usize],
            r.unit() * 500.0,
            1_764_000_000_000u64 + self.cursor * 37,
            r.below(4),
            r.below(20),
        )
        .into_bytes()
    }

    fn next_metric(&mut self) -> Vec<u8> {
        self.cursor += 1;
        let r = &mut self.rng;
        format!(
            "{},host=web-{:02},region={} used={:.3},free={:.3},rate={}i {}",
            METRICS[r.below(METRICS.len() as u64) as usize],
            r.below(40),
            REGIONS[r.below(REGIONS.len() as u64) as usize],
            r.unit() * 100.0,
            r.unit() * 64.0,
            r.below(1 << 24),
            1_764_000_000_000_000_000u64 + self.cursor * 10_000_000,
        )
        .into_bytes()
    }

    fn next_blob(&mut self) -> Vec<u8> {
        let pool = blob_pool();
        let blob = pool[(self.cursor % pool.len() as u64) as usize].clone();
        self.cursor += 1;
        blob
    }
}

/// Blobs of [`Kind::Compressed`], made once: gzip in an unoptimised test build is slow,
/// and more blobs than a large batch holds means no batch repeats one.
fn blob_pool() -> &'static [Vec<u8>] {
    static POOL: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let lines = dataset_lines(Dataset::ApacheAccessLog);
        let mut line = 0;
        (0..BLOB_POOL)
            .map(|_| {
                let mut text = Vec::with_capacity(BLOB_TEXT_BYTES + 512);
                while text.len() < BLOB_TEXT_BYTES {
                    text.extend_from_slice(&lines[line % lines.len()]);
                    text.push(b'\n');
                    line += 1;
                }
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
                gz.write_all(&text).expect("gzip into memory");
                gz.finish().expect("gzip into memory")
            })
            .collect()
    })
}

/// How a producer groups a topic's records into batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// This many records a batch (`linger.ms=0` under a trickle: a few records each).
    Records(usize),
    /// Records added while the batch's values stay within this many bytes (at least
    /// one record a batch), as a producer's `batch.size` does.
    Bytes(usize),
}

impl Shape {
    /// Four records a batch.
    pub const TINY: Shape = Shape::Records(4);
    /// 512 KiB of values a batch.
    pub const LARGE: Shape = Shape::Bytes(512 << 10);

    /// A short name for topic names and reports.
    pub fn name(self) -> String {
        match self {
            Shape::Records(n) => format!("{n}rec"),
            Shape::Bytes(b) if b % 1024 == 0 => format!("{}k", b / 1024),
            Shape::Bytes(b) => format!("{b}b"),
        }
    }

    /// The next batch's records from `generator`.
    pub fn next_batch(self, generator: &mut Generator) -> Vec<Vec<u8>> {
        match self {
            Shape::Records(n) => generator.records(n.max(1)),
            Shape::Bytes(limit) => {
                let mut batch = Vec::new();
                let mut bytes = 0;
                loop {
                    let record = generator.next_record();
                    // A record the batch has no room for starts the next one.
                    if !batch.is_empty() && bytes + record.len() > limit {
                        generator.put_back(record);
                        return batch;
                    }
                    bytes += record.len();
                    batch.push(record);
                    if bytes >= limit {
                        return batch;
                    }
                }
            }
        }
    }
}

/// One topic's load: what it carries, in batches of what shape, from which seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicLoad {
    pub kind: Kind,
    pub shape: Shape,
    pub seed: u64,
}

impl TopicLoad {
    pub fn new(kind: Kind, shape: Shape, seed: u64) -> TopicLoad {
        TopicLoad { kind, shape, seed }
    }

    /// `PREFIX.KIND-SHAPE`, e.g. `ap.json-512k`.
    pub fn topic(&self, prefix: &str) -> String {
        format!("{prefix}.{}-{}", self.kind.name(), self.shape.name())
    }

    /// Its batches, as record values, until their values add up to at least `bytes`.
    pub fn batches(&self, bytes: usize) -> Vec<Vec<Vec<u8>>> {
        let mut generator = Generator::new(self.kind, self.seed);
        let mut batches = Vec::new();
        let mut total = 0;
        while total < bytes {
            let batch = self.shape.next_batch(&mut generator);
            total += batch.iter().map(Vec::len).sum::<usize>();
            batches.push(batch);
        }
        batches
    }
}

/// One batch as the broker stores it: where, how large, in which codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBatch {
    pub base_offset: i64,
    /// The whole batch's bytes (log overhead and header included).
    pub size: usize,
    /// The codec's attribute bits: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub codec: u8,
    /// The CRC matches the bytes.
    pub crc_valid: bool,
}

/// Every batch of `topic`'s partition 0 as the broker stores it, read from its
/// segment files (any record bytes, binary ones too, where DumpLogSegments prints text).
pub fn stored_batches(
    cluster: &crate::KafkaCluster,
    topic: &str,
) -> anyhow::Result<Vec<StoredBatch>> {
    let mut stored = Vec::new();
    for segment in cluster.segments(topic, 0)? {
        let bytes = std::fs::read(&segment)?;
        for batch in crate::raw_batch::split_batches(&bytes)? {
            stored.push(StoredBatch {
                base_offset: i64::from_be_bytes(batch[..8].try_into()?),
                size: batch.len(),
                codec: crate::raw_batch::codec_id(&batch),
                crc_valid: crate::raw_batch::crc_is_valid(&batch),
            });
        }
    }
    Ok(stored)
}

/// The codec name of attribute bits `id` (as `kpress_codec::Codec` names it).
pub fn codec_name(id: u8) -> &'static str {
    match id {
        0 => "none",
        1 => "gzip",
        2 => "snappy",
        3 => "lz4",
        4 => "zstd",
        _ => "unknown",
    }
}

/// The samples of the metric `name` in Prometheus text: each sample's labels and value.
pub fn metric_samples(text: &str, name: &str) -> Vec<(Vec<(String, String)>, f64)> {
    let mut samples = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(inner) => match inner.rsplit_once('}') {
                Some((labels, value)) => (labels, value),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = labels
            .split("\",")
            .filter(|l| !l.is_empty())
            .filter_map(|pair| {
                let (k, v) = pair.split_once("=\"")?;
                Some((
                    k.trim_start_matches(',').to_string(),
                    v.trim_end_matches('"').to_string(),
                ))
            })
            .collect();
        samples.push((labels, value));
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip_ratio(records: &[Vec<u8>]) -> f64 {
        let raw: Vec<u8> = records.concat();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        gz.write_all(&raw).unwrap();
        gz.finish().unwrap().len() as f64 / raw.len() as f64
    }

    #[test]
    fn the_same_seed_gives_the_same_records_and_another_seed_others() {
        for kind in Kind::ALL {
            let a = Generator::new(kind, 7).records(50);
            assert_eq!(a, Generator::new(kind, 7).records(50), "{kind:?}");
            assert_ne!(a, Generator::new(kind, 8).records(50), "{kind:?}");
        }
    }

    #[test]
    fn kinds_compress_as_their_names_say() {
        for kind in Kind::ALL {
            let ratio = gzip_ratio(&Generator::new(kind, 1).records(400));
            if kind.incompressible() {
                assert!(ratio > 0.97, "{kind:?}: gzip ratio {ratio:.3}");
            } else {
                assert!(ratio < 0.5, "{kind:?}: gzip ratio {ratio:.3}");
            }
        }
    }

    #[test]
    fn batches_keep_to_their_shape() {
        let tiny = TopicLoad::new(Kind::Logs, Shape::TINY, 3).batches(10_000);
        assert!(tiny.iter().all(|b| b.len() == 4));
        let limit = 64 << 10;
        let load = TopicLoad::new(Kind::Json, Shape::Bytes(limit), 3);
        let large = load.batches(1 << 20);
        let sizes: Vec<usize> = large.iter().map(|b| b.iter().map(Vec::len).sum()).collect();
        assert!(
            sizes.iter().all(|&s| s <= limit && s > limit / 2),
            "{sizes:?}"
        );
        assert!(sizes.iter().sum::<usize>() >= 1 << 20);
        // No record is lost between batches: they are the generator's records in order.
        let flat: Vec<Vec<u8>> = large.concat();
        assert_eq!(flat, Generator::new(Kind::Json, 3).records(flat.len()));
        assert_eq!(load.topic("ap"), "ap.json-64k");
    }

    #[test]
    fn reads_metric_samples_with_their_labels() {
        let text = "# TYPE kpress_autopilot_choice gauge\n\
                    kpress_autopilot_choice{topic=\"a.b\",candidate=\"zstd:3\"} 1\n\
                    kpress_autopilot_choice{topic=\"a.b\",candidate=\"lz4\"} 0\n\
                    kpress_autopilot_choice_total 3\nkpress_up 1\n";
        let samples = metric_samples(text, "kpress_autopilot_choice");
        assert_eq!(samples.len(), 2, "{samples:?}");
        let label = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            samples[0],
            (
                vec![label("topic", "a.b"), label("candidate", "zstd:3")],
                1.0
            )
        );
        assert_eq!(metric_samples(text, "kpress_up"), vec![(vec![], 1.0)]);
    }
}
