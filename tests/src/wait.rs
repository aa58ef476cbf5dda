//! Polling with a deadline. Without a controller-manager and with watch caches in between,
//! "eventually" is the honest assertion for most cluster state; the message must still say what
//! never happened.

use std::future::Future;
use std::time::Duration;

use anyhow::{Result, anyhow};
use tokio::time::{Instant, sleep};

/// Calls `probe` until it returns `Ok`, and returns that value. An `Err` means "not yet": its
/// text is kept, and if `timeout` passes first the error reads
/// `timed out after 30s waiting for <what>; last check: <last error>`.
///
/// Polls every 50 ms at first, backing off to 500 ms, so quick conditions return quickly
/// without hammering the API server on slow ones.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(50);
    loop {
        let last = match probe().await {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(anyhow!(
                "timed out after {timeout:?} waiting for {what}; last check: {last:#}"
            ));
        }
        sleep(interval.min(deadline - now)).await;
        interval = (interval * 2).min(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::bail;

    #[tokio::test]
    async fn returns_the_first_success() {
        let mut calls = 0;
        let got = wait_until("the third call", Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move {
                if n < 3 {
                    bail!("only {n} calls so far")
                }
                Ok(n)
            }
        })
        .await
        .expect("the probe succeeds on its third call");
        assert_eq!(got, 3);
    }

    #[tokio::test]
    async fn times_out_naming_what_was_awaited_and_the_last_check() {
        let err = wait_until(
            "a thing that never happens",
            Duration::from_millis(200),
            || async { Err::<(), _>(anyhow!("still nothing")) },
        )
        .await
        .expect_err("the probe never succeeds");
        let text = format!("{err:#}");
        assert!(
            text.contains("waiting for a thing that never happens")
                && text.contains("still nothing"),
            "unexpected message: {text}"
        );
    }
}
