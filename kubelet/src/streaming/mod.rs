//! The kubelet's streaming endpoints, which the apiserver's `pods/exec`,
//! `pods/attach` and `pods/portforward` proxy to unchanged:
//! `/exec/{namespace}/{pod}/{container}`, `/attach/…` (output only) and
//! `/portForward/{namespace}/{pod}`, over WebSocket (the `*.channel.k8s.io`
//! subprotocols; for port-forward also SPDY tunnelled in WebSocket) and
//! over SPDY/3.1. Requests that cannot be served are refused with a
//! plain-text error before any upgrade.

mod attach;
mod channel;
mod exec;
mod idle;
mod portforward;
pub(crate) mod pty;
mod session;
pub mod spdy;
mod status;
mod tunnel;
mod websocket;
mod websocket_portforward;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

pub use channel::{ChannelProtocol, TerminalSize};
pub use exec::ExecRequest;
pub use status::ExecOutcome;

use self::idle::{Activity, Watched};
use self::session::Session;
use crate::runtime::{ContainerHandle, ProcessRuntime};

/// Finds the running container a stream is for.
pub trait ContainerFinder: Send + Sync + 'static {
    /// The container `container` of pod `namespace/pod`, if it runs; else
    /// the HTTP refusal the client gets.
    fn running_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<ContainerHandle, Refusal>;

    /// Whether pod `namespace/pod` runs here, for port-forward; else the
    /// HTTP refusal the client gets.
    /// Its network namespace, `None` where it shares the host's.
    fn running_pod(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<Option<std::path::PathBuf>, Refusal>;
}

/// Why a stream is refused, as the status code and plain-text message the
/// apiserver relays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: StatusCode,
    pub message: String,
}

impl Refusal {
    pub fn new(code: StatusCode, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (
            self.code,
            [(header::CONTENT_TYPE, "text/plain")],
            self.message,
        )
            .into_response()
    }
}

pub use idle::DEFAULT_IDLE_TIMEOUT;

#[derive(Clone)]
struct Streaming {
    finder: Arc<dyn ContainerFinder>,
    runtime: Arc<ProcessRuntime>,
    idle_timeout: Duration,
}

/// The streaming routes, to merge into the kubelet's router, with the
/// default idle timeout.
pub fn router<S: Clone + Send + Sync + 'static>(
    finder: Arc<dyn ContainerFinder>,
    runtime: Arc<ProcessRuntime>,
) -> Router<S> {
    router_with_idle_timeout(finder, runtime, DEFAULT_IDLE_TIMEOUT)
}

/// The streaming routes; a connection idle for `idle_timeout` is closed.
pub fn router_with_idle_timeout<S: Clone + Send + Sync + 'static>(
    finder: Arc<dyn ContainerFinder>,
    runtime: Arc<ProcessRuntime>,
    idle_timeout: Duration,
) -> Router<S> {
    Router::new()
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(exec_handler).post(exec_handler),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(attach_handler).post(attach_handler),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(port_forward_handler).post(port_forward_handler),
        )
        .with_state(Streaming {
            finder,
            runtime,
            idle_timeout,
        })
}

async fn exec_handler(
    State(streaming): State<Streaming>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    request: Request,
) -> Response {
    let exec_request = match stream_request(&query, true) {
        Ok(exec_request) => exec_request,
        Err(refusal) => return refusal.into_response(),
    };
    let handle = match streaming
        .finder
        .running_container(&namespace, &pod, &container)
    {
        Ok(handle) => handle,
        Err(refusal) => return refusal.into_response(),
    };
    let context = match streaming.runtime.exec_context(handle.id()) {
        Ok(context) => context,
        Err(err) => {
            return Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot exec in container {container}: {err}"),
            )
            .into_response()
        }
    };
    let session = Session::Exec {
        context,
        request: exec_request,
    };
    serve_session(request, session, streaming.idle_timeout).await
}

async fn attach_handler(
    State(streaming): State<Streaming>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    request: Request,
) -> Response {
    let attach_request = match stream_request(&query, false) {
        Ok(attach_request) => attach_request,
        Err(refusal) => return refusal.into_response(),
    };
    let handle = match streaming
        .finder
        .running_container(&namespace, &pod, &container)
    {
        Ok(handle) => handle,
        Err(refusal) => return refusal.into_response(),
    };
    let context = match streaming.runtime.exec_context(handle.id()) {
        Ok(context) => context,
        Err(err) => {
            return Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot attach to container {container}: {err}"),
            )
            .into_response()
        }
    };
    if attach_request.tty && !context.tty {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            format!(
                "container {container} in pod {pod} has no terminal to attach to: it was started without tty: true (omit -t, or set tty: true on the container)"
            ),
        )
        .into_response();
    }
    if attach_request.stdin && !context.stdin {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            format!(
                "container {container} in pod {pod} was started without stdin; attach can only stream its output (omit -i, or set stdin: true on the container)"
            ),
        )
        .into_response();
    }
    // A terminal's output comes through the socket; stdin without one is
    // written there only when the client sends it.
    let stdin_socket = if context.tty || attach_request.stdin {
        context.stdin_socket.clone()
    } else {
        None
    };
    let log_path = streaming
        .runtime
        .container_logs(handle.id())
        .path(handle.id().attempt);
    let session = Session::Attach {
        handle,
        log_path,
        stdin_socket,
        terminal: context.tty,
        request: attach_request,
    };
    serve_session(request, session, streaming.idle_timeout).await
}

/// Upgrades to SPDY or WebSocket, as the client asks, and runs `session`.
async fn serve_session(request: Request, session: Session, idle_timeout: Duration) -> Response {
    let (mut parts, _body) = request.into_parts();
    if is_upgrade_to(&parts.headers, "SPDY/3.1") {
        return upgrade_to_spdy(
            &mut parts,
            &spdy::REMOTECOMMAND,
            idle_timeout,
            move |io, name| {
                let version = name
                    .as_deref()
                    .and_then(spdy::RemoteCommandVersion::from_name)
                    .unwrap_or(spdy::RemoteCommandVersion(1));
                spdy::serve_exec(io, version, session)
            },
        );
    }
    if !is_upgrade_to(&parts.headers, "websocket") {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            "streaming needs a connection upgrade (Upgrade: websocket or SPDY/3.1)",
        )
        .into_response();
    }
    upgrade_to_websocket(
        &mut parts,
        &ChannelProtocol::REMOTECOMMAND,
        move |socket, name| {
            let protocol = name
                .as_deref()
                .and_then(ChannelProtocol::from_name)
                .unwrap_or(ChannelProtocol::V1);
            websocket::serve_exec(socket, protocol, session, idle_timeout)
        },
    )
    .await
}

type UpgradedIo = hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>;

/// Answers 101 with the negotiated `X-Stream-Protocol-Version` (the
/// client's first that is in `supported`; none if it offered none) and
/// runs `serve` on the connection once it is switched.
fn upgrade_to_spdy<F, Fut>(
    parts: &mut axum::http::request::Parts,
    supported: &[&str],
    idle_timeout: Duration,
    serve: F,
) -> Response
where
    F: FnOnce(Watched<UpgradedIo>, Option<String>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let offered = header_list(&parts.headers, "x-stream-protocol-version");
    let name = if offered.is_empty() {
        None
    } else {
        match offered.iter().find(|name| supported.contains(&name.as_str())) {
            Some(name) => Some(name.clone()),
            None => {
                return Refusal::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports {supported:?}"
                    ),
                )
                .into_response()
            }
        }
    };
    let Some(on_upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() else {
        return Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "this connection cannot be upgraded",
        )
        .into_response();
    };
    let chosen = name.clone();
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let activity = Activity::new();
                let io = Watched::new(hyper_util::rt::TokioIo::new(upgraded), activity.clone());
                tokio::select! {
                    () = serve(io, chosen) => {}
                    () = activity.idle_for(idle_timeout) => {
                        tracing::info!(?idle_timeout, "closing an idle streaming connection");
                    }
                }
            }
            Err(err) => tracing::debug!(%err, "a SPDY upgrade failed"),
        }
    });
    let mut response = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1");
    if let Some(name) = name {
        response = response.header("X-Stream-Protocol-Version", name);
    }
    response
        .body(axum::body::Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// SPDY in WebSocket binary messages, as kubectl 1.31 and later ask for.
const TUNNELLED_SPDY: &str = "SPDY/3.1+portforward.k8s.io";

/// The subprotocols of port-forward over WebSocket.
const PORT_FORWARD_WEBSOCKET: [&str; 4] = [
    TUNNELLED_SPDY,
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "portforward.k8s.io",
];

async fn port_forward_handler(
    State(streaming): State<Streaming>,
    Path((namespace, pod)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    request: Request,
) -> Response {
    let ports = match portforward::ports(&query) {
        Ok(ports) => ports,
        Err(refusal) => return refusal.into_response(),
    };
    let netns = match streaming.finder.running_pod(&namespace, &pod) {
        Ok(netns) => netns,
        Err(refusal) => return refusal.into_response(),
    };
    let (mut parts, _body) = request.into_parts();
    let label = portforward::ForwardTarget {
        label: format!("{namespace}/{pod}"),
        netns,
    };
    if is_upgrade_to(&parts.headers, "SPDY/3.1") {
        let idle_timeout = streaming.idle_timeout;
        return upgrade_to_spdy(
            &mut parts,
            &[spdy::portforward::PROTOCOL],
            idle_timeout,
            move |io, _| spdy::portforward::serve(io, label, ports),
        );
    }
    if !is_upgrade_to(&parts.headers, "websocket") {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            "port-forward needs a connection upgrade (Upgrade: websocket or SPDY/3.1)",
        )
        .into_response();
    }
    let tunnelled = parts
        .headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains(TUNNELLED_SPDY)));
    if ports.is_empty() && !tunnelled {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            "query parameter \"ports\" is required",
        )
        .into_response();
    }
    let idle_timeout = streaming.idle_timeout;
    upgrade_to_websocket(
        &mut parts,
        &PORT_FORWARD_WEBSOCKET,
        move |socket, name| async move {
            let protocol = match name.as_deref() {
                Some(TUNNELLED_SPDY) => {
                    let activity = Activity::new();
                    let io = Watched::new(tunnel::byte_stream(socket), activity.clone());
                    tokio::select! {
                        () = spdy::portforward::serve(io, label, ports) => {}
                        () = activity.idle_for(idle_timeout) => {
                            tracing::info!(?idle_timeout, "closing an idle port-forward connection");
                        }
                    }
                    return;
                }
                Some("v4.base64.channel.k8s.io") => ChannelProtocol::V4Base64,
                _ => ChannelProtocol::V4,
            };
            websocket_portforward::serve(socket, protocol, label, ports, idle_timeout).await
        },
    )
    .await
}

/// Every value of a header that may be repeated or comma-joined, in order.
fn header_list(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .map(str::to_string)
        .collect()
}

/// The first subprotocol the client offers that is in `supported` (in
/// the client's order, which axum's extractor does not keep): `None` if
/// none is, `Some(None)` if the client offered none.
fn negotiate(headers: &HeaderMap, supported: &[&str]) -> Option<Option<String>> {
    let offered = header_list(headers, header::SEC_WEBSOCKET_PROTOCOL.as_str());
    if offered.is_empty() {
        return Some(None);
    }
    offered
        .into_iter()
        .find(|name| supported.contains(&name.as_str()))
        .map(Some)
}

/// Accepts a WebSocket upgrade with the negotiated subprotocol and bounded
/// messages, or refuses it.
async fn upgrade_to_websocket<F, Fut>(
    parts: &mut axum::http::request::Parts,
    supported: &[&str],
    serve: F,
) -> Response
where
    F: FnOnce(axum::extract::ws::WebSocket, Option<String>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let negotiated = negotiate(&parts.headers, supported);
    let upgrade = match WebSocketUpgrade::from_request_parts(parts, &()).await {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let Some(name) = negotiated else {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            format!(
                "unable to upgrade: none of the requested subprotocols is supported; supported: {}",
                supported.join(", ")
            ),
        )
        .into_response();
    };
    let mut upgrade = upgrade
        .max_message_size(websocket::MAX_MESSAGE)
        .max_frame_size(websocket::MAX_MESSAGE);
    if let Some(value) = name.as_deref().and_then(|n| HeaderValue::from_str(n).ok()) {
        upgrade.set_selected_protocol(value);
    }
    upgrade.on_upgrade(move |socket| serve(socket, name))
}

fn is_upgrade_to(headers: &HeaderMap, protocol: &str) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|p| p.trim().eq_ignore_ascii_case(protocol))
        })
}

/// The exec or attach query as the apiserver forwards it: `command`
/// repeated (exec only), the stream flags as Go's `strconv.ParseBool`
/// reads them.
fn stream_request(query: &[(String, String)], exec: bool) -> Result<ExecRequest, Refusal> {
    let bad = |message: String| Refusal::new(StatusCode::BAD_REQUEST, message);
    let flag = |name: &str| -> Result<bool, Refusal> {
        match query.iter().rev().find(|(k, _)| k == name) {
            None => Ok(false),
            Some((_, value)) => {
                parse_bool(value).ok_or_else(|| bad(format!("{name}={value:?} is not a boolean")))
            }
        }
    };
    let command: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    if exec && command.is_empty() {
        return Err(bad(
            "you must specify at least one command for the container".into(),
        ));
    }
    let tty = flag("tty")?;
    let request = ExecRequest {
        command,
        stdin: flag("stdin")?,
        stdout: flag("stdout")?,
        // A terminal has one output; the kubelet drops stderr with tty.
        stderr: flag("stderr")? && !tty,
        tty,
    };
    if !request.stdin && !request.stdout && !request.stderr {
        return Err(bad(
            "you must specify at least 1 of stdin, stdout, stderr".into()
        ));
    }
    Ok(request)
}

fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn exec_queries_keep_every_command_word_in_order() {
        let request = stream_request(
            &query(&[
                ("command", "sh"),
                ("command", "-c"),
                ("command", "echo hi"),
                ("stdout", "true"),
                ("stderr", "1"),
            ]),
            true,
        )
        .unwrap();
        assert_eq!(request.command, ["sh", "-c", "echo hi"]);
        assert!(request.stdout && request.stderr && !request.stdin && !request.tty);
    }

    #[test]
    fn the_clients_first_served_subprotocol_is_chosen() {
        let supported = ChannelProtocol::REMOTECOMMAND;
        let mut headers = HeaderMap::new();
        assert_eq!(negotiate(&headers, &supported), Some(None));
        headers.append(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v9.channel.k8s.io, v4.channel.k8s.io"),
        );
        headers.append(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v5.channel.k8s.io"),
        );
        assert_eq!(
            negotiate(&headers, &supported),
            Some(Some("v4.channel.k8s.io".to_string()))
        );
        let mut unknown = HeaderMap::new();
        unknown.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("x"),
        );
        assert_eq!(negotiate(&unknown, &supported), None);
    }

    #[test]
    fn a_terminal_has_no_stderr() {
        let request = stream_request(
            &query(&[
                ("command", "sh"),
                ("stdin", "true"),
                ("stderr", "true"),
                ("tty", "true"),
            ]),
            true,
        )
        .unwrap();
        assert!(request.tty && request.stdin && !request.stderr);
    }

    #[test]
    fn exec_queries_without_command_streams_or_with_bad_flags_are_refused() {
        let no_command = stream_request(&query(&[("stdout", "true")]), true).unwrap_err();
        assert_eq!(no_command.code, StatusCode::BAD_REQUEST);
        let no_streams = stream_request(&query(&[("command", "ls")]), true).unwrap_err();
        assert!(
            no_streams.message.contains("at least 1 of stdin"),
            "{no_streams:?}"
        );
        let bad_flag =
            stream_request(&query(&[("command", "ls"), ("stdout", "yes")]), true).unwrap_err();
        let attach = stream_request(&query(&[("stdout", "true")]), false).unwrap();
        assert!(attach.command.is_empty() && attach.stdout);
        assert!(bad_flag.message.contains("stdout=\"yes\""), "{bad_flag:?}");
    }
}
