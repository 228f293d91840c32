//! What the policy-file tests share: a minimal valid file head and the problems a
//! text is refused with.

#![allow(dead_code)] // each test binary uses its own subset

use kpress_config::{parse, ConfigError, Problem};

/// The smallest valid file: a listener and an upstream, no policy.
pub(crate) const HEAD: &str = r#"[listener]
bind = "127.0.0.1:19092"
advertised_host = "127.0.0.1"
node_port_base = 19100
[upstream]
bootstrap_servers = ["127.0.0.1:9092"]
"#;

/// The problems `text` (named `t.toml`) is refused with; panics if it is accepted.
pub(crate) fn problems(text: &str) -> Vec<Problem> {
    match parse(text, "t.toml") {
        Ok(_) => panic!("expected problems in:\n{text}"),
        Err(ConfigError::Invalid(p)) => {
            assert!(!p.is_empty());
            p
        }
        Err(other) => panic!("unexpected {other}"),
    }
}

/// The problems as the messages a user reads.
pub(crate) fn problem_texts(text: &str) -> Vec<String> {
    problems(text).iter().map(Problem::to_string).collect()
}

/// The one problem `text` is refused with.
pub(crate) fn one_problem(text: &str) -> String {
    let p = problems(text);
    assert_eq!(p.len(), 1, "{p:#?}");
    p[0].to_string()
}
