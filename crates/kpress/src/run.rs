//! (to be written)

#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn main(_args: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not yet implemented")
}
