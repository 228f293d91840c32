//! ApiVersions: a request newer than kpress parses is answered here, as a broker
//! answers a version it does not know, so the client retries lower instead of looping;
//! the broker's answer to any other is capped to the versions kpress parses.

use std::sync::Arc;

use kpress_protocol::answer_unsupported_api_versions;

use super::addresses;
use crate::handler::{
    ApiHandler, ConnectionContext, Frame, HandlerError, Message, RequestContext, RequestStep,
    ResponseStep,
};
use crate::metrics;

#[derive(Debug)]
pub(crate) struct ApiVersions;

impl ApiHandler for ApiVersions {
    fn on_request(
        &self,
        _conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<RequestStep, HandlerError> {
        let header = request.header();
        match answer_unsupported_api_versions(
            header.api_key,
            header.api_version,
            header.correlation_id,
        ) {
            Some(answer) => {
                metrics::answered_locally("ApiVersions");
                Ok(RequestStep::Answer(answer))
            }
            None => Ok(RequestStep::Forward(Message::original(frame))),
        }
    }

    fn on_response(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<ResponseStep, HandlerError> {
        // The cap is kpress-protocol's response rewrite for ApiVersions.
        addresses::rewrite(conn, request, frame)
    }
}
