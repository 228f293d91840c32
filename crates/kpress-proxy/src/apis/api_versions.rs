//! ApiVersions: a request newer than kpress parses is answered here, as a broker
//! answers a version it does not know, so the client retries lower instead of looping;
//! the broker's answer to any other is capped to the versions kpress parses. The
//! software a v3+ request names is kept on the connection for every handler
//! ([`ConnectionContext::client_software`]).

use std::sync::Arc;

use kpress_protocol::{answer_unsupported_api_versions, api_versions_client_software};

use super::addresses;
use crate::handler::{
    ApiHandler, ClientSoftware, ConnectionContext, Frame, HandlerError, Message, RequestContext,
    RequestStep, ResponseStep,
};
use crate::metrics;

#[derive(Debug)]
pub(crate) struct ApiVersions;

impl ApiHandler for ApiVersions {
    fn on_request(
        &self,
        conn: &Arc<ConnectionContext>,
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
            None => {
                if let Some(software) = client_software(request, &frame) {
                    conn.set_client_software(software);
                }
                Ok(RequestStep::Forward(Message::original(frame)))
            }
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

/// The software an ApiVersions request names, bounded; `None` if it names none kpress
/// keeps (older versions, a malformed body, characters Kafka does not allow).
fn client_software(request: &RequestContext, frame: &Frame) -> Option<ClientSoftware> {
    let body = frame.body().get(request.header().header_len?..)?;
    let (name, version) = api_versions_client_software(request.api_version(), body)?;
    ClientSoftware::new(name, version)
}
