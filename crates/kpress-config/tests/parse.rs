//! The policy file format: every key, every kind of error, and where errors point.

use kpress_batch::{PassReason, PolicyLookup, RecompressMode, Target, TargetSource};
use kpress_codec::options::{allowed_values, OPTION_KEYS};
use kpress_codec::{Codec, CompressionOptions};
use std::path::PathBuf;
use std::time::Duration;

use kpress_config::{
    parse, Compression, Config, ConfigError, PasswordSource, PolicySet, TopicCompression,
    TopicConfigSource, UpstreamSasl,
};

mod common;

use common::{one_problem, ports, problem_texts, problems, TempDir, HEAD};

#[test]
fn minimal_file_gets_kafka_defaults() {
    let c = parse(HEAD, "t.toml").unwrap();
    assert_eq!(c.listener.bind.to_string(), "127.0.0.1:19092");
    assert_eq!(ports(&c), ("127.0.0.1", 19100));
    assert_eq!(c.listener.tls, None);
    assert!(c.listener.rewrite_before_auth);
    assert!(!c.listener.reuse_port);
    assert_eq!(c.upstream.bootstrap_servers, ["127.0.0.1:9092"]);
    assert_eq!((&c.upstream.tls, &c.upstream.sasl), (&None, &None));
    assert_eq!(c.limits.max_batch_bytes, 1_048_588);
    assert_eq!(c.limits.max_decompressed_bytes, 64 << 20);
    assert_eq!(c.limits.max_frame_bytes, 100 << 20);
    assert_eq!(c.limits.max_inflight_bytes, 256 << 20);
    assert!(c.admin.is_none());
    assert!(c.warnings.is_empty());
    // Topic mode: what the topic's own compression.type names, at its own level.
    assert_eq!(c.defaults.compression, Compression::Topic);
    assert_eq!(c.upstream.topic_config_refresh.as_millis(), 30_000);
    assert!(!c.defaults.only_if_smaller, "the policy's codec is stored");
    assert!(c.topics.is_empty());
}

#[test]
fn listener_reuse_port_is_true_or_false() {
    let with = |line: &str| HEAD.replacen("[upstream]", &format!("{line}\n[upstream]"), 1);
    let reuse_port = |line: &str| parse(&with(line), "t.toml").unwrap().listener.reuse_port;
    assert!(reuse_port("reuse_port = true"));
    assert!(!reuse_port("reuse_port = false"));
    assert_eq!(
        one_problem(&with("reuse_port = \"yes\"")),
        "t.toml:5:14: listener.reuse_port = \"yes\": must be true or false, not string \
         (allowed: true, false)"
    );
}

#[test]
fn the_issue_example_parses() {
    let text = format!(
        r#"{HEAD}
[limits]
max_batch_bytes = 1048588
max_decompressed_bytes = 67108864
max_frame_bytes = 104857600
max_inflight_bytes = 268435456
[admin]
bind = "127.0.0.1:9464"
[defaults]
compression.type = "producer"
[[topics]]
match = "logs.*"
compression.type = "zstd"
compression.zstd.level = 3
compression.zstd.window = 0
recompress = "codec-differs"
"#
    );
    let c = parse(&text, "t.toml").unwrap();
    let admin = c.admin.unwrap();
    assert_eq!(admin.bind.to_string(), "127.0.0.1:9464");
    assert_eq!(admin.readiness_window, Duration::from_secs(30));
    assert!(c.warnings.is_empty());
    assert_eq!(c.topics.len(), 1);
    let rule = &c.topics[0];
    assert_eq!(rule.pattern.to_string(), "logs.*");
    assert_eq!(rule.line, 18);
    assert_eq!(rule.policy.compression, Compression::Codec(Codec::Zstd));
    assert_eq!(rule.policy.options.zstd_level(), 3);
    assert_eq!(rule.policy.recompress, RecompressMode::CodecDiffers);
}

#[test]
fn every_option_key_at_its_bounds_and_one_past() {
    // Representative bounds for each key, from the codec core's own ranges.
    let cases: [(&str, &[i64], &[i64]); 7] = [
        ("compression.gzip.level", &[-1, 1, 9], &[-2, 0, 10]),
        (
            "compression.gzip.buffer",
            &[512, 1 << 30],
            &[511, (1 << 30) + 1],
        ),
        ("compression.snappy.block", &[1024, 1 << 30], &[1023, 0]),
        ("compression.lz4.level", &[1, 17], &[0, 18]),
        ("compression.lz4.block", &[4, 7], &[3, 8]),
        ("compression.zstd.level", &[-131072, 22], &[-131073, 23]),
        ("compression.zstd.window", &[0, 10, 22], &[9, 23]),
    ];
    assert_eq!(cases.len(), OPTION_KEYS.len());
    for (key, good, bad) in cases {
        for v in good {
            for section in ["[defaults]", "[[topics]]\nmatch = \"t\""] {
                let text = format!("{HEAD}{section}\n{key} = {v}\n");
                let c = parse(&text, "t.toml").unwrap_or_else(|e| panic!("{key}={v}: {e}"));
                let policy = c.topics.first().map_or(&c.defaults, |r| &r.policy);
                assert_eq!(policy.options.get(key), Some(*v), "{key}");
            }
        }
        for v in bad {
            let text = format!("{HEAD}[[topics]]\nmatch = \"t\"\n{key} = {v}\n");
            let allowed = allowed_values(key).unwrap().to_string();
            let col = key.len() + 4;
            assert_eq!(
                one_problem(&text),
                format!("t.toml:9:{col}: {key} = {v}: out of range (allowed: {allowed})")
            );
        }
    }
}

#[test]
fn compression_types_and_recompress_modes() {
    for (name, expect) in [
        ("topic", Compression::Topic),
        ("producer", Compression::Producer),
        ("none", Compression::Codec(Codec::None)),
        ("uncompressed", Compression::Codec(Codec::None)),
        ("gzip", Compression::Codec(Codec::Gzip)),
        ("snappy", Compression::Codec(Codec::Snappy)),
        ("lz4", Compression::Codec(Codec::Lz4)),
        ("zstd", Compression::Codec(Codec::Zstd)),
    ] {
        let text = format!("{HEAD}[defaults]\ncompression.type = \"{name}\"\n");
        assert_eq!(parse(&text, "t").unwrap().defaults.compression, expect);
    }
    assert_eq!(
        one_problem(&format!("{HEAD}[defaults]\ncompression.type = \"ZSTD\"\n")),
        "t.toml:8:20: compression.type = \"ZSTD\": unknown compression type \
         (allowed: topic, auto, producer, none (or uncompressed), gzip, snappy, lz4, zstd)"
    );
    let text = format!("{HEAD}[defaults]\nrecompress = \"always\"\nonly_if_smaller = true\n");
    let c = parse(&text, "t").unwrap();
    assert_eq!(c.defaults.recompress, RecompressMode::Always);
    assert!(c.defaults.only_if_smaller);
    assert!(c.warnings.is_empty());
    assert_eq!(
        one_problem(&format!("{HEAD}[defaults]\nrecompress = \"sometimes\"\n")),
        "t.toml:8:14: recompress = \"sometimes\": unknown recompress mode \
         (allowed: codec-differs, always)"
    );
    assert_eq!(
        one_problem(&format!("{HEAD}[defaults]\nonly_if_smaller = \"yes\"\n")),
        "t.toml:8:19: only_if_smaller = \"yes\": must be true or false, not string \
         (allowed: true, false)"
    );
}

#[test]
fn rules_inherit_defaults_and_override_them() {
    let text = format!(
        r#"{HEAD}[defaults]
compression.type = "zstd"
compression.zstd.level = 7
compression.lz4.level = 3
recompress = "always"
only_if_smaller = true
[[topics]]
match = "a"
[[topics]]
match = "b"
compression.type = "lz4"
compression.zstd.level = 1
recompress = "codec-differs"
"#
    );
    let c = parse(&text, "t").unwrap();
    let a = &c.topics[0].policy;
    assert_eq!(a, &c.defaults);
    let b = &c.topics[1].policy;
    assert_eq!(b.compression, Compression::Codec(Codec::Lz4));
    assert_eq!(b.options.lz4_level(), 3, "inherited");
    assert_eq!(b.options.zstd_level(), 1, "overridden");
    assert_eq!(b.recompress, RecompressMode::CodecDiffers);
    assert!(b.only_if_smaller, "inherited");
}

#[test]
fn defaults_apply_whatever_the_section_order() {
    let text =
        format!("{HEAD}[[topics]]\nmatch = \"a\"\n[defaults]\ncompression.type = \"gzip\"\n");
    let c = parse(&text, "t").unwrap();
    assert_eq!(
        c.topics[0].policy.compression,
        Compression::Codec(Codec::Gzip)
    );
}

#[test]
fn dotted_quoted_and_nested_spellings_are_the_same_key() {
    for body in [
        "compression.zstd.level = 5",
        "\"compression.zstd.level\" = 5",
        "compression = { zstd = { level = 5 } }",
        "[defaults.compression.zstd]\nlevel = 5",
    ] {
        let text = format!("{HEAD}[defaults]\n{body}\n");
        let c = parse(&text, "t").unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(c.defaults.options.zstd_level(), 5, "{body}");
    }
    let p = one_problem(&format!(
        "{HEAD}[defaults]\ncompression.type = \"gzip\"\n\"compression.type\" = \"lz4\"\n"
    ));
    assert!(
        p.starts_with("t.toml:9:1: compression.type: set twice (first at line 8)"),
        "{p}"
    );
}

#[test]
fn unknown_keys_and_sections_are_errors_with_the_known_ones() {
    let p = one_problem(&format!("{HEAD}[defaults]\ncompression.zstd.levle = 3\n"));
    assert!(
        p.starts_with("t.toml:8:18: compression.zstd.levle: unknown key in [defaults] (allowed: compression.type, recompress, only_if_smaller, compression.gzip.level"),
        "{p}"
    );
    let p = one_problem(&format!("{HEAD}[listnr]\nbind = 1\n"));
    assert_eq!(
        p,
        "t.toml:7:2: listnr: unknown section (allowed: listener, upstream, limits, admin, log, shadow, overload, defaults, topics, consumers, clients, autopilot); did you mean listener?"
    );
    let p = one_problem(&format!("{HEAD}[limits]\nmax_batch = 1\n"));
    assert!(
        p.starts_with(
            "t.toml:8:1: limits.max_batch: unknown key in [limits] (allowed: max_batch_bytes,"
        ),
        "{p}"
    );
    let p = one_problem(&format!("{HEAD}[defaults]\nmatch = \"x\"\n"));
    assert!(
        p.contains("match: unknown key in [defaults] (allowed: only in [[topics]])"),
        "{p}"
    );
    let p = problem_texts(&HEAD.replace("node_port_base", "node_port_bas"));
    assert_eq!(
        p,
        [
            "t.toml:4:1: listener.node_port_bas: unknown key in [listener] (allowed: bind, mode, advertised_host, node_port_base, advertised_host_pattern, bootstrap_host, advertised_port, rewrite_before_auth, reuse_port, tls); did you mean node_port_base?"
        ]
    );
}

#[test]
fn all_problems_are_reported_in_file_order() {
    let text = r#"[listener]
bind = "127.0.0.1"
node_port_base = 70000
[upstream]
bootstrap_servers = ["nohost", "b:9092", "c:0"]
[limits]
max_batch_bytes = 10
[defaults]
compression.type = "brotli"
compression.zstd.level = 99
[[topics]]
compression.type = "lz4"
[[topics]]
match = "bad name"
compression.lz4.level = "3"
"#;
    let p = problem_texts(text);
    let expected = [
        "t.toml:2:8: listener.bind = \"127.0.0.1\": not an IP:port socket address (allowed: IPv4:port or [IPv6]:port, e.g. 127.0.0.1:19092)",
        "t.toml:3:18: listener.node_port_base = 70000: out of range (allowed: 1..65535)",
        "t.toml:5:22: upstream.bootstrap_servers = \"nohost\": not a \"host:port\" address (allowed: host:port with port 1..65535, [IPv6]:port)",
        "t.toml:5:42: upstream.bootstrap_servers = \"c:0\": not a \"host:port\" address (allowed: host:port with port 1..65535, [IPv6]:port)",
        "t.toml:7:19: limits.max_batch_bytes = 10: out of range (allowed: 61..2147483647)",
        "t.toml:9:20: compression.type = \"brotli\": unknown compression type (allowed: topic, auto, producer, none (or uncompressed), gzip, snappy, lz4, zstd)",
        "t.toml:10:26: compression.zstd.level = 99: out of range (allowed: -131072..22)",
        "t.toml:11:1: match: missing key in [[topics]]: which topics does this rule apply to? (allowed: an exact topic name, a glob (*, ?, [...]) or re:<regex>)",
        "t.toml:14:9: match = \"bad name\": ' ' cannot be in a Kafka topic name, so this rule would never match (allowed: an exact topic name, a glob (*, ?, [...]) or re:<regex>)",
        "t.toml:15:25: compression.lz4.level = \"3\": must be an integer, not string (allowed: 1..17)",
    ];
    assert_eq!(p, expected);
}

#[test]
fn wrong_types_name_the_type_found() {
    let p = one_problem(&format!(
        "{HEAD}[defaults]\ncompression.lz4.level = \"3\"\n"
    ));
    assert_eq!(
        p,
        "t.toml:8:25: compression.lz4.level = \"3\": must be an integer, not string (allowed: 1..17)"
    );
    let p = one_problem(&format!("{HEAD}[defaults]\ncompression.zstd.level = 3.5\n"));
    assert!(p.contains("must be an integer, not float"), "{p}");
    let p = one_problem(&HEAD.replace("[\"127.0.0.1:9092\"]", "\"127.0.0.1:9092\""));
    assert!(
        p.starts_with(
            "t.toml:6:21: upstream.bootstrap_servers = \"127.0.0.1:9092\": must be an array"
        ),
        "{p}"
    );
    let p = one_problem(&format!("topics = 3\n{HEAD}"));
    assert!(p.contains("topics = 3: must be an array of tables"), "{p}");
    let p = one_problem(&format!("{HEAD}[topics]\nmatch = \"a\"\n"));
    assert_eq!(
        p,
        "t.toml:7:1: [topics]: rules are an array of tables: write [[topics]]"
    );
    let p = one_problem(&format!("admin = \"127.0.0.1:9464\"\n{HEAD}"));
    assert!(
        p.contains("admin = \"127.0.0.1:9464\": must be a table, not string"),
        "{p}"
    );
}

#[test]
fn missing_sections_and_keys() {
    let p = problem_texts("");
    assert_eq!(
        p,
        [
            "t.toml:1:1: [listener]: missing section",
            "t.toml:1:1: [upstream]: missing section"
        ]
    );
    let text = "[listener]\nbind = \"127.0.0.1:0\"\n[upstream]\n[admin]\n";
    let p = problem_texts(text);
    assert_eq!(
        p,
        [
            "t.toml:2:8: listener.node_port_base: missing: listener.bind's port is 0 (chosen by the system at start), so node_port_base has no default; set node_port_base (broker node N is served on node_port_base + N) (allowed: 1..65535)",
            "t.toml:3:1: upstream.bootstrap_servers: missing key in [upstream]",
            "t.toml:4:1: admin.bind: missing key in [admin]",
        ]
    );
}

#[test]
fn advertised_host_defaults_to_a_specific_bind_address() {
    let c = parse(&HEAD.replace("advertised_host = \"127.0.0.1\"\n", ""), "t").unwrap();
    assert_eq!(ports(&c).0, "127.0.0.1");
    let p = one_problem(&HEAD.replace("\"127.0.0.1\"\n", "\"\"\n"));
    assert!(
        p.contains("listener.advertised_host = \"\": must be a host name"),
        "{p}"
    );
}

#[test]
fn limit_bounds_and_cross_checks() {
    const I32: i64 = i32::MAX as i64;
    let defaults = parse(HEAD, "t").unwrap().limits;
    assert_eq!(defaults.max_connections, 10_000);
    assert_eq!(defaults.max_connection_inflight_bytes, 100 << 20);
    assert_eq!(defaults.frame_timeout_ms, 30_000);
    assert_eq!(defaults.idle_timeout_ms, 600_000);
    assert_eq!(defaults.max_request_decompressed_bytes, 256 << 20);
    assert_eq!(defaults.max_decompression_ratio, 1000);
    assert_eq!(defaults.max_topic_labels, 1000);
    for (key, min, max) in [
        ("max_batch_bytes", 61, I32),
        ("max_decompressed_bytes", 1024, I32),
        ("max_frame_bytes", 1024, I32),
        ("max_inflight_bytes", 2048, 1 << 40),
        ("max_connection_inflight_bytes", 1024, 1 << 40),
        ("max_connections", 1, 1_000_000),
        ("frame_timeout_ms", 100, 3_600_000),
        ("idle_timeout_ms", 1000, 86_400_000),
        ("max_request_decompressed_bytes", 1 << 20, 1 << 40),
        ("max_decompression_ratio", 10, 1_000_000),
        ("max_topic_labels", 0, 100_000),
    ] {
        // The other of frame/inflight is set so that only the bound under test matters.
        let other = match key {
            "max_frame_bytes" => "max_inflight_bytes = 1099511627776\nmax_connection_inflight_bytes = 1099511627776\n",
            "max_inflight_bytes" | "max_connection_inflight_bytes" => "max_frame_bytes = 1024\n",
            _ => "",
        };
        for v in [min, max] {
            let text = format!("{HEAD}[limits]\n{key} = {v}\n{other}");
            let c = parse(&text, "t").unwrap_or_else(|e| panic!("{key}={v}: {e}"));
            let got = match key {
                "max_batch_bytes" => c.limits.max_batch_bytes,
                "max_decompressed_bytes" => c.limits.max_decompressed_bytes,
                "max_frame_bytes" => c.limits.max_frame_bytes,
                "max_inflight_bytes" => c.limits.max_inflight_bytes,
                "max_connection_inflight_bytes" => c.limits.max_connection_inflight_bytes,
                "max_connections" => c.limits.max_connections,
                "frame_timeout_ms" => c.limits.frame_timeout_ms,
                "idle_timeout_ms" => c.limits.idle_timeout_ms,
                "max_request_decompressed_bytes" => c.limits.max_request_decompressed_bytes,
                "max_decompression_ratio" => c.limits.max_decompression_ratio,
                _ => c.limits.max_topic_labels,
            };
            assert_eq!(got as i64, v, "{key}");
        }
        for v in [min - 1, max + 1] {
            if key == "max_inflight_bytes" && v == min - 1 {
                continue; // below twice the frame size: the cross-check below
            }
            let p = one_problem(&format!("{HEAD}[limits]\n{key} = {v}\n{other}"));
            assert_eq!(
                p,
                format!(
                    "t.toml:8:{}: limits.{key} = {v}: out of range (allowed: {min}..{max})",
                    key.len() + 4
                )
            );
        }
    }
    let p = one_problem(&format!(
        "{HEAD}[limits]\nmax_frame_bytes = 2000\nmax_inflight_bytes = 3999\n"
    ));
    assert_eq!(
        p,
        "t.toml:9:22: limits.max_inflight_bytes = 3999: is below twice limits.max_frame_bytes (2000): half the budget serves requests, half responses, and a largest frame must fit in a half (allowed: 4000..1099511627776)"
    );
    let p = one_problem(&format!(
        "{HEAD}[limits]\nmax_frame_bytes = 2000\nmax_connection_inflight_bytes = 1999\n"
    ));
    assert_eq!(
        p,
        "t.toml:9:33: limits.max_connection_inflight_bytes = 1999: is below limits.max_frame_bytes (2000): a connection could never read a largest frame (allowed: 2000..1099511627776)"
    );
    // Unset, a connection may hold one largest frame.
    let c = parse(&format!("{HEAD}[limits]\nmax_frame_bytes = 5000\n"), "t").unwrap();
    assert_eq!(c.limits.max_connection_inflight_bytes, 5000);
    let p = one_problem(&format!(
        "{HEAD}[limits]\nmax_batch_bytes = 99999999999999999999\n"
    ));
    assert!(
        p.contains("out of range") || p.contains("TOML syntax"),
        "{p}"
    );
}

#[test]
fn node_port_base_bounds() {
    for v in [1, 65535] {
        let text = HEAD.replace("node_port_base = 19100", &format!("node_port_base = {v}"));
        assert_eq!(ports(&parse(&text, "t").unwrap()).1, v);
    }
    for v in [0, 65536, -1] {
        let text = HEAD.replace("node_port_base = 19100", &format!("node_port_base = {v}"));
        assert_eq!(
            one_problem(&text),
            format!("t.toml:4:18: listener.node_port_base = {v}: out of range (allowed: 1..65535)")
        );
    }
}

#[test]
fn admin_cannot_share_the_listener_port() {
    let p = one_problem(&format!("{HEAD}[admin]\nbind = \"0.0.0.0:19092\"\n"));
    assert_eq!(
        p,
        "t.toml:8:8: admin.bind = \"0.0.0.0:19092\": takes the port of listener.bind (127.0.0.1:19092): give the admin endpoint a port of its own",
    );
    parse(&format!("{HEAD}[admin]\nbind = \"127.0.0.1:9464\"\n"), "t").unwrap();
}

#[test]
fn metrics_is_refused_naming_admin() {
    let refusal = "t.toml:7:2: metrics: unknown section [metrics]: use [admin] (same bind; it also serves /healthz, /readyz and /policy)";
    assert_eq!(
        one_problem(&format!("{HEAD}[metrics]\nbind = \"127.0.0.1:9464\"\n")),
        refusal
    );
    // Its keys are not read: the one problem is the section's name.
    assert_eq!(
        one_problem(&format!(
            "{HEAD}[metrics]\nbind = \"127.0.0.1:9464\"\nreadiness_window_secs = 5\n"
        )),
        refusal
    );
    assert_eq!(
        one_problem(&format!(
            "{HEAD}[admin]\nbind = \"127.0.0.1:9464\"\n[metrics]\nbind = \"127.0.0.1:9465\"\n"
        )),
        refusal.replace(":7:2:", ":9:2:")
    );
}

#[test]
fn admin_readiness_window_secs() {
    let text = |v: &str| {
        format!("{HEAD}[admin]\nbind = \"127.0.0.1:9464\"\nreadiness_window_secs = {v}\n")
    };
    for (v, secs) in [("1", 1), ("30", 30), ("3600", 3600)] {
        let c = parse(&text(v), "t").unwrap();
        assert_eq!(c.admin.unwrap().readiness_window, Duration::from_secs(secs));
    }
    for v in ["0", "3601", "-1"] {
        assert_eq!(
            one_problem(&text(v)),
            format!(
                "t.toml:9:25: admin.readiness_window_secs = {v}: out of range (allowed: 1..3600)"
            )
        );
    }
    assert!(one_problem(&text("\"30\"")).contains("must be an integer, not string"));
}

#[test]
fn allow_growth_is_refused_naming_only_if_smaller() {
    let refusal = |line: usize, section: &str| {
        format!(
            "t.toml:{line}:1: allow_growth: unknown key in {section}: use only_if_smaller, its opposite: allow_growth = false is only_if_smaller = true, and without it kpress stores the codec the policy names, as Kafka's compression.type does"
        )
    };
    for allow in ["true", "false", "\"yes\""] {
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[defaults]\ncompression.type = \"lz4\"\n[[topics]]\nmatch = \"a\"\nallow_growth = {allow}\n"
            )),
            refusal(11, "[[topics]]")
        );
    }
    assert_eq!(
        one_problem(&format!(
            "{HEAD}[defaults]\nonly_if_smaller = true\nallow_growth = true\n"
        )),
        refusal(9, "[defaults]")
    );
}

#[test]
fn a_listener_bind_and_bootstrap_servers_are_enough() {
    let two_keys = |bind: &str| {
        format!(
            "[listener]\nbind = \"{bind}\"\n[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n"
        )
    };
    // Kafka's usual port: broker node N on 9192 + N, advertised as the bind address.
    let c = parse(&two_keys("127.0.0.1:9092"), "t").unwrap();
    assert_eq!(ports(&c), ("127.0.0.1", 9192));
    assert!(c.warnings.is_empty());
    let c = parse(&two_keys("[::1]:19092"), "t").unwrap();
    assert_eq!(ports(&c), ("::1", 19192));
    // A wildcard bind is advertised as this machine's name.
    let c = parse(&two_keys("0.0.0.0:9092"), "t").unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(ports(&c), (host.trim(), 9192));
    // The highest bind port with room for the default.
    assert_eq!(
        ports(&parse(&two_keys("127.0.0.1:65435"), "t").unwrap()).1,
        65535
    );
    assert_eq!(
        one_problem(&two_keys("127.0.0.1:65436")),
        "t.toml:2:8: listener.node_port_base: missing: the default, listener.bind's port + 100 = 65536, is past 65535; set node_port_base (broker node N is served on node_port_base + N) (allowed: 1..65535)"
    );
}

#[test]
fn duplicate_patterns_are_refused() {
    let text = format!("{HEAD}[[topics]]\nmatch = \"logs.*\"\n[[topics]]\nmatch = \"logs.*\"\n");
    assert_eq!(
        one_problem(&text),
        "t.toml:10:9: match = \"logs.*\": same pattern as the rule at line 8, which always wins (first match wins)"
    );
}

#[test]
fn syntax_errors_are_located() {
    let p = problems(&format!("{HEAD}[defaults\ncompression.type = \"zstd\"\n"));
    assert!(p[0].to_string().starts_with("t.toml:7:"), "{p:#?}");
    assert!(p[0].message.starts_with("TOML syntax"), "{p:#?}");
    let p = problems(&format!(
        "{HEAD}[defaults]\ncompression.type = \"gzip\"\ncompression.type = \"lz4\"\n"
    ));
    assert!(p[0].to_string().starts_with("t.toml:9:"), "{p:#?}");
}

#[test]
fn first_matching_rule_wins_and_lookups_are_cached() {
    let text = format!(
        r#"{HEAD}[defaults]
compression.type = "producer"
[[topics]]
match = "logs.audit"
compression.type = "gzip"
[[topics]]
match = "logs.*"
compression.type = "zstd"
[[topics]]
match = "re:logs\\.(audit|x)"
compression.type = "lz4"
[[topics]]
match = "metrics.?"
compression.type = "snappy"
only_if_smaller = true
"#
    );
    let config = parse(&text, "t").unwrap();
    let set = PolicySet::new(&config);
    let codec = |topic: &str| match &set.policy_for(topic).target {
        Target::Producer => "producer".to_owned(),
        Target::Codec { codec, .. } => codec.name().to_owned(),
        Target::Unresolved(reason) => reason.as_str().to_owned(),
    };
    assert_eq!(codec("logs.audit"), "gzip");
    assert_eq!(codec("logs.x"), "zstd", "the glob comes before the regex");
    assert_eq!(codec("logs.app"), "zstd");
    assert_eq!(codec("metrics.a"), "snappy");
    assert_eq!(codec("metrics.ab"), "producer");
    assert_eq!(codec("other"), "producer");
    assert_eq!(set.rule_index("logs.audit"), Some(0));
    assert_eq!(set.rule_index("other"), None);
    assert!(set.policy_for("metrics.a").only_if_smaller);
    assert!(!set.policy_for("logs.app").only_if_smaller);
    assert_eq!(set.policy_for("logs.app").max_batch_bytes, 1_048_588);
    assert_eq!(set.cached_topics(), 6);
    // Cached answers are the same answers.
    assert_eq!(codec("logs.audit"), "gzip");
    assert_eq!(set.cached_topics(), 6);
}

#[test]
fn the_cache_stays_bounded() {
    let config = parse(
        &format!("{HEAD}[[topics]]\nmatch = \"t*\"\ncompression.type = \"lz4\"\n"),
        "t",
    )
    .unwrap();
    let set = PolicySet::new(&config);
    for i in 0..kpress_config::CACHE_CAPACITY + 10 {
        let topic = format!("t{i}");
        assert!(matches!(
            set.policy_for(&topic).target,
            Target::Codec {
                codec: Codec::Lz4,
                ..
            }
        ));
    }
    assert!(set.cached_topics() <= kpress_config::CACHE_CAPACITY);
}

#[test]
fn limits_reach_every_policy() {
    let text = format!("{HEAD}[limits]\nmax_batch_bytes = 5000\nmax_decompressed_bytes = 9000\n[[topics]]\nmatch = \"a\"\ncompression.type = \"zstd\"\n");
    let set = PolicySet::new(&parse(&text, "t").unwrap());
    for topic in ["a", "b"] {
        let p = set.policy_for(topic);
        assert_eq!((p.max_batch_bytes, p.max_decompressed_bytes), (5000, 9000));
    }
}

#[test]
fn load_names_the_file_and_reports_unreadable_files() {
    let err = kpress_config::load(std::path::Path::new("/nonexistent/kpress.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(
        err.to_string()
            .starts_with("cannot read /nonexistent/kpress.toml: "),
        "{err}"
    );
    assert!(err.problems().is_empty());
}

/// Every file a policy names (certificates, keys, CAs, the password file).
fn named_files(config: &Config) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(tls) = &config.listener.tls {
        files.extend([tls.cert.clone(), tls.key.clone()]);
        files.extend(tls.client_ca.clone());
    }
    if let Some(tls) = &config.upstream.tls {
        files.extend(tls.ca.clone());
        if let Some((cert, key)) = &tls.client_cert {
            files.extend([cert.clone(), key.clone()]);
        }
    }
    if let Some(UpstreamSasl {
        password: PasswordSource::File(path),
        ..
    }) = &config.upstream.sasl
    {
        files.push(path.clone());
    }
    files
}

/// The examples name certificates and secrets that do not ship: `load` reports exactly
/// those, and accepts each example once they are beside it (its paths are relative).
#[test]
fn the_shipped_example_files_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let mut seen = 0;
    let mut naming_files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        seen += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let config = parse(&text, "example.toml").unwrap_or_else(|e| panic!("{e}"));
        assert!(!config.topics.is_empty(), "{}", path.display());
        let files = named_files(&config);
        if files.is_empty() {
            kpress_config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            continue;
        }
        naming_files += 1;
        let in_place = kpress_config::load(&path).unwrap_err();
        assert_eq!(in_place.problems().len(), files.len(), "{in_place}");
        for problem in in_place.problems() {
            assert!(problem.message.starts_with("file not found: "), "{problem}");
        }
        let beside = TempDir::new(&format!("example-{seen}"));
        let copy = beside.write("kpress.toml", &text);
        for file in &files {
            assert!(file.is_relative(), "{}: {}", path.display(), file.display());
            beside.write(file.to_str().unwrap(), "");
        }
        let loaded = kpress_config::load(&copy).unwrap_or_else(|e| panic!("{e}"));
        assert!(named_files(&loaded)
            .iter()
            .all(|f| f.starts_with(beside.path())));
    }
    assert!(seen >= 5, "config/kpress.toml and the examples");
    assert_eq!(naming_files, 2, "tls-sasl-ssl.toml and sni.toml");
}

#[test]
fn a_misspelt_key_is_matched_to_the_known_one_it_is_a_typo_of() {
    let p = problem_texts(&format!(
        "{HEAD}[defaults]\ncompresion.type = \"zstd\"\ncompression.zstd.levle = 3\nmax_batch = 1\n"
    ));
    assert!(
        p[0].starts_with("t.toml:8:12: compresion.type: unknown key in [defaults] (allowed: ")
            && p[0].ends_with("; did you mean compression.type?"),
        "{}",
        p[0]
    );
    assert!(
        p[1].ends_with("; did you mean compression.zstd.level?"),
        "{}",
        p[1]
    );
    // Nothing near enough: only the list of known keys.
    assert!(p[2].ends_with("overload.max_cpu_share)"), "{}", p[2]);
    let p = one_problem(&format!("{HEAD}[[topic]]\nmatch = \"a\"\n"));
    assert!(
        p.ends_with("unknown section (allowed: listener, upstream, limits, admin, log, shadow, overload, defaults, topics, consumers, clients, autopilot); did you mean topics?"),
        "{p}"
    );
}

#[test]
fn topic_config_refresh_ms_is_1000_to_3600000() {
    let with = |ms: i64| {
        HEAD.replacen(
            "bootstrap_servers",
            &format!("topic_config_refresh_ms = {ms}\nbootstrap_servers"),
            1,
        )
    };
    for ms in [1_000, 3_600_000] {
        let c = parse(&with(ms), "t").unwrap();
        assert_eq!(c.upstream.topic_config_refresh.as_millis(), ms as u128);
    }
    for ms in [999, 3_600_001] {
        let p = one_problem(&with(ms));
        assert!(
            p.ends_with(&format!(
                "upstream.topic_config_refresh_ms = {ms}: out of range (allowed: 1000..3600000)"
            )),
            "{p}"
        );
    }
}

/// Answers from a fixed table, as the proxy's cache would after a refresh.
struct Answers(Vec<(&'static str, TopicCompression)>);

impl TopicConfigSource for Answers {
    fn topic_compression(&self, topic: &str) -> TopicCompression {
        self.0
            .iter()
            .find(|(t, _)| *t == topic)
            .map_or(TopicCompression::Pending, |(_, c)| *c)
    }
}

#[test]
fn topic_mode_resolves_each_topic_to_its_own_codec_and_level() {
    let text = format!(
        "{HEAD}[[topics]]\nmatch = \"fixed\"\ncompression.type = \"lz4\"\n\
         [[topics]]\nmatch = \"smaller.*\"\nonly_if_smaller = true\n"
    );
    let config = parse(&text, "t").unwrap();
    let known = |compression: &str, level, source| TopicCompression::Known {
        compression: compression.parse().unwrap(),
        level,
        source,
    };
    let answers = Answers(vec![
        ("z10", known("zstd", Some(10), TargetSource::Topic)),
        (
            "inherits",
            known("gzip", Some(1), TargetSource::BrokerDefault),
        ),
        ("as-sent", known("producer", None, TargetSource::Default)),
        ("plain", known("uncompressed", None, TargetSource::Topic)),
        ("denied", TopicCompression::Denied),
        ("smaller.z", known("zstd", None, TargetSource::Topic)),
        ("fixed", known("zstd", None, TargetSource::Topic)),
    ]);
    let set = PolicySet::with_topic_configs(&config, std::sync::Arc::new(answers));
    assert!(set.has_topic_mode());
    let level = |topic: &str, key: &str| match &set.policy_for(topic).target {
        Target::Codec { options, .. } => options.get(key),
        other => panic!("{topic}: {other:?}"),
    };
    assert_eq!(set.policy_for("z10").target.name(), "zstd");
    assert_eq!(level("z10", "compression.zstd.level"), Some(10));
    assert_eq!(level("inherits", "compression.gzip.level"), Some(1));
    assert_eq!(set.policy_for("as-sent").target, Target::Producer);
    assert_eq!(set.policy_for("plain").target.name(), "none");
    assert_eq!(
        set.policy_for("denied").target,
        Target::Unresolved(PassReason::TopicConfigDenied)
    );
    assert_eq!(
        set.policy_for("new-topic").target,
        Target::Unresolved(PassReason::TopicConfigPending)
    );
    // A rule naming a codec wins over the topic's config; a topic-mode rule keeps its
    // other settings.
    assert_eq!(set.policy_for("fixed").target.name(), "lz4");
    assert!(!set.follows_topic("fixed"));
    assert!(set.policy_for("smaller.z").only_if_smaller);
    assert_eq!(level("smaller.z", "compression.zstd.level"), Some(3));
    for (topic, source) in [
        ("fixed", TargetSource::Rule),
        ("z10", TargetSource::Topic),
        ("inherits", TargetSource::BrokerDefault),
        ("denied", TargetSource::Unresolved),
    ] {
        assert_eq!(set.target_source(topic), source, "{topic}");
    }
    // Every codec setting a topic may resolve to is in use: its compressors are kept.
    let mut zstd10 = CompressionOptions::default();
    zstd10.set_int("compression.zstd.level", 10).unwrap();
    assert!(set.uses(Codec::Zstd, &zstd10));
    // Without a source, topic-mode topics pass as sent, counted.
    let alone = PolicySet::new(&config);
    assert_eq!(
        alone.policy_for("z10").target,
        Target::Unresolved(PassReason::TopicConfigUnavailable)
    );
}
