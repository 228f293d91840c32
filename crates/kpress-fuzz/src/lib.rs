//! The bodies of kpress's fuzz targets, with the invariants each checks.
//!
//! `fuzz/` (a `cargo fuzz` project, nightly) wraps each function in a one-line
//! libFuzzer target; the functions themselves build on stable, so `cargo test`
//! replays every saved corpus entry and regression (`tests/replay.rs`). A violated
//! invariant panics, which libFuzzer reports as a crash.
//!
//! | target | input |
//! |---|---|
//! | [`request_frame`] | policy byte, request byte, a request frame |
//! | [`response_rewrite`] | API key byte, API version byte, a response body |
//! | [`codec_decode`] | selector byte (codec, limit, options), a payload |
//! | [`batch_rewrite`] | policy byte, request byte, a record batch |
//! | [`policy_parse`] | a policy file's text |
//!
//! Only public entry points are called: the targets hold whatever internals the
//! crates under test change to.

mod batch_rewrite;
mod check;
mod choice;
mod codec_decode;
mod heap;
mod policy_parse;
mod request_frame;
mod response_rewrite;

pub use batch_rewrite::batch_rewrite;
pub use codec_decode::codec_decode;
pub use policy_parse::policy_parse;
pub use request_frame::request_frame;
pub use response_rewrite::response_rewrite;
