//! A client of `/mcp` speaking MCP's streamable HTTP at the wire, over keep-alive HTTP/1.1
//! connections, as any MCP client does; no SDK's own costs in the figures. It speaks either
//! revision ([`Revision`]): 2025-11-25 (`initialize`, `notifications/initialized`, requests in
//! the session, its GET stream, DELETE) or 2026-07-28 (`server/discover`, then each request
//! naming its revision in its headers and `_meta`, no session).
//!
//! Invariant: a notification's `at` is taken by the stream's reader as its bytes arrive, never
//! by whoever later takes it from the queue (the reader is `/events`' own, `event_listener`).

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, header};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::event_listener::SseReader;

const SESSION_HEADER: &str = "mcp-session-id";

/// The MCP revision a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revision {
    /// 2025-11-25: MCP sessions, a GET stream, `resources/subscribe`.
    Sessions,
    /// 2026-07-28: no sessions; every request carries its revision (served statelessly).
    PerRequest,
}

impl Revision {
    /// The revision's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sessions => "2025-11-25",
            Self::PerRequest => "2026-07-28",
        }
    }
}

/// One MCP client on one keep-alive connection: in an MCP session (2025-11-25), or asking
/// request by request (2026-07-28).
pub struct McpClient {
    sender: SendRequest<Full<Bytes>>,
    addr: String,
    authorization: String,
    revision: Revision,
    session: String,
    next_id: u64,
}

/// A request's answer: its `result`, when its last byte arrived (before it was parsed), and
/// how many bytes its body held.
pub struct Answered {
    pub result: Value,
    pub arrived: Instant,
    pub bytes: usize,
}

/// One server message read from a stream, stamped when its bytes arrived.
pub struct McpMessage {
    pub message: Value,
    pub at: Instant,
}

impl McpClient {
    /// Connect to `addr` speaking 2025-11-25: `initialize` and `notifications/initialized`.
    pub async fn open(addr: &str, token: &str) -> Self {
        Self::open_as(addr, token, Revision::Sessions).await
    }

    /// Connect to `addr` speaking `revision`: 2025-11-25 opens an MCP session, 2026-07-28 asks
    /// `server/discover` (which must name the revision among the server's).
    pub async fn open_as(addr: &str, token: &str, revision: Revision) -> Self {
        let mut client = Self {
            sender: connect(addr).await,
            addr: addr.to_owned(),
            authorization: format!("Bearer {token}"),
            revision,
            session: String::new(),
            next_id: 1,
        };
        if revision == Revision::PerRequest {
            let discovered = client.call("server/discover", json!({})).await;
            let supported = &discovered["supportedVersions"];
            let named = (supported.as_array().into_iter().flatten()).any(|v| v == revision.name());
            assert!(named, "server/discover: {discovered}");
            return client;
        }
        let initialize = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": revision.name(), "capabilities": {},
            "clientInfo": client_info() } });
        let (session, body) = client.post(&initialize).await;
        client.session = session.expect("initialize names an MCP session");
        let answer = answer_in(&body, 0);
        assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        client.post(&initialized).await;
        client
    }

    /// `method` with `params` in the session: the answer's `result` (an error panics).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.call_timed(method, params).await.result
    }

    /// [`McpClient::call`], noting when the answer's last byte arrived and its size.
    pub async fn call_timed(&mut self, method: &str, mut params: Value) -> Answered {
        let id = self.next_id;
        self.next_id += 1;
        if self.revision == Revision::PerRequest {
            // The revision's request metadata, which routes the request statelessly.
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": self.revision.name(),
                "io.modelcontextprotocol/clientInfo": client_info(),
                "io.modelcontextprotocol/clientCapabilities": {} });
        }
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let (_, body) = self.post(&request).await;
        let arrived = Instant::now();
        let mut answer = answer_in(&body, id);
        assert!(answer["error"].is_null(), "{method}: {answer}");
        Answered {
            result: answer["result"].take(),
            arrived,
            bytes: body.len(),
        }
    }

    /// Open the session's GET stream on a connection of its own; its server messages arrive on
    /// the returned queue until the reader is dropped. 2025-11-25 only.
    pub async fn stream(&self) -> McpStream {
        assert_eq!(
            self.revision,
            Revision::Sessions,
            "a GET stream needs a session"
        );
        let mut sender: SendRequest<Full<Bytes>> = connect(&self.addr).await;
        let request = self
            .request(Method::GET)
            .header(header::ACCEPT, "text/event-stream")
            .body(Full::new(Bytes::new()))
            .expect("a GET request");
        sender.ready().await.expect("connection ready");
        let response = sender.send_request(request).await.expect("GET /mcp");
        assert!(
            response.status().is_success(),
            "GET /mcp: {}",
            response.status()
        );
        McpStream::read(response.into_body(), sender)
    }

    /// End the session (`DELETE /mcp`); 2026-07-28 has none to end.
    pub async fn close(mut self) {
        if self.revision == Revision::PerRequest {
            return;
        }
        let request = self
            .request(Method::DELETE)
            .body(Full::new(Bytes::new()))
            .expect("a DELETE request");
        self.ready().await;
        let response = self
            .sender
            .send_request(request)
            .await
            .expect("DELETE /mcp");
        assert!(
            response.status().is_success(),
            "DELETE: {}",
            response.status()
        );
    }

    /// The connection, ready for a request: a new one if the registry closed it (it closes a
    /// keep-alive connection idle past its header timeout, 10 s; the MCP session lives on).
    async fn ready(&mut self) {
        if self.sender.is_closed() {
            self.sender = connect(&self.addr).await;
        }
        self.sender.ready().await.expect("connection ready");
    }

    fn request(&self, method: Method) -> hyper::http::request::Builder {
        let builder = Request::builder()
            .method(method)
            .uri("/mcp")
            .header(header::HOST, &self.addr)
            .header(header::AUTHORIZATION, &self.authorization)
            .header("mcp-protocol-version", self.revision.name());
        if self.session.is_empty() {
            builder
        } else {
            builder.header(SESSION_HEADER, &self.session)
        }
    }

    /// POST `message`: the session id the answer names, and its whole body.
    async fn post(&mut self, message: &Value) -> (Option<String>, Bytes) {
        let mut request = self
            .request(Method::POST)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream");
        if self.revision == Revision::PerRequest {
            request = with_standard_headers(request, message);
        }
        let request =
            (request.body(Full::new(Bytes::from(message.to_string())))).expect("a POST request");
        self.ready().await;
        let response = self.sender.send_request(request).await.expect("POST /mcp");
        let status = response.status();
        let session = (response.headers().get(SESSION_HEADER))
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let body = response.into_body().collect().await.expect("the answer");
        assert!(status.is_success(), "POST /mcp: {status}");
        (session, body.to_bytes())
    }
}

fn client_info() -> Value {
    json!({ "name": "murmur-registry-bench", "version": "1" })
}

/// `request` with the headers 2026-07-28 asks to repeat from `message`'s body: its method,
/// and the tool's name or the resource's URI (plain text here: ours are ASCII).
fn with_standard_headers(
    request: hyper::http::request::Builder,
    message: &Value,
) -> hyper::http::request::Builder {
    let method = message["method"].as_str().unwrap_or_default();
    let request = request.header("mcp-method", method);
    let params = &message["params"];
    match (params["name"].as_str()).or_else(|| params["uri"].as_str()) {
        Some(name) if method != "server/discover" => request.header("mcp-name", name),
        _ => request,
    }
}

async fn connect(addr: &str) -> SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.expect("connect registry");
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    sender
}

/// The JSON-RPC answer with `id` among the messages of an SSE (or plain JSON) body.
fn answer_in(body: &[u8], id: u64) -> Value {
    let text = std::str::from_utf8(body).expect("a UTF-8 answer");
    if let Ok(answer) = serde_json::from_str::<Value>(text) {
        return answer;
    }
    messages_in(text)
        .into_iter()
        .find(|message| message["id"] == id)
        .unwrap_or_else(|| panic!("no answer {id} in {} bytes", body.len()))
}

/// The JSON messages of the `data:` lines of complete SSE blocks in `text`.
fn messages_in(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|block| {
            let data: Vec<&str> = (block.lines())
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|data| data.strip_prefix(' ').unwrap_or(data))
                .collect();
            serde_json::from_str(&data.join("\n")).ok()
        })
        .collect()
}

/// An open GET stream of an MCP session, read in a task of its own (`event_listener`'s reader).
pub struct McpStream {
    messages: SseReader<McpMessage>,
    _sender: SendRequest<Full<Bytes>>,
}

impl McpStream {
    fn read(body: Incoming, sender: SendRequest<Full<Bytes>>) -> Self {
        Self {
            messages: SseReader::spawn(body, |block, at| {
                (messages_in(block).into_iter())
                    .map(|message| McpMessage { message, at })
                    .collect::<Vec<_>>()
            }),
            _sender: sender,
        }
    }

    /// The next message, or `None` once `deadline` passes or the stream ended.
    pub async fn next_before(&mut self, deadline: Instant) -> Option<McpMessage> {
        self.messages.next_before(deadline).await
    }
}
