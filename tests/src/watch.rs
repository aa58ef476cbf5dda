//! Recording what a `kube::runtime::watcher` delivers, so a test can assert "after this, the
//! watch eventually shows that" and, when it does not, see what the watch showed instead.

use std::fmt::Debug;
use std::time::Duration;

use anyhow::{Result, anyhow};
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::watcher;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One item from a watcher stream, flattened for assertions.
#[derive(Debug, Clone)]
pub enum Seen<K> {
    /// `Event::Apply`: added or modified while watching.
    Applied(K),
    /// `Event::Init`: the watcher (re)started listing, e.g. after its watch broke or expired.
    Relisting,
    /// `Event::InitApply`: an object from a (re)list.
    Listed(K),
    /// `Event::InitDone`: the (re)list is complete.
    ListDone,
    /// `Event::Delete`.
    Deleted(K),
    /// An error item; the watcher retries after it when given a backoff.
    Error(String),
}

impl<K: Resource> Seen<K> {
    /// The object, for the variants that carry one.
    pub fn object(&self) -> Option<&K> {
        match self {
            Seen::Applied(k) | Seen::Listed(k) | Seen::Deleted(k) => Some(k),
            Seen::Relisting | Seen::ListDone | Seen::Error(_) => None,
        }
    }

    /// The object if it is present (applied or listed) and named `name`.
    pub fn present(&self, name: &str) -> Option<&K> {
        match self {
            Seen::Applied(k) | Seen::Listed(k) if k.meta().name.as_deref() == Some(name) => Some(k),
            _ => None,
        }
    }

    /// One line for failure messages: variant, name, resourceVersion.
    pub fn describe(&self) -> String {
        let object = |what: &str, k: &K| {
            let meta = k.meta();
            format!(
                "{what} {} (resourceVersion {})",
                meta.name.as_deref().unwrap_or("<unnamed>"),
                meta.resource_version.as_deref().unwrap_or("-")
            )
        };
        match self {
            Seen::Applied(k) => object("applied", k),
            Seen::Listed(k) => object("listed", k),
            Seen::Deleted(k) => object("deleted", k),
            Seen::Relisting => "relisting".to_owned(),
            Seen::ListDone => "list done".to_owned(),
            Seen::Error(e) => format!("error: {e}"),
        }
    }
}

/// Drains a watcher stream in a background task and keeps everything it delivered.
/// The task stops when the recorder is dropped.
pub struct WatchRecorder<K> {
    rx: mpsc::UnboundedReceiver<Seen<K>>,
    history: Vec<Seen<K>>,
    /// Index into `history` of the first item not yet passed by [`Self::wait_for`].
    cursor: usize,
    task: JoinHandle<()>,
}

impl<K> WatchRecorder<K>
where
    K: Resource + Clone + Debug + Send + 'static,
{
    /// Starts recording `stream`, typically
    /// `watcher(api, watcher::Config::default()).default_backoff()` (without a backoff the
    /// watcher ends at its first error, so the recording would stop there too).
    pub fn start<S>(stream: S) -> Self
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                let seen = match item {
                    Ok(watcher::Event::Apply(k)) => Seen::Applied(k),
                    Ok(watcher::Event::Delete(k)) => Seen::Deleted(k),
                    Ok(watcher::Event::Init) => Seen::Relisting,
                    Ok(watcher::Event::InitApply(k)) => Seen::Listed(k),
                    Ok(watcher::Event::InitDone) => Seen::ListDone,
                    Err(e) => Seen::Error(e.to_string()),
                };
                if tx.send(seen).is_err() {
                    break;
                }
            }
        });
        Self {
            rx,
            history: Vec::new(),
            cursor: 0,
            task,
        }
    }

    /// Waits for the first item after the previous match (or the start) that satisfies `pred`
    /// and returns it. Items are examined in order, so consecutive calls assert an order.
    /// On timeout the error names `what` and lists what the watch delivered meanwhile.
    pub async fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&Seen<K>) -> bool,
    ) -> Result<Seen<K>> {
        let deadline = Instant::now() + timeout;
        let start = self.cursor;
        loop {
            while self.cursor < self.history.len() {
                let i = self.cursor;
                self.cursor += 1;
                if pred(&self.history[i]) {
                    return Ok(self.history[i].clone());
                }
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(seen)) => self.history.push(seen),
                Ok(None) => {
                    return Err(anyhow!(
                        "the watch ended before {what}; it delivered: {}",
                        self.describe_from(start)
                    ));
                }
                Err(_) => {
                    return Err(anyhow!(
                        "timed out after {timeout:?} waiting for {what}; the watch delivered: {}",
                        self.describe_from(start)
                    ));
                }
            }
        }
    }

    /// Everything recorded so far (items still in flight are not included).
    pub fn history(&self) -> &[Seen<K>] {
        &self.history
    }

    fn describe_from(&self, start: usize) -> String {
        let items: Vec<String> = self.history[start..].iter().map(Seen::describe).collect();
        if items.is_empty() {
            "nothing".to_owned()
        } else {
            items.join("; ")
        }
    }
}

impl<K> Drop for WatchRecorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
