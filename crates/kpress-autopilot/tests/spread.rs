//! The spread of per-batch compression ratios on the repository's datasets, which
//! sets how many trial samples the autopilot needs (see the crate docs).
//!
//! `cargo test -p kpress-autopilot --test spread -- --ignored --nocapture`

use std::path::PathBuf;
use std::str::FromStr;

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::{Candidate, Codec, CompressionOptions};

const CANDIDATES: [&str; 4] = ["zstd:3", "lz4", "gzip:6", "snappy"];
const DATASETS: [&str; 2] = ["apache_access.log", "nginxplus_status.ndjson"];
/// Java's default `batch.size`, and a larger batch of a lingering producer.
const BATCH_BYTES: [usize; 2] = [16 * 1024, 64 * 1024];
/// The relative difference the two-standard-error test must separate.
const MARGIN: f64 = 0.02;

fn dataset(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../datasets")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn groups(data: &[u8], target: usize) -> Vec<Vec<Record>> {
    let mut out = Vec::new();
    let (mut group, mut bytes) = (Vec::new(), 0);
    for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if !group.is_empty() && bytes + line.len() + 16 > target {
            out.push(std::mem::take(&mut group));
            bytes = 0;
        }
        bytes += line.len() + 16;
        group.push(Record::value(line));
    }
    out
}

fn build(codec: Codec, options: &CompressionOptions, group: &[Record]) -> usize {
    BatchBuilder {
        codec,
        options: options.clone(),
        ..BatchBuilder::default()
    }
    .build(group)
    .expect("building a batch")
    .len()
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

#[test]
#[ignore = "a measurement: prints the spread of per-batch ratios"]
fn per_batch_ratio_spread() {
    let candidates: Vec<Candidate> = CANDIDATES
        .iter()
        .map(|s| Candidate::from_str(s).expect("candidate spec"))
        .collect();
    for name in DATASETS {
        let data = dataset(name);
        for target in BATCH_BYTES {
            let groups = groups(&data, target);
            // ratios[c][i]: candidate c's whole batch over the uncompressed batch i.
            let mut ratios = vec![Vec::new(); candidates.len()];
            for group in &groups {
                let sent = build(Codec::None, &CompressionOptions::default(), group) as f64;
                for (c, candidate) in candidates.iter().enumerate() {
                    let out = build(candidate.codec(), candidate.options(), group) as f64;
                    ratios[c].push(out / sent);
                }
            }
            println!(
                "\n{name}, batches of {} KiB: {} batches",
                target / 1024,
                groups.len()
            );
            let stats: Vec<(f64, f64)> = ratios.iter().map(|r| mean_sd(r)).collect();
            for (c, (mean, sd)) in stats.iter().enumerate() {
                println!(
                    "  {:<7} ratio mean {mean:.4} sd {sd:.4} cv {:.2}%",
                    CANDIDATES[c],
                    100.0 * sd / mean
                );
            }
            for a in 0..candidates.len() {
                for b in a + 1..candidates.len() {
                    let diffs: Vec<f64> = ratios[a]
                        .iter()
                        .zip(&ratios[b])
                        .map(|(x, y)| x - y)
                        .collect();
                    let (dmean, dsd) = mean_sd(&diffs);
                    let (ma, sa) = stats[a];
                    let (mb, sb) = stats[b];
                    // The smallest difference the test must see: MARGIN of the larger mean.
                    let delta = MARGIN * ma.max(mb);
                    let unpaired = 4.0 * (sa * sa + sb * sb) / (delta * delta);
                    let paired = 4.0 * dsd * dsd / (delta * delta);
                    println!(
                        "  {:>7} - {:<7} diff mean {dmean:+.4} sd {dsd:.4} cv {:.1}%; \
                         n for 2 SE < 2%: unpaired {:.0}, paired {:.0}",
                        CANDIDATES[a],
                        CANDIDATES[b],
                        100.0 * dsd / dmean.abs(),
                        unpaired.ceil(),
                        paired.ceil()
                    );
                }
            }
        }
    }
}
