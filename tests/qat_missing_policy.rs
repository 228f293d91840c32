//! A host without QATzip (`QATZIP_LIB_DIR` names an empty directory): a policy file
//! naming `qat` is refused when it is read, located, with the providers this host has;
//! `auto` is accepted. Alone in its own test binary: QATzip is probed once per process.
//! The providers listed include `isal`, so it needs ISA-L (libisal2, scripts/setup.sh).

use kpress_config::{parse, ConfigError};

#[test]
fn naming_a_provider_this_host_lacks_is_a_config_error() {
    let empty =
        std::env::temp_dir().join(format!("kpress-config-no-qatzip-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    std::env::set_var("QATZIP_LIB_DIR", &empty);

    let head = r#"[listener]
bind = "127.0.0.1:19092"
node_port_base = 19100
[upstream]
bootstrap_servers = ["127.0.0.1:9092"]
"#;
    let text = format!(
        "{head}[[topics]]\nmatch = \"a\"\ncompression.type = \"gzip\"\ncompression.gzip.provider = \"qat\"\n"
    );
    let problems = match parse(&text, "t.toml") {
        Err(ConfigError::Invalid(p)) => p,
        other => panic!("expected a problem, got {other:?}"),
    };
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let p = problems[0].to_string();
    assert!(
        p.starts_with("t.toml:9:29: compression.gzip.provider = \"qat\": provider named explicitly but not available on this host: ")
            && p.contains("libqatzip.so.3 not found")
            && p.ends_with(" (allowed: auto, isal, libdeflate, zlib)"),
        "{p}"
    );

    let auto = text.replace("\"qat\"", "\"auto\"");
    let config = parse(&auto, "t.toml").unwrap();
    assert!(
        config.topics[0]
            .policy
            .to_string()
            .contains("compression.gzip.provider=auto (libdeflate)"),
        "{}",
        config.topics[0].policy
    );
    std::fs::remove_dir(&empty).unwrap();
}
