//! SaslHandshake: v0 is refused. It is followed by SASL tokens without Kafka headers,
//! which kpress cannot tell from requests; relaying them blind could let broker
//! addresses through. v1 is relayed (the connection's authentication watch follows it).

use std::sync::Arc;

use crate::error::ConnectionError;
use crate::handler::{
    ApiHandler, ConnectionContext, Frame, HandlerError, Message, RequestContext, RequestStep,
};

#[derive(Debug)]
pub(crate) struct SaslHandshake;

impl ApiHandler for SaslHandshake {
    fn on_request(
        &self,
        _conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<RequestStep, HandlerError> {
        if request.api_version() == 0 {
            return Err(ConnectionError::LegacySaslHandshake.into());
        }
        Ok(RequestStep::Forward(Message::original(frame)))
    }
}
