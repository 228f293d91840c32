//! A side connection kept between kpress's own requests to the cluster (topic-id
//! lookups, topic configs), so that they do not open a connection, a TLS session and
//! a login each time.
//!
//! Before a request, a kept connection whose SASL session (KIP-368) is due logs in
//! again, and one whose session has ended is replaced. A kept connection the broker
//! has closed since (idle past `connections.max.idle.ms`, a restart) fails its
//! request: the request is sent once more on a new connection.

use std::future::Future;
use std::time::{Duration, Instant};

use super::SideChannel;
use crate::error::ConnectionError;
use crate::transport::Stream;

/// The share of a session's lifetime after which the connection logs in again,
/// leaving room for a slow token endpoint before the broker would close it.
const REAUTHENTICATE_AT: f64 = 0.8;

/// At most one connection, kept while requests on it succeed.
#[derive(Default)]
pub(crate) struct KeptSide {
    kept: Option<Side>,
}

struct Side {
    stream: Stream,
    /// When to log in again, and when the broker's session ends, if it set a lifetime.
    session: Option<Session>,
}

#[derive(Debug, Clone, Copy)]
struct Session {
    /// [`REAUTHENTICATE_AT`] into the lifetime.
    reauthenticate_at: Instant,
    /// Past this the broker closes the connection on its next request, a
    /// re-authentication included: a new connection is opened instead.
    ends_at: Instant,
}

impl Session {
    fn starting_now(lifetime: Option<Duration>) -> Option<Session> {
        let now = Instant::now();
        lifetime.map(|lifetime| Session {
            reauthenticate_at: now + lifetime.mul_f64(REAUTHENTICATE_AT),
            ends_at: now + lifetime,
        })
    }
}

impl KeptSide {
    /// Runs `exchange` on the kept connection, or on a new one to the first bootstrap
    /// server that accepts and logs kpress in. `exchange` hands the stream back with
    /// its answer to keep the connection. When it fails on a connection kept from
    /// before, it runs once more on a new one; when it fails on a new one, its error
    /// is returned and nothing is kept.
    pub(crate) async fn run<T, E, F>(
        &mut self,
        side: &SideChannel,
        mut exchange: impl FnMut(Stream) -> F,
    ) -> Result<T, E>
    where
        F: Future<Output = Result<(T, Stream), E>>,
        E: From<ConnectionError> + std::fmt::Display,
    {
        if let Some(side) = self.take_ready(side).await {
            match exchange(side.stream).await {
                Ok((answer, stream)) => {
                    self.kept = Some(Side {
                        stream,
                        session: side.session,
                    });
                    return Ok(answer);
                }
                Err(err) => {
                    tracing::debug!(error = %err, "side connection lost; opening a new one");
                }
            }
        }
        let (stream, lifetime) = side.session_any().await?;
        let session = Session::starting_now(lifetime);
        let (answer, stream) = exchange(stream).await?;
        self.kept = Some(Side { stream, session });
        Ok(answer)
    }

    /// The kept connection, logged in again if its session is due; `None` when there
    /// is none, its session has ended, or the login fails.
    async fn take_ready(&mut self, side_channel: &SideChannel) -> Option<Side> {
        let mut side = self.kept.take()?;
        let now = Instant::now();
        let Some(session) = side.session else {
            return Some(side);
        };
        if now >= session.ends_at {
            tracing::debug!("side connection's session ended while idle; opening a new one");
            return None;
        }
        if now < session.reauthenticate_at {
            return Some(side);
        }
        match side_channel.reauthenticate(&mut side.stream).await {
            Ok(lifetime) => {
                tracing::debug!(?lifetime, "side connection re-authenticated");
                side.session = Session::starting_now(lifetime);
                Some(side)
            }
            Err(err) => {
                tracing::debug!(error = %err, "side connection's login failed; opening a new one");
                None
            }
        }
    }
}
