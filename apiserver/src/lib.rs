//! skiff-apiserver: the Kubernetes REST API over the store — a resource
//! table from k8s-openapi, one generic registry for every resource, watch
//! as newline-delimited JSON, discovery and OpenAPI for kubectl, and
//! Kubernetes `Status` errors. The store is the skiff store in the same
//! process or any etcd v3 endpoint.

mod abort_on_drop;
pub mod accept;
pub mod admission;
pub mod apply;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod cache;
pub mod coalesce;
pub mod conversion;
pub mod crd;
pub mod discovery;
pub mod event_ttl;
pub mod field_validation;
/// The fuzz targets' bodies (`fuzz/`), replayed by a stable test.
#[doc(hidden)]
pub mod fuzzing;
mod h2_streams;
mod holding;
pub mod kubelet;
pub mod kubernetes_service;
pub mod limits;
pub mod metrics;
pub mod namespace;
pub mod node_proxy;
pub mod object;
pub mod openapi;
pub mod options;
pub mod panic_recovery;
pub mod patch;
pub mod pod_logs;
pub mod pod_streams;
pub mod protobuf;
mod refusal_bodies;
pub mod registry;
pub mod reply;
pub mod request_info;
pub mod resource_metrics;
pub mod resources;
pub(crate) mod schema;
pub mod server;
pub mod service_alloc;
pub mod serving;
pub mod status;
pub mod storage;
pub mod subresources;
pub mod table;
pub mod user;
pub mod validation;
pub mod warning;
pub mod watch;

pub use registry::Registry;
pub use storage::Storage;

/// How the API is served beyond its registry: who may call it, request
/// limits and the audit log.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    pub limits: limits::Limits,
    /// Audit events go here (None: no audit log).
    pub audit: Option<audit::Auditor>,
    /// The bearer tokens accepted beside client certificates.
    pub authn: std::sync::Arc<authn::Authenticator>,
    /// RBAC, or every authenticated request allowed.
    pub authorization: authz::Mode,
    /// Serves this process's own clients too, without a socket.
    pub in_process: Option<serving::InProcess>,
}

/// One address the API is served on: HTTPS with `tls`, else plain HTTP
/// (the loopback port trusted as the administrator).
pub struct ApiListener {
    pub listener: tokio::net::TcpListener,
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
}

/// The `kubernetes` Service (with this server's address) and the
/// `kube-dns` Service, then, for as long as the server runs, the repair of
/// leaked Service allocations.
async fn services(registry: &Registry, api: Option<std::net::SocketAddr>) {
    if let Some(api) = api {
        let mut delay = std::time::Duration::from_millis(100);
        while let Err(err) = kubernetes_service::ensure(registry, api).await {
            tracing::debug!(error = %err, "the kubernetes Service not written yet; retrying");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(5));
        }
    }
    let mut delay = std::time::Duration::from_millis(100);
    loop {
        match kubernetes_service::kube_dns::ensure(registry).await {
            Ok(_) => break,
            Err(err) if kubernetes_service::kube_dns::is_transient(err.code) => {
                tracing::debug!(error = %err, "the kube-dns Service not written yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(5));
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot create the kube-dns Service: pods will not reach the cluster DNS at its address");
                break;
            }
        }
    }
    let mut repair = service_alloc::Repair::default();
    loop {
        if let Err(err) = repair.run(registry).await {
            tracing::warn!(error = %err, "repairing Service allocations");
        }
        tokio::time::sleep(service_alloc::REPAIR_INTERVAL).await;
    }
}

/// Serves the API on `listeners` until `shutdown` resolves; open watches
/// are ended then. The default namespaces are created as soon as the store
/// takes writes (a cluster may still be electing its leader).
pub async fn serve(
    listeners: Vec<ApiListener>,
    registry: Registry,
    options: ServeOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Turns true once the default roles and namespaces exist.
    let (bootstrapped, ready) = tokio::sync::watch::channel(false);
    let api_address = listeners
        .first()
        .and_then(|l| l.listener.local_addr().ok())
        .filter(|a| !a.ip().is_unspecified());
    let bootstrap = {
        let registry = registry.clone();
        tokio::spawn(async move {
            let mut delay = std::time::Duration::from_millis(100);
            loop {
                match registry.ensure_default_namespaces().await {
                    Ok(()) => {
                        // As kube-apiserver: every resource's watch cache
                        // fills once the store takes requests, so the first
                        // list or watch of a resource does not wait for it.
                        registry.start_watch_caches();
                        let _ = bootstrapped.send(true);
                        drop(bootstrapped);
                        services(&registry, api_address).await;
                        return;
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, "default namespaces not created yet; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(std::time::Duration::from_secs(2));
                    }
                }
            }
        })
    };
    // CRDs written through any apiserver of the cluster are served here.
    let crds = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.follow_custom_resources().await })
    };
    let stopping = registry.clone();
    let authorizer = std::sync::Arc::new(authz::Authorizer::new(
        registry.clone(),
        options.authorization,
    ));
    registry.set_authorizer(&authorizer);
    let mut authenticator = (*options.authn).clone();
    if let Some(issuer) = registry.token_issuer() {
        authenticator.service_accounts = Some(authn::ServiceAccountTokens {
            issuer: issuer.clone(),
            registry: registry.clone(),
        });
    }
    let authenticator = std::sync::Arc::new(authenticator);
    let mut router = server::router(registry)
        .merge(authz::review::router(authorizer.clone()))
        .merge(authn::token_review::router(authenticator.clone()))
        .layer(axum::middleware::from_fn_with_state(
            authorizer,
            authz::authorize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            limits::Limiter::new(options.limits),
            limits::enforce,
        ));
    // Outside the limits: a refused request is audited too.
    if let Some(auditor) = options.audit {
        router = router.layer(axum::middleware::from_fn_with_state(auditor, audit::record));
    }
    // Every layer inside knows the request's user.
    let router = router
        .layer(axum::middleware::from_fn_with_state(
            authenticator,
            authn::authenticate,
        ))
        // Every request counted and timed, whoever sent it.
        .layer(axum::middleware::from_fn(metrics::measure))
        // The request's route worked out once, for every layer inside.
        .layer(axum::middleware::from_fn(request_info::attach))
        // Outermost: a panic anywhere inside answers 500 and leaves the
        // connection serving.
        .layer(axum::middleware::from_fn(panic_recovery::recover));
    // The in-process clients (scheduler, controllers, kubelet) are served
    // once the default roles exist: a request of theirs made before would
    // be refused, and their retries would start them seconds late.
    // (The wait ends with the bootstrap task, when the server stops.)
    if let Some(in_process) = &options.in_process {
        in_process.serve_when(router.clone(), ready);
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut servers = tokio::task::JoinSet::new();
    for ApiListener { listener, tls } in listeners {
        let mut stopped = stopped.clone();
        servers.spawn(serving::serve(listener, router.clone(), tls, async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
    }
    let mut served = Ok(());
    tokio::select! {
        () = shutdown => {}
        Some(first) = servers.join_next() => {
            served = first.unwrap_or_else(|e| Err(std::io::Error::other(e)));
        }
    }
    // Open watches end now, so the graceful stop does not wait on them.
    stopping.begin_shutdown();
    if let Some(in_process) = &options.in_process {
        in_process.stop();
    }
    let _ = stop.send(true);
    while let Some(done) = servers.join_next().await {
        if let Ok(Err(err)) = done {
            served = served.and(Err(err));
        }
    }
    bootstrap.abort();
    crds.abort();
    served
}
