//! A loopback HTTP server for tests of the credentials the host adds to guests' requests: it
//! answers every request with the `x-api-key` it was sent reflected in its body (as a careless
//! API does), and keeps each request's `METHOD path key`. No HTTP library: a handful of
//! one-shot `connection: close` answers is not worth one.

use anyhow::Result;

/// An HTTP server on loopback answering every request with the `x-api-key` it was sent,
/// reflected in its body (as a careless API does); each request's `METHOD path key` is kept.
/// Gone, listener and all, when the task is aborted.
pub async fn key_echo_server() -> Result<(
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    tokio::task::JoinHandle<()>,
)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let request_line = head.lines().next().unwrap_or_default();
            let mut words = request_line.split(' ');
            let (method, path) = (words.next().unwrap_or("-"), words.next().unwrap_or("-"));
            let key = head
                .lines()
                .find_map(|l| {
                    l.split_once(':')
                        .filter(|(name, _)| name.eq_ignore_ascii_case("x-api-key"))
                        .map(|(_, value)| value.trim().to_owned())
                })
                .unwrap_or_default();
            kept.lock().unwrap().push(format!("{method} {path} {key}"));
            let body = format!(r#"{{"path":"{path}","seenKey":"{key}"}}"#);
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    Ok((addr, seen, task))
}
