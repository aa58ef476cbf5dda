//! `spec.hoard`: raw `wasi:http` resources made and kept, to show what the host holds for them.

use reconciler_guest::bindings::wasi::http::outgoing_handler::{self, FutureIncomingResponse};
use reconciler_guest::bindings::wasi::http::types::{
    ErrorCode, Fields, IncomingResponse, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use reconciler_guest::bindings::wasi::io::streams::OutputStream;
use reconciler_guest::serde_json::{Value, json};
use serde::Deserialize;

#[derive(Deserialize)]
pub(crate) struct Hoard {
    kind: String,
    count: u32,
    #[serde(default)]
    bytes: usize,
    #[serde(default)]
    url: String,
}

/// Whatever must stay alive until the reconcile ends.
#[allow(
    dead_code,
    reason = "held, never read: the point is that they stay alive"
)]
pub(crate) enum Kept {
    Fields(Fields),
    Request(OutgoingRequest, OutgoingBody, OutputStream),
    Pending(FutureIncomingResponse, OutgoingBody, OutputStream),
    Response(IncomingResponse),
}

pub(crate) fn run(hoard: &Hoard, kept: &mut Vec<Kept>) -> Value {
    let (mut made, mut written, mut error) = (0u32, 0usize, None::<String>);
    for _ in 0..hoard.count {
        let one = match hoard.kind.as_str() {
            "fields" => fields(hoard.bytes).map(|f| (Kept::Fields(f), 0)),
            "unsent" => unsent(hoard),
            "unfinished" => unfinished(hoard),
            "unread" => unread(hoard),
            other => Err(format!("no hoard kind {other}")),
        };
        match one {
            Ok((k, bytes)) => {
                kept.push(k);
                made += 1;
                written += bytes;
            }
            Err(e) => {
                error.get_or_insert(e);
                break;
            }
        }
    }
    json!({"made": made, "written": written, "error": error})
}

/// Header maps of about `bytes`, in values of 4 KiB.
fn fields(bytes: usize) -> Result<Fields, String> {
    let value = vec![b'v'; 4096];
    let entries: Vec<(String, Vec<u8>)> = (0..bytes.div_ceil(4096))
        .map(|i| (format!("x-h{i}"), value.clone()))
        .collect();
    Fields::from_list(&entries).map_err(|e| format!("fields: {e:?}"))
}

fn request(url: &str, with_body: bool) -> Result<(OutgoingRequest, Option<OutgoingBody>), String> {
    let outgoing = OutgoingRequest::new(Fields::new());
    let method = if with_body { Method::Post } else { Method::Get };
    outgoing.set_method(&method).map_err(|()| "method")?;
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", "127.0.0.1:1/"));
    let scheme = if scheme == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let split = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    outgoing.set_scheme(Some(&scheme)).map_err(|()| "scheme")?;
    outgoing
        .set_authority(Some(authority))
        .map_err(|()| "authority")?;
    outgoing
        .set_path_with_query(Some(if path.is_empty() { "/" } else { path }))
        .map_err(|()| "path")?;
    let body = if with_body {
        Some(outgoing.body().map_err(|()| "body")?)
    } else {
        None
    };
    Ok((outgoing, body))
}

/// Writes up to `bytes` without blocking; what the stream took.
fn fill(stream: &OutputStream, bytes: usize) -> Result<usize, String> {
    let chunk = vec![b'b'; 64 << 10];
    let mut written = 0;
    while written < bytes {
        let room = stream
            .check_write()
            .map_err(|e| format!("check-write: {e:?}"))?;
        let n = usize::try_from(room)
            .unwrap_or(usize::MAX)
            .min(chunk.len())
            .min(bytes - written);
        if n == 0 {
            break;
        }
        stream
            .write(&chunk[..n])
            .map_err(|e| format!("write: {e:?}"))?;
        written += n;
    }
    Ok(written)
}

fn unsent(hoard: &Hoard) -> Result<(Kept, usize), String> {
    let (outgoing, body) = request("http://127.0.0.1:1/", true)?;
    let body = body.ok_or("no body")?;
    let stream = body.write().map_err(|()| "stream")?;
    let written = fill(&stream, hoard.bytes)?;
    Ok((Kept::Request(outgoing, body, stream), written))
}

fn unfinished(hoard: &Hoard) -> Result<(Kept, usize), String> {
    let (outgoing, body) = request(&hoard.url, true)?;
    let body = body.ok_or("no body")?;
    let future = outgoing_handler::handle(outgoing, None).map_err(|e| describe(&e))?;
    let stream = body.write().map_err(|()| "stream")?;
    let written = fill(&stream, hoard.bytes)?;
    Ok((Kept::Pending(future, body, stream), written))
}

fn unread(hoard: &Hoard) -> Result<(Kept, usize), String> {
    let (outgoing, _) = request(&hoard.url, false)?;
    let future = outgoing_handler::handle(outgoing, None).map_err(|e| describe(&e))?;
    let response = loop {
        match future.get() {
            Some(Ok(Ok(response))) => break response,
            Some(Ok(Err(e))) => return Err(describe(&e)),
            Some(Err(())) => return Err("taken twice".into()),
            None => future.subscribe().block(),
        }
    };
    Ok((Kept::Response(response), 0))
}

fn describe(e: &ErrorCode) -> String {
    format!("{e:?}")
}
