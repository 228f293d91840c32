//! A small valid policy for the binary's unit tests: a listener, one broker, and
//! whatever `extra` sections a test adds.

use kpress_config::Config;

pub(crate) fn with(extra: &str) -> Config {
    kpress_config::parse(
        &format!(
            "[listener]\nbind = \"127.0.0.1:19092\"\nnode_port_base = 19100\n\
             [upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n{extra}"
        ),
        "k.toml",
    )
    .unwrap()
}
