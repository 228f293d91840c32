//! The Produce path asks for a topic's policy once per topic per request: a cached
//! lookup must cost next to nothing beside a batch rewrite (tens of microseconds).

use criterion::{criterion_group, criterion_main, Criterion};
use kpress_batch::PolicyLookup;
use kpress_config::{parse, PolicySet};
use std::hint::black_box;

const CONFIG: &str = r#"[listener]
bind = "127.0.0.1:19092"
node_port_base = 19100
[upstream]
bootstrap_servers = ["127.0.0.1:9092"]
[[topics]]
match = "orders.eu"
compression.type = "lz4"
[[topics]]
match = "re:audit\\.(eu|us)\\..+"
compression.type = "gzip"
[[topics]]
match = "logs.*"
compression.type = "zstd"
"#;

fn lookup(c: &mut Criterion) {
    let set = PolicySet::new(&parse(CONFIG, "bench").unwrap());
    for topic in ["orders.eu", "logs.nginx.access", "unmatched.topic"] {
        set.policy_for(topic);
        c.bench_function(&format!("policy_for cached {topic}"), |b| {
            b.iter(|| set.policy_for(black_box(topic)).max_batch_bytes)
        });
    }
    // A first sight of a topic: walk the rules, then insert into the cache.
    let fresh: Vec<String> = (0..1_000_000).map(|i| format!("logs.app{i}")).collect();
    let mut i = 0;
    c.bench_function("policy_for first sight (glob rule 3)", |b| {
        b.iter(|| {
            i = (i + 1) % fresh.len();
            set.policy_for(black_box(&fresh[i])).max_batch_bytes
        })
    });
}

criterion_group!(benches, lookup);
criterion_main!(benches);
