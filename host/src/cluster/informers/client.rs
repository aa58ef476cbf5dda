//! The client an informer lists and watches through: the host's client plus the four things
//! kube-runtime's `watcher` has no option for. It sends each request once and notes every
//! refusal as overloaded (429, 503, 504) with its `Retry-After` for the watch's backoff,
//! counting it into `reconciler_informer_throttled_total` (`crate::cluster::retry_after`: the watch
//! task is the retry loop); it counts response body bytes into
//! `reconciler_informer_received_bytes_total`; for a sharded informer filtered on the server,
//! it adds `shardSelector` to every GET (the watcher's lists, their pages, and watches); and it
//! makes a streaming list a consistent read, as client-go does: the watcher asks for
//! `sendInitialEvents` from `resourceVersion=0` (whatever state the API server's cache holds),
//! this client leaves the version out, so the list ends at a state at least as new as the
//! request. An informer upgrading from metadata to full objects relies on that: its full list
//! is then newer than every event its metadata watch delivered.
//!
//! Cost: one `kube::Client` per informer, that is one tower buffer task, plus one atomic add per
//! response body frame. Requests go through the host's client (`Client::send`), so the
//! connection pool, authentication and TLS stay shared, and its errors come back unchanged.

use http::{Method, Request, Uri, uri::PathAndQuery};
use http_body_util::BodyExt;
use kube::{Client, client::Body};

use crate::cluster::retry_after::Hold;
use crate::metrics::InformerMetrics;

/// The query parameter of KEP-5866 (`ListOptions.shardSelector`).
pub(super) const SHARD_SELECTOR_PARAM: &str = "shardSelector";

/// A client that sends through `base`, each request once, notes refusals in `hold`, counts
/// what it receives into `metrics`, and, with a `shard_selector`, adds it to every GET.
pub(super) fn informer_client(
    base: Client,
    metrics: InformerMetrics,
    shard_selector: Option<String>,
    hold: Hold,
) -> Client {
    let default_namespace = base.default_namespace().to_owned();
    let service = tower::service_fn(move |mut request: Request<Body>| {
        let base = base.clone();
        let metrics = metrics.clone();
        let hold = hold.clone();
        Hold::own(&mut request);
        if request.method() == Method::GET
            && let Some(uri) = consistent_streaming_list(request.uri())
        {
            *request.uri_mut() = uri;
        }
        let rewritten = match &shard_selector {
            Some(selector) if request.method() == Method::GET => {
                with_query_param(request.uri(), SHARD_SELECTOR_PARAM, selector)
                    .map(|uri| *request.uri_mut() = uri)
            }
            _ => Ok(()),
        };
        async move {
            rewritten.map_err(kube::Error::HttpError)?;
            let response = base.send(request).await?;
            if hold.note(&response).is_some() {
                metrics.throttled();
            }
            Ok::<_, kube::Error>(response.map(|body| {
                body.map_frame(move |frame| {
                    if let Some(data) = frame.data_ref() {
                        metrics.received_bytes(data.len());
                    }
                    frame
                })
            }))
        }
    });
    Client::new(service, default_namespace)
}

/// A streaming list from `resourceVersion=0` (kube-runtime's initial watch) as a consistent
/// one: `uri` without its `resourceVersion`. None for any other request.
pub(super) fn consistent_streaming_list(uri: &Uri) -> Option<Uri> {
    let query = uri.query()?;
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let has = |key: &str, value: &str| pairs.iter().any(|(k, v)| k == key && v == value);
    if !has("sendInitialEvents", "true") || !has("resourceVersion", "0") {
        return None;
    }
    let kept = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs.iter().filter(|(k, _)| k != "resourceVersion"))
        .finish();
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = PathAndQuery::try_from(format!("{}?{kept}", uri.path())).ok();
    Uri::from_parts(parts).ok()
}

/// `uri` with `key=value` appended to its query, form-encoded as kube encodes its own
/// parameters (the API server decodes `+` as a space).
pub(super) fn with_query_param(uri: &Uri, key: &str, value: &str) -> Result<Uri, http::Error> {
    let pair = form_urlencoded::Serializer::new(String::new())
        .append_pair(key, value)
        .finish();
    let path_and_query = match uri.query() {
        Some(query) if !query.is_empty() => format!("{}?{query}&{pair}", uri.path()),
        _ => format!("{}?{pair}", uri.path()),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(path_and_query)?);
    Ok(Uri::from_parts(parts)?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;
    use crate::metrics::{Metrics, sample};

    const SELECTOR: &str = "shardRange(object.metadata.uid, '0x0000000000000000', '0x5500000000000000') || \
         shardRange(object.metadata.uid, '0xaa00000000000000', '0x10000000000000000')";

    fn params(uri: &Uri) -> Vec<(String, String)> {
        form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect()
    }

    #[test]
    fn the_selector_is_appended_encoded_and_reads_back_exactly() {
        let uri: Uri = "/api/v1/namespaces/a/configmaps?limit=500&watch=true"
            .parse()
            .unwrap();
        let rewritten = with_query_param(&uri, SHARD_SELECTOR_PARAM, SELECTOR).unwrap();
        assert_eq!(rewritten.path(), "/api/v1/namespaces/a/configmaps");
        let query = rewritten.query().unwrap();
        assert!(
            query.starts_with("limit=500&watch=true&shardSelector=shardRange%28object.metadata.uid%2C+%270x0000000000000000%27"),
            "{query}"
        );
        assert!(!query.contains(['\'', '(', ')', '|', ' ', ',']), "{query}");
        assert_eq!(
            params(&rewritten),
            [
                ("limit".to_owned(), "500".to_owned()),
                ("watch".to_owned(), "true".to_owned()),
                (SHARD_SELECTOR_PARAM.to_owned(), SELECTOR.to_owned()),
            ]
        );
    }

    #[test]
    fn a_uri_without_a_query_gets_one_and_absolute_uris_keep_their_host() {
        let bare: Uri = "/api/v1/configmaps".parse().unwrap();
        let rewritten = with_query_param(&bare, "k", "a&b=c").unwrap();
        assert_eq!(rewritten.to_string(), "/api/v1/configmaps?k=a%26b%3Dc");

        let empty_query: Uri = "/api/v1/configmaps?".parse().unwrap();
        assert_eq!(
            with_query_param(&empty_query, "k", "v")
                .unwrap()
                .to_string(),
            "/api/v1/configmaps?k=v"
        );

        let absolute: Uri = "https://127.0.0.1:6443/api/v1/configmaps?limit=1"
            .parse()
            .unwrap();
        assert_eq!(
            with_query_param(&absolute, "k", "v").unwrap().to_string(),
            "https://127.0.0.1:6443/api/v1/configmaps?limit=1&k=v"
        );
    }

    #[test]
    fn a_streaming_list_from_version_0_becomes_a_consistent_one_and_nothing_else_changes() {
        let streaming: Uri = "/api/v1/namespaces/a/configmaps?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0"
            .parse()
            .unwrap();
        let consistent = consistent_streaming_list(&streaming).unwrap();
        assert_eq!(consistent.path(), "/api/v1/namespaces/a/configmaps");
        let params = params(&consistent);
        assert!(
            params.iter().all(|(k, _)| k != "resourceVersion"),
            "{params:?}"
        );
        for kept in [
            ("watch", "true"),
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("allowWatchBookmarks", "true"),
        ] {
            assert!(
                params.contains(&(kept.0.to_owned(), kept.1.to_owned())),
                "{kept:?} in {params:?}"
            );
        }
        for unchanged in [
            // A resumed watch, a paged list, a streaming list from a known version.
            "/api/v1/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion=0",
            "/api/v1/configmaps?limit=500",
            "/api/v1/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=42",
            "/api/v1/configmaps",
        ] {
            let uri: Uri = unchanged.parse().unwrap();
            assert_eq!(consistent_streaming_list(&uri), None, "{unchanged}");
        }
    }

    #[tokio::test]
    async fn gets_carry_the_selector_other_methods_do_not_and_every_byte_is_counted() {
        const ANSWER: &[u8] = br#"{"kind":"ConfigMapList","apiVersion":"v1","items":[]}"#;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = seen.clone();
        let base = Client::new(
            tower::service_fn(move |request: Request<Body>| {
                recorder
                    .lock()
                    .push((request.method().clone(), request.uri().clone()));
                async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Body::from(
                        ANSWER.to_vec(),
                    )))
                }
            }),
            "default",
        );
        let metrics = Metrics::new();
        let client = informer_client(
            base,
            metrics.informer("", "v1", "ConfigMap"),
            Some(SELECTOR.to_owned()),
            Hold::default(),
        );
        for method in [Method::GET, Method::POST] {
            let request = Request::builder()
                .method(method)
                .uri("/api/v1/configmaps?limit=1")
                .body(Vec::new())
                .unwrap();
            assert_eq!(
                client.request_text(request).await.unwrap().as_bytes(),
                ANSWER
            );
        }
        let seen = seen.lock().clone();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].0, Method::GET);
        assert!(
            params(&seen[0].1).contains(&(SHARD_SELECTOR_PARAM.to_owned(), SELECTOR.to_owned()))
        );
        assert_eq!(
            seen[1].1.to_string(),
            "/api/v1/configmaps?limit=1",
            "a write is not rewritten"
        );
        let text = metrics.render();
        let series =
            r#"reconciler_informer_received_bytes_total{group="",version="v1",kind="ConfigMap"}"#;
        #[allow(clippy::cast_precision_loss)]
        let expected = (2 * ANSWER.len()) as f64;
        assert_eq!(sample(&text, series), Some(expected), "{text}");
    }
}
