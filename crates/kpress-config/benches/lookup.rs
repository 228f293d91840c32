//! The Produce path asks for a topic's policy once per topic per request: a cached
//! lookup must cost next to nothing beside a batch rewrite (tens of microseconds).

use criterion::{criterion_group, criterion_main, Criterion};
use kpress_batch::{CompressionType, PolicyLookup, TargetSource};
use kpress_codec::Codec;
use kpress_config::{parse, PolicySet, TopicCompression, TopicConfigSource};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, RwLock};

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

/// Answers from a map under a read lock, as the proxy's topic config cache does.
struct Learned(RwLock<HashMap<Box<str>, TopicCompression>>);

impl TopicConfigSource for Learned {
    fn topic_compression(&self, topic: &str) -> TopicCompression {
        self.0
            .read()
            .unwrap()
            .get(topic)
            .copied()
            .unwrap_or(TopicCompression::Unavailable)
    }
}

/// Topic mode (the default for `unmatched.topic`): the rule lookup, then the topic's
/// learned codec and level, then the policy compiled for them.
fn topic_mode_lookup(c: &mut Criterion) {
    let mut learned = HashMap::new();
    for i in 0..10_000 {
        learned.insert(
            format!("topic{i}").into_boxed_str(),
            TopicCompression::Known {
                compression: CompressionType::Codec(Codec::Zstd),
                level: Some(10),
                source: TargetSource::Topic,
            },
        );
    }
    let source = Arc::new(Learned(RwLock::new(learned)));
    let set = PolicySet::with_topic_configs(&parse(CONFIG, "bench").unwrap(), source);
    for topic in ["orders.eu", "topic42"] {
        set.policy_for(topic);
        c.bench_function(&format!("policy_for topic mode {topic}"), |b| {
            b.iter(|| set.policy_for(black_box(topic)).max_batch_bytes)
        });
    }
}

criterion_group!(benches, lookup, topic_mode_lookup);
criterion_main!(benches);
