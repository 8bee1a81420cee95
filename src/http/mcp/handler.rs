//! The MCP server itself: what `/mcp` says it is (name, version, instructions, capabilities)
//! and where each request goes: tools to [`super::tool_calls`], resources to
//! [`super::resources`], subscriptions to [`super::subscriptions`].
//!
//! Invariants kept here:
//! - One handler per MCP session (2025-11-25) or per request (2026-07-28, which has no
//!   sessions); a session's subscriptions live and die with its handler.
//! - An unknown tool is a JSON-RPC invalid-params error (the protocol's, not a tool result);
//!   what a known tool refuses is its result, with `isError`.
//! - A `subscriptions/listen` streams only while the accept loop holds an event-stream place
//!   for it; one that came without (no `Mcp-Method` header naming it) is refused.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::super::AppState;
use super::super::error::quoted;
use super::super::routes::HoldsStreamPlace;
use super::resources::{self, Named};
use super::subscriptions::{Listener, SessionSubscriptions, follow, listen_to};
use super::{tool_calls, tools};

/// What a model is told about this server when it connects.
const INSTRUCTIONS: &str = "\
murmur-registry knows every murmur capsule session running on this machine, each verified: \
its process is alive, it is still the same process, and its door (A2A endpoint) answers as the \
session. To find peers, call find_peers (optionally with a skill id or tag, or a capsule name): \
it returns live sessions with their agent cards; talk to a peer at its card's url. \
list_sessions, get_session, get_liveness and get_card read and change nothing. \
stop_session asks the session's door to cancel its tasks, then sends SIGTERM, waits, and \
SIGKILL if needed: the capsule ends and its work stops; it never signals a process that is not \
the session's own. signal_session sends one signal the same way; prune only removes records \
of sessions already gone. Read murmur://sessions (or murmur://sessions/{session_id}) and \
subscribe to hear when it changes.";

/// One MCP session's (or one stateless request's) server.
#[derive(Debug)]
pub(super) struct McpHandler {
    state: AppState,
    subscriptions: SessionSubscriptions,
}

impl McpHandler {
    pub(super) fn new(state: AppState) -> Self {
        Self {
            state,
            subscriptions: SessionSubscriptions::default(),
        }
    }
}

// `resources/subscribe` and `unsubscribe` are the 2025-11-25 revision's, which `/mcp` speaks
// besides 2026-07-28's `subscriptions/listen`; rmcp marks them deprecated for that reason.
#[allow(deprecated)]
impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_tools()
            .build();
        let implementation = Implementation::new("murmur-registry", env!("CARGO_PKG_VERSION"))
            .with_title("murmur registry")
            .with_description("The verified registry of running murmur capsules on this machine");
        ServerConfig::new(capabilities)
            .with_server_info(implementation)
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let fleet = self.state.fleet().own_host().is_some();
        Ok(ListToolsResult::with_all_items(tools::catalogue(fleet)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match tool_calls::call(&self.state, &request.name, request.arguments).await {
            Some(result) => Ok(result.into()),
            None => Err(ErrorData::invalid_params(
                format!(
                    "no tool named {}; tools/list lists them",
                    quoted(&request.name)
                ),
                None,
            )),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(
            resources::list(&self.state).await?,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        resources::read(&self.state, &request.uri)
            .await
            .map(Into::into)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // A session that never existed, or a URI that names nothing, is not subscribed to.
        resources::exists(&self.state, &request.uri).await?;
        self.subscriptions
            .subscribe(self.state.events(), request.uri, context.peer.clone())
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.unsubscribe(&request.uri).await;
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.resources_list_changed = requested.resources_list_changed;
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|uri| Named::parse(uri).is_some())
                .cloned()
                .collect()
        });
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        if !holds_a_stream_place(&context) {
            return Err(ErrorData::header_mismatch(
                "a subscriptions/listen request names its method in the Mcp-Method header: its \
                 stream takes an event-stream place (--max-event-streams)",
                None,
            ));
        }
        let accepted = context.accepted();
        let uris: HashSet<String> = accepted
            .resource_subscriptions
            .iter()
            .flatten()
            .cloned()
            .collect();
        let list_changed = accepted.resources_list_changed == Some(true);
        if uris.is_empty() && !list_changed {
            // Nothing of ours was asked for: no listener of the live view is taken.
            context.cancelled().await;
            return Ok(());
        }
        let listener = Listener::Listen {
            sink: context.sink().clone(),
            list_changed,
        };
        let subscription = listen_to(self.state.events()).await?;
        let monitor = self.state.events().clone();
        let following = follow(monitor, subscription, Arc::new(Mutex::new(uris)), listener);
        tokio::select! {
            () = context.cancelled() => {}
            () = following => {}
        }
        Ok(())
    }
}

/// Whether the accept loop holds an event-stream place for the request behind `context`
/// (it takes one for a POST whose `Mcp-Method` is `subscriptions/listen`).
fn holds_a_stream_place(context: &SubscriptionContext) -> bool {
    (context.request_context().extensions.get::<Parts>())
        .is_some_and(|parts| parts.extensions.get::<HoldsStreamPlace>().is_some())
}
