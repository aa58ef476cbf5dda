//! Test guest for outbound HTTP (the contract's `http-controller` world): reconciles
//! `test.reconciler.dev/v1` `Widget`s (see `../widget/crd.yaml`), sending the requests the
//! object's `spec.http` lists and reporting what came back, so a test can drive every path of
//! the host's HTTP policy with one object.
//!
//! - `http: [{method?, url, headers?, body?}]`: each request sent in turn through
//!   [`reconciler_guest::http`] (`method` defaults to `GET`); `httpRepeat: n` sends the whole
//!   list n times.
//! - `hoard: {kind, count, bytes, url?}`: an attack on the host's memory through raw
//!   `wasi:http` resources the guest keeps until its reconcile ends: `fields` (`count` header
//!   maps of about `bytes` each), `unsent` (`count` requests whose bodies get `bytes` written but
//!   are never handed to `handle`), `unfinished` (`count` requests to `url` handed over, their
//!   bodies written with `bytes` and never finished) or `unread` (`count` requests to `url`
//!   whose responses arrive and are never read). Every write is non-blocking: a stream that takes
//!   no more is left as it is.
//! - The status merge patch: `http`, the outcome of each of the first eight requests
//!   (`{status, length, body}` with the body's first 2 KiB, or `{error}`), `httpSent` (answered)
//!   and `httpFailed`, `hoard` (`{made, written, error}`: how many resources were made, the body
//!   bytes the host took, the first refusal), and `observedGeneration`.
//!
//! Nothing else: a gone or deleting object is done at once.

use std::collections::BTreeMap;

use reconciler_guest::serde_json::{Value, json};
use reconciler_guest::{
    Action, Guest, Manifest, ReconcileError, Request, cluster, gvk, http, permanent,
};
use serde::Deserialize;

struct Fetcher;

impl Guest for Fetcher {
    fn manifest() -> Manifest {
        Manifest::new("fetcher", gvk!("test.reconciler.dev", "v1", "Widget"))
            .generation_changed_only()
    }

    fn reconcile(req: Request) -> Result<Action, ReconcileError> {
        let Some(object) = req.object_value()? else {
            return Ok(Action::await_change());
        };
        if req.deleting {
            return Ok(Action::await_change());
        }
        let widget: WidgetObject = reconciler_guest::serde_json::from_value(object)
            .map_err(|e| permanent(format!("{} does not parse: {e}", req.ref_)))?;
        let (outcomes, sent, failed) = send_requests(&widget.spec.http, widget.spec.http_repeat);
        let mut kept = Vec::new();
        let mut status = json!({
            "observedGeneration": widget.metadata.generation,
            "http": outcomes,
            "httpSent": sent,
            "httpFailed": failed,
        });
        if let Some(hoard) = &widget.spec.hoard {
            status["hoard"] = hoard::run(hoard, &mut kept);
        }
        cluster::patch_status(&req.ref_, &status)?;
        drop(kept);
        Ok(Action::await_change())
    }
}

reconciler_guest::export!(Fetcher);

mod hoard;

#[derive(Deserialize)]
struct WidgetObject {
    metadata: Metadata,
    #[serde(default)]
    spec: Spec,
}

#[derive(Deserialize)]
struct Metadata {
    generation: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Spec {
    http: Vec<HttpSpec>,
    http_repeat: Option<u32>,
    hoard: Option<hoard::Hoard>,
}

#[derive(Deserialize)]
struct HttpSpec {
    #[serde(default = "get_method")]
    method: String,
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<String>,
}

fn get_method() -> String {
    "GET".to_owned()
}

/// The outcomes of the first eight requests, and how many were answered and failed.
fn send_requests(requests: &[HttpSpec], repeat: Option<u32>) -> (Vec<Value>, u64, u64) {
    let (mut outcomes, mut sent, mut failed) = (Vec::new(), 0, 0);
    for _ in 0..repeat.unwrap_or(1).max(1) {
        for r in requests {
            let mut request = http::Request::new(&r.method, &r.url);
            for (name, value) in &r.headers {
                request = request.header(name, value);
            }
            if let Some(body) = &r.body {
                request = request.body(body.as_bytes());
            }
            let outcome = match request.send() {
                Ok(response) => {
                    sent += 1;
                    let body = response.text();
                    let cut = body.char_indices().nth(2048).map_or(body.len(), |(i, _)| i);
                    json!({"status": response.status, "length": response.body.len(), "body": &body[..cut]})
                }
                Err(e) => {
                    failed += 1;
                    json!({"error": e.to_string()})
                }
            };
            if outcomes.len() < 8 {
                outcomes.push(outcome);
            }
        }
    }
    (outcomes, sent, failed)
}
