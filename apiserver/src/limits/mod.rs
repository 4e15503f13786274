//! Limits on what clients may ask of the API server at once, as
//! kube-apiserver's `--max-requests-inflight`,
//! `--max-mutating-requests-inflight` and `--request-timeout`, plus a
//! token bucket per client and a cap on each client's open watches. A
//! request over a limit is answered at once with 429 TooManyRequests and a
//! `Retry-After` header (client libraries wait that long and retry), so a
//! flood costs the server little and never queues without bound.
//!
//! A client is its authenticated user; anonymous requests, and those of
//! the plain-HTTP port (one shared user), count against their remote IP
//! address. Long-running requests (watches,
//! followed logs, exec, attach, port-forward, proxy) do not count against
//! the in-flight caps or the request timeout; watches count against the
//! per-client watch cap, exec, attach and port-forward streams against the
//! per-client stream cap (held for as long as the upgraded stream lasts:
//! the handler takes its [`StreamSlot`] from the request). Health checks (`/healthz`, `/livez`, `/readyz`)
//! are never limited. A member of `system:masters` (the administrator, the
//! plain-HTTP loopback port) is served when the in-flight cap is reached,
//! as kube-apiserver's max-in-flight filter serves it: such a request
//! takes a slot when one is free and is not refused when none is.

mod rate;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use rate::ClientBuckets;

use crate::request_info::{is_health_check, query_flag, RequestInfo};
use crate::status::ApiError;

/// The limits, with kube-apiserver's defaults where it has them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Read requests served at once (0: no cap). kube-apiserver: 400.
    pub max_requests_inflight: usize,
    /// Writes served at once (0: no cap). kube-apiserver: 200.
    pub max_mutating_requests_inflight: usize,
    /// Requests per second each client may make on average (0: no limit).
    pub client_qps: f64,
    /// Requests a client may make at once after being idle.
    pub client_burst: u32,
    /// Watches each client may hold open (0: no cap).
    pub max_watches_per_client: usize,
    /// exec, attach and port-forward streams each client may hold open
    /// (0: no cap).
    pub max_streams_per_client: usize,
    /// Longest a request that is not long-running may take; a request's
    /// own `?timeout=` may shorten it. kube-apiserver: 60 s.
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            client_qps: 5000.0,
            client_burst: 10_000,
            max_watches_per_client: 20_000,
            max_streams_per_client: 100,
            request_timeout: Duration::from_secs(60),
        }
    }
}

/// What a request is, for the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// Health checks: never limited.
    Exempt,
    /// A watch: no in-flight slot or timeout, but the per-client watch cap.
    Watch,
    /// Followed logs, exec, attach, port-forward, proxy.
    LongRunning,
    Mutating,
    ReadOnly,
}

impl RequestKind {
    pub fn of(method: &Method, uri: &Uri) -> RequestKind {
        RequestKind::of_info(method, uri, &RequestInfo::of(method, uri))
    }

    /// The kind of a request, from the info handed down with it.
    pub fn of_request<B>(request: &axum::http::Request<B>) -> RequestKind {
        let info = RequestInfo::of_request(request);
        RequestKind::of_info(request.method(), request.uri(), &info)
    }

    fn of_info(method: &Method, uri: &Uri, info: &RequestInfo) -> RequestKind {
        if is_health_check(uri.path()) {
            return RequestKind::Exempt;
        }
        if *method == Method::GET && info.verb == "watch" {
            return RequestKind::Watch;
        }
        let streaming = info.resource.as_ref().is_some_and(|r| {
            let sub = r.subresource.as_deref();
            matches!(sub, Some("exec" | "attach" | "portforward" | "proxy"))
                || r.resource == "proxy"
                || (sub == Some("log") && query_flag(uri, "follow"))
        });
        if streaming {
            return RequestKind::LongRunning;
        }
        match *method {
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE => RequestKind::Mutating,
            _ => RequestKind::ReadOnly,
        }
    }
}

/// The remote address of a connection, put in each request's extensions
/// by the server.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// Who a request counts against: its user, or its remote address for
/// anonymous requests and the plain-HTTP port (whose users are shared).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Client {
    User(String),
    Address(IpAddr),
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::User(name) => write!(f, "user {name:?}"),
            Client::Address(ip) => write!(f, "{ip}"),
        }
    }
}

fn client_of(request: &Request) -> Option<Client> {
    let user = request.extensions().get::<crate::user::UserInfo>();
    let shared = ["system:anonymous", "system:unsecured"];
    match user {
        Some(user) if !shared.contains(&user.name.as_str()) => {
            Some(Client::User(user.name.clone()))
        }
        _ => request
            .extensions()
            .get::<Peer>()
            .map(|peer| Client::Address(peer.0.ip())),
    }
}

/// An exec, attach or port-forward request.
fn is_pod_stream(request: &Request) -> bool {
    RequestInfo::of_request(request)
        .resource
        .as_ref()
        .is_some_and(|r| {
            r.resource == "pods"
                && matches!(
                    r.subresource.as_deref(),
                    Some("exec" | "attach" | "portforward")
                )
        })
}

/// Whether the request's user is in `system:masters`.
fn is_privileged(request: &Request) -> bool {
    request
        .extensions()
        .get::<crate::user::UserInfo>()
        .is_some_and(crate::user::UserInfo::in_system_masters)
}

/// The limits' state, shared by every connection of one server.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    limits: Limits,
    read: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
    buckets: Option<ClientBuckets>,
    /// Open watches per client.
    watches: Mutex<HashMap<Client, usize>>,
    /// Open exec, attach and port-forward streams per client.
    streams: Mutex<HashMap<Client, usize>>,
}

impl Limiter {
    pub fn new(limits: Limits) -> Limiter {
        let semaphore = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Limiter {
            inner: Arc::new(Inner {
                limits,
                read: semaphore(limits.max_requests_inflight),
                mutating: semaphore(limits.max_mutating_requests_inflight),
                buckets: (limits.client_qps > 0.0)
                    .then(|| ClientBuckets::new(limits.client_qps, limits.client_burst.max(1))),
                watches: Mutex::new(HashMap::new()),
                streams: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    /// A slot among the requests in flight of this kind; `Err` when all
    /// are taken, unless the request is `privileged` (served without one).
    fn in_flight(
        &self,
        kind: RequestKind,
        privileged: bool,
    ) -> Result<Option<OwnedSemaphorePermit>, ApiError> {
        let semaphore = match kind {
            RequestKind::Mutating => &self.inner.mutating,
            RequestKind::ReadOnly => &self.inner.read,
            _ => return Ok(None),
        };
        let Some(semaphore) = semaphore else {
            return Ok(None);
        };
        match Arc::clone(semaphore).try_acquire_owned() {
            Ok(permit) => Ok(Some(permit)),
            Err(_) if privileged => Ok(None),
            Err(_) => Err(ApiError::too_many_requests(
                "Too many requests, please try again later.",
                1,
            )),
        }
    }

    /// Counts one more watch of `client`; the guard counts it off.
    fn open_watch(&self, client: Client) -> Result<CountGuard, ApiError> {
        self.open(Counted::Watches, client)
    }

    /// Counts one more exec, attach or port-forward stream of `client`.
    fn open_stream(&self, client: Client) -> Result<CountGuard, ApiError> {
        self.open(Counted::Streams, client)
    }

    fn counts(&self, counted: Counted) -> std::sync::MutexGuard<'_, HashMap<Client, usize>> {
        let counts = match counted {
            Counted::Watches => &self.inner.watches,
            Counted::Streams => &self.inner.streams,
        };
        counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open(&self, counted: Counted, client: Client) -> Result<CountGuard, ApiError> {
        let (cap, what) = match counted {
            Counted::Watches => (self.inner.limits.max_watches_per_client, "watches"),
            Counted::Streams => (self.inner.limits.max_streams_per_client, "streams"),
        };
        let mut counts = self.counts(counted);
        let open = counts.entry(client.clone()).or_insert(0);
        if cap > 0 && *open >= cap {
            return Err(ApiError::too_many_requests(
                format!("Too many {what}: client {client} already has {cap} open, the most a client may hold"),
                1,
            ));
        }
        *open += 1;
        Ok(CountGuard {
            limiter: self.clone(),
            counted,
            client,
        })
    }

    /// Watches `client` has open.
    pub fn open_watches(&self, client: &Client) -> usize {
        self.counts(Counted::Watches)
            .get(client)
            .copied()
            .unwrap_or(0)
    }

    /// exec, attach and port-forward streams `client` has open.
    pub fn open_streams(&self, client: &Client) -> usize {
        self.counts(Counted::Streams)
            .get(client)
            .copied()
            .unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy)]
enum Counted {
    Watches,
    Streams,
}

/// One open watch or stream, counted until dropped (with the watch's
/// response body, or the stream's relay).
struct CountGuard {
    limiter: Limiter,
    counted: Counted,
    client: Client,
}

impl Drop for CountGuard {
    fn drop(&mut self) {
        let mut counts = self.limiter.counts(self.counted);
        if let Some(open) = counts.get_mut(&self.client) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

/// The count of one exec, attach or port-forward stream, put in the
/// request's extensions; the handler moves it into the task that relays
/// the upgraded connection, so the stream counts for as long as it lasts.
#[derive(Clone)]
pub struct StreamSlot(Arc<Mutex<Option<CountGuard>>>);

impl StreamSlot {
    /// Takes the count out of the request: it ends when the returned value
    /// is dropped.
    pub fn take(&self) -> Option<impl Send + 'static> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The request's own `?timeout=` (a Go duration such as `30s` or `1m`),
/// if it has a valid one.
fn requested_timeout(uri: &Uri) -> Option<Duration> {
    let query = uri.query()?;
    let value = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("timeout="))?;
    skiff_machinery::duration::parse(value).ok()
}

/// The middleware: every request passes the limits before the API sees it.
pub async fn enforce(State(limiter): State<Limiter>, request: Request, next: Next) -> Response {
    let kind = RequestKind::of_request(&request);
    if kind == RequestKind::Exempt {
        return next.run(request).await;
    }
    let client = client_of(&request);
    if let (Some(buckets), Some(client)) = (&limiter.inner.buckets, &client) {
        if let Err(wait) = buckets.take(client) {
            let seconds = wait.as_secs_f64().ceil().max(1.0) as u32;
            return ApiError::too_many_requests(
                format!("Too many requests from {client}, please try again later."),
                seconds,
            )
            .into_response();
        }
    }
    match kind {
        RequestKind::Watch => {
            let guard = match client.map(|c| limiter.open_watch(c)).transpose() {
                Ok(guard) => guard,
                Err(err) => return err.into_response(),
            };
            let response = next.run(request).await;
            match guard {
                // The count drops when the response body does, which is
                // when the watch ends.
                Some(guard) => response.map(|body| crate::holding::Holding::body(body, guard)),
                None => response,
            }
        }
        RequestKind::LongRunning if is_pod_stream(&request) => {
            let mut request = request;
            if let Some(client) = client {
                match limiter.open_stream(client) {
                    Ok(guard) => {
                        request
                            .extensions_mut()
                            .insert(StreamSlot(Arc::new(Mutex::new(Some(guard)))));
                    }
                    Err(err) => return err.into_response(),
                }
            }
            next.run(request).await
        }
        RequestKind::LongRunning => next.run(request).await,
        _ => {
            let _slot = match limiter.in_flight(kind, is_privileged(&request)) {
                Ok(slot) => slot,
                Err(err) => return err.into_response(),
            };
            let limit = limiter.inner.limits.request_timeout;
            let timeout = requested_timeout(request.uri()).map_or(limit, |asked| asked.min(limit));
            match tokio::time::timeout(timeout, next.run(request)).await {
                Ok(response) => response,
                Err(_) => ApiError::timeout(format!(
                    "request did not complete within the allowed duration of {}s",
                    timeout.as_secs_f64()
                ))
                .into_response(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(method: Method, uri: &str) -> RequestKind {
        RequestKind::of(&method, &uri.parse().unwrap())
    }

    #[test]
    fn requests_are_classified_as_kube_apiserver_does() {
        use RequestKind::*;
        assert_eq!(kind(Method::GET, "/healthz"), Exempt);
        assert_eq!(kind(Method::GET, "/readyz/ping"), Exempt);
        assert_eq!(kind(Method::GET, "/api/v1/pods?watch=true"), Watch);
        assert_eq!(
            kind(Method::GET, "/api/v1/pods?watch=1&resourceVersion=5"),
            Watch
        );
        assert_eq!(kind(Method::GET, "/api/v1/pods?watch=false"), ReadOnly);
        assert_eq!(kind(Method::GET, "/api/v1/watch/namespaces/d/pods"), Watch);
        assert_eq!(kind(Method::GET, "/apis/apps/v1/watch/deployments"), Watch);
        assert_eq!(
            kind(Method::GET, "/api/v1/namespaces/d/pods/p/log?follow=true"),
            LongRunning
        );
        assert_eq!(
            kind(Method::GET, "/api/v1/namespaces/d/pods/p/log"),
            ReadOnly
        );
        assert_eq!(
            kind(Method::POST, "/api/v1/namespaces/d/pods/p/exec"),
            LongRunning
        );
        assert_eq!(kind(Method::POST, "/api/v1/namespaces/d/pods"), Mutating);
        assert_eq!(kind(Method::PATCH, "/api/v1/namespaces/d/pods/p"), Mutating);
        assert_eq!(
            kind(Method::DELETE, "/api/v1/namespaces/d/pods/p"),
            Mutating
        );
        assert_eq!(
            kind(Method::GET, "/api/v1/namespaces/d/pods/watch"),
            ReadOnly
        );
        assert_eq!(kind(Method::GET, "/version"), ReadOnly);
    }

    #[test]
    fn in_flight_slots_are_counted_per_kind_and_given_back() {
        let limiter = Limiter::new(Limits {
            max_requests_inflight: 2,
            max_mutating_requests_inflight: 1,
            ..Limits::default()
        });
        let a = limiter.in_flight(RequestKind::ReadOnly, false).unwrap();
        let _b = limiter.in_flight(RequestKind::ReadOnly, false).unwrap();
        let refused = limiter.in_flight(RequestKind::ReadOnly, false).unwrap_err();
        assert_eq!((refused.code, refused.reason), (429, "TooManyRequests"));
        let _w = limiter.in_flight(RequestKind::Mutating, false).unwrap();
        assert!(limiter.in_flight(RequestKind::Mutating, false).is_err());
        drop(a);
        assert!(limiter
            .in_flight(RequestKind::ReadOnly, false)
            .unwrap()
            .is_some());
        assert!(limiter
            .in_flight(RequestKind::Watch, false)
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_administrator_is_served_past_the_cap_and_takes_a_free_slot() {
        let limiter = Limiter::new(Limits {
            max_mutating_requests_inflight: 1,
            ..Limits::default()
        });
        // With a slot free, the administrator's request takes it.
        let admin = limiter.in_flight(RequestKind::Mutating, true).unwrap();
        assert!(admin.is_some());
        assert!(limiter.in_flight(RequestKind::Mutating, false).is_err());
        // With none, it is served without one, and others still wait.
        assert!(limiter
            .in_flight(RequestKind::Mutating, true)
            .unwrap()
            .is_none());
        assert!(limiter.in_flight(RequestKind::Mutating, false).is_err());
        drop(admin);
        assert!(limiter.in_flight(RequestKind::Mutating, false).is_ok());
    }

    #[test]
    fn privileged_means_in_system_masters() {
        let request = |groups: &[&str]| {
            let mut request = axum::http::Request::builder()
                .uri("/api/v1/pods")
                .body(axum::body::Body::empty())
                .unwrap();
            request.extensions_mut().insert(crate::user::UserInfo {
                name: "someone".into(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
            });
            request
        };
        assert!(is_privileged(&request(&[
            "system:authenticated",
            "system:masters"
        ])));
        assert!(!is_privileged(&request(&["system:authenticated"])));
        let bare = axum::http::Request::builder()
            .body(axum::body::Body::empty())
            .unwrap();
        assert!(!is_privileged(&bare));
    }

    #[test]
    fn a_client_is_its_user_or_for_shared_users_its_address() {
        let request = |user: Option<&str>| {
            let mut request = axum::http::Request::builder()
                .uri("/api/v1/pods")
                .body(axum::body::Body::empty())
                .unwrap();
            request
                .extensions_mut()
                .insert(Peer("127.0.0.9:5000".parse().unwrap()));
            if let Some(name) = user {
                request.extensions_mut().insert(crate::user::UserInfo {
                    name: name.into(),
                    groups: vec![],
                });
            }
            request
        };
        let address = Client::Address("127.0.0.9".parse().unwrap());
        assert_eq!(
            client_of(&request(Some("alice"))),
            Some(Client::User("alice".into()))
        );
        assert_eq!(
            client_of(&request(Some("system:anonymous"))),
            Some(address.clone())
        );
        assert_eq!(
            client_of(&request(Some("system:unsecured"))),
            Some(address.clone())
        );
        assert_eq!(client_of(&request(None)), Some(address));
    }

    #[test]
    fn watches_are_capped_per_client_and_counted_off_when_they_end() {
        let limiter = Limiter::new(Limits {
            max_watches_per_client: 2,
            max_streams_per_client: 2,
            ..Limits::default()
        });
        let one = Client::Address("127.0.0.2".parse().unwrap());
        let other = Client::User("alice".into());
        let a = limiter.open_watch(one.clone()).unwrap();
        let _b = limiter.open_watch(one.clone()).unwrap();
        let refused = limiter.open_watch(one.clone()).err().unwrap();
        assert_eq!(refused.code, 429);
        assert!(refused.message.contains("127.0.0.2"), "{}", refused.message);
        let _c = limiter.open_watch(other).unwrap();
        assert_eq!(limiter.open_watches(&one), 2);
        drop(a);
        assert_eq!(limiter.open_watches(&one), 1);
        let _d = limiter.open_watch(one).unwrap();
    }

    #[test]
    fn pod_streams_are_capped_apart_from_watches_and_held_by_their_slot() {
        let limiter = Limiter::new(Limits {
            max_watches_per_client: 1,
            max_streams_per_client: 2,
            ..Limits::default()
        });
        let one = Client::User("alice".into());
        let _watch = limiter.open_watch(one.clone()).unwrap();
        let slot = StreamSlot(Arc::new(Mutex::new(Some(
            limiter.open_stream(one.clone()).unwrap(),
        ))));
        let _second = limiter.open_stream(one.clone()).unwrap();
        let refused = limiter.open_stream(one.clone()).err().unwrap();
        assert_eq!(refused.code, 429);
        assert!(
            refused.message.starts_with("Too many streams"),
            "{}",
            refused.message
        );
        // The handler takes the count out of the request; it lasts as long
        // as what it was moved into.
        let held = slot.clone().take();
        drop(slot);
        assert_eq!(limiter.open_streams(&one), 2);
        drop(held);
        assert_eq!(limiter.open_streams(&one), 1);
        assert_eq!(limiter.open_watches(&one), 1);
    }

    #[test]
    fn exec_attach_and_port_forward_are_pod_streams() {
        for (method, path, stream) in [
            (
                Method::GET,
                "/api/v1/namespaces/d/pods/p/exec?command=ls",
                true,
            ),
            (Method::POST, "/api/v1/namespaces/d/pods/p/attach", true),
            (Method::GET, "/api/v1/namespaces/d/pods/p/portforward", true),
            (
                Method::GET,
                "/api/v1/namespaces/d/pods/p/log?follow=true",
                false,
            ),
            (Method::GET, "/api/v1/namespaces/d/pods/p", false),
        ] {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .body(axum::body::Body::empty())
                .unwrap();
            assert_eq!(is_pod_stream(&request), stream, "{path}");
        }
    }
}
