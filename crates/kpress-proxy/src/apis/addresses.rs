//! Broker addresses in responses: every node address a broker hands out (Metadata,
//! FindCoordinator, DescribeCluster, KIP-951 `NodeEndpoints` in Produce and Fetch,
//! ShareFetch and ShareAcknowledge) becomes kpress's, and the node's listener is bound
//! before the client can use it. Anything that would let a real broker address through
//! is an error that closes the connection.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use kpress_protocol::frame::{response_header_len, RequestHeader, SIZE_PREFIX_LEN};
use kpress_protocol::{rewrite_response, rewrites_response};

use crate::error::ConnectionError;
use crate::handler::{
    ApiHandler, ConnectionContext, Frame, HandlerError, Message, RequestContext, ResponseStep,
};

/// The handler of APIs whose only change is their responses' addresses.
#[derive(Debug)]
pub(crate) struct NodeAddresses;

impl ApiHandler for NodeAddresses {
    fn on_response(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<ResponseStep, HandlerError> {
        rewrite(conn, request, frame)
    }
}

/// The response step of a response that may carry broker addresses (or, for
/// ApiVersions, versions to cap): relayed as read when nothing changes.
pub(crate) fn rewrite(
    conn: &ConnectionContext,
    request: &RequestContext,
    frame: Frame,
) -> Result<ResponseStep, HandlerError> {
    let header = request.header();
    if !rewrites_response(header.api_key, header.api_version) {
        return Ok(ResponseStep::Relay(Message::original(frame)));
    }
    Ok(match rewrite_addresses(&frame, header, conn)? {
        Some(bytes) => ResponseStep::Replace(bytes),
        None => ResponseStep::Relay(Message::original(frame)),
    })
}

/// The response with every broker address replaced by kpress's, or `None` if it needs
/// no change. Listeners for newly seen nodes are bound before it is relayed.
pub(crate) fn rewrite_addresses(
    frame: &Frame,
    request: &RequestHeader,
    conn: &ConnectionContext,
) -> Result<Option<BytesMut>, ConnectionError> {
    let body = frame.body();
    let header_len = response_header_len(request.api_key, request.api_version, body)
        .map_err(ConnectionError::BrokerFrame)?
        // Only known API keys are rewritten, so the header length is known.
        .unwrap_or(4);
    let mut observer = conn.address_observer();
    let new_body = rewrite_response(
        request.api_key,
        request.api_version,
        &body[header_len..],
        &mut observer,
    )
    .map_err(ConnectionError::Response)?;
    if let Some(problem) = observer.problems.into_iter().next() {
        return Err(ConnectionError::Listener(problem));
    }
    conn.serve_nodes(&observer.nodes_without_listener)
        .map_err(ConnectionError::Listener)?;
    let Some(new_body) = new_body else {
        return Ok(None);
    };
    let size = header_len + new_body.len();
    let size = i32::try_from(size).map_err(|_| ConnectionError::ResponseTooLarge(size))?;
    let mut out = BytesMut::with_capacity(SIZE_PREFIX_LEN + size as usize);
    out.put_i32(size);
    out.put_slice(&body[..header_len]);
    out.put_slice(&new_body);
    Ok(Some(out))
}
