//! HTTP endpoints: `/healthz` (the process serves), `/readyz` (every running controller's
//! caches have synced), `/metrics` (Prometheus/OpenMetrics text) and `/guests` (per-file load
//! status: loaded or refused with the reason, content hashes).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::guests::GuestDirectory;
use crate::metrics::{CONTENT_TYPE, Metrics};

/// What `/readyz` looks at: each running controller's synced flag, by guest.
pub type Readiness = Arc<Mutex<BTreeMap<String, watch::Receiver<bool>>>>;

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    directory: Arc<GuestDirectory>,
    readiness: Readiness,
}

/// Binds `addr` and serves until the task is dropped. Returns the bound address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    directory: Arc<GuestDirectory>,
    readiness: Readiness,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/guests", get(guests))
        .with_state(AppState {
            metrics,
            directory,
            readiness,
        });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("HTTP server stopped: {e}");
        }
    });
    Ok((bound, task))
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let waiting: Vec<String> = state
        .readiness
        .lock()
        .iter()
        .filter(|(_, synced)| !*synced.borrow())
        .map(|(guest, _)| guest.clone())
        .collect();
    if waiting.is_empty() {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("caches not synced for: {}", waiting.join(", ")),
        )
    }
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        state.metrics.render(),
    )
}

async fn guests(State(state): State<AppState>) -> impl IntoResponse {
    axum::Json(state.directory.statuses())
}
