//! How `check-config` and `doctor` print their result.

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Format {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON document on stdout, for scripts.
    Json,
}
