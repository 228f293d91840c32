//! What the policy-file tests share: a minimal valid file head and the problems a
//! text is refused with.

#![allow(dead_code)] // each test binary uses its own subset

use kpress_config::{parse, Config, ConfigError, NodeRouting, Problem};

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

/// `advertised_host` and `node_port_base` of a ports-mode listener; panics in sni mode.
pub(crate) fn ports(config: &Config) -> (&str, u16) {
    match &config.listener.routing {
        NodeRouting::Ports {
            advertised_host,
            node_port_base,
        } => (advertised_host, *node_port_base),
        other => panic!("not ports mode: {other:?}"),
    }
}

/// A directory of its own under the system's temp dir, removed when dropped.
pub(crate) struct TempDir(std::path::PathBuf);

impl TempDir {
    /// `name` tells tests apart; the process id tells runs apart.
    pub(crate) fn new(name: &str) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("kpress-config-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// Writes `contents` to `relative` under the directory, creating its parents.
    pub(crate) fn write(&self, relative: &str, contents: &str) -> std::path::PathBuf {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
