//! One reconcile step, read → run → decide, written once for `run` and the offline runner:
//! they differ only in where the primary object lives and where the host's own writes go
//! ([`Primary`]: the informer cache and the API server, or the loaded objects), and in how
//! the guest is called (the closure [`sync`] is given).
//!
//! The host's own writes around the guest's reconcile are part of the step:
//!
//! - the guest's finalizer is added before the first reconcile of an object, so a deletion
//!   while the host is down still reaches the guest;
//! - it is removed only after a successful reconcile with `deleting = true`, from the object's
//!   latest cached version (the guest may have written it meanwhile);
//! - in shadow mode neither is made: each is compared like the guest's own writes, and the
//!   reconcile's verdict is handed back with them ([`Synced::verdict`]).

use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use serde_json::Value;

use crate::cluster::informers::CachedObject;
use crate::cluster::objects::{Gvk, ObjectKey, ObjectRef};
use crate::sandbox::capabilities::HostError;
use crate::sandbox::runtime::{Outcome, Request, Run};
use crate::sandbox::shadow::Difference;

/// Where a reconcile step reads its primary object and makes the host's own writes.
#[async_trait::async_trait]
pub(crate) trait Primary: Send + Sync {
    /// The object as cached, or none when it is gone.
    fn cached(&self, object: &ObjectRef) -> Option<Arc<CachedObject>>;
    /// Sharded: whether a key whose object is not cached belongs to another replica (counted
    /// and logged by the implementation). Never, unsharded.
    fn foreign(&self, key: &ObjectKey) -> bool;
    /// Adds `finalizer` unless `current` carries it: the object as written, or none when it
    /// already had it.
    async fn add_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<Option<Value>, HostError>;
    /// Removes `finalizer` if `current` carries it; whether it was there.
    async fn remove_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<bool, HostError>;
}

/// What the step needs to know of the guest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step<'a> {
    /// The guest's primary kind.
    pub(crate) kind: &'a Gvk,
    /// The finalizer its manifest declares.
    pub(crate) finalizer: Option<&'a str>,
    /// Shadow mode: the host's writes are compared, not made.
    pub(crate) shadow: bool,
}

/// What the queue does with the key next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    Done {
        requeue_after: Option<Duration>,
    },
    Retry,
    /// A permanent error, or a key this replica does not own: wait for the object to change.
    GiveUp,
}

/// How one step went.
pub(crate) struct Synced {
    pub(crate) next: Next,
    /// The guest's run; none when the step ended before it (another replica's key, a
    /// finalizer write that failed).
    pub(crate) run: Option<Run>,
    /// Shadow mode: the verdict to record, the host's compared writes with the guest's. A
    /// finished reconcile has one; a failed one only if it intended a change.
    pub(crate) verdict: Option<Vec<Difference>>,
}

impl Synced {
    fn ended(next: Next) -> Self {
        Self {
            next,
            run: None,
            verdict: None,
        }
    }
}

/// One key: read it from `primary`, run the guest on it with `run`, decide what the queue
/// does next, with the host's finalizer writes around the run.
pub(crate) async fn sync(
    step: Step<'_>,
    primary: &dyn Primary,
    key: &ObjectKey,
    attempt: u32,
    run: impl AsyncFnOnce(Request) -> Run,
) -> Synced {
    // Read.
    let object_ref = ObjectRef {
        kind: step.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    };
    let stored = primary.cached(&object_ref);
    if stored.is_none() && primary.foreign(key) {
        return Synced::ended(Next::GiveUp);
    }
    let deleting = stored.as_ref().is_some_and(|o| o.deletion_requested());
    // The guest gets the cache's JSON text as it is: no parse, no re-serialisation.
    let mut object = stored.as_ref().map(|o| o.json().to_owned());
    let mut writes = HostWrites::new(step, &object_ref, stored.as_deref(), deleting);
    if !writes.before(primary, &mut object).await {
        return Synced::ended(Next::Retry);
    }

    // Run.
    let request = Request {
        object_ref: object_ref.clone(),
        object,
        deleting,
        attempt,
    };
    let mut run = run(request).await;
    let verdict = writes.verdict(key, &run.outcome, &mut run.shadow_differences);

    // Decide.
    let mut next = decide(&run);
    if matches!(next, Next::Done { .. }) && !writes.after_success(primary).await {
        next = Next::Retry;
    }
    Synced {
        next,
        run: Some(run),
        verdict,
    }
}

/// What the queue does with the key after the guest's answer. A 409 during the reconcile
/// means the guest acted on a stale object: retried whatever it returned.
pub(crate) fn decide(run: &Run) -> Next {
    match &run.outcome {
        Outcome::Ok { requeue_after_ms } if !run.conflicted => {
            tracing::debug!(took = ?run.total_time(), "reconciled");
            Next::Done {
                requeue_after: requeue_after_ms.map(Duration::from_millis),
            }
        }
        Outcome::Ok { .. } => {
            tracing::info!("a write conflicted with a newer version of the object; retrying");
            Next::Retry
        }
        Outcome::Permanent(message) => {
            tracing::warn!(
                "reconcile failed permanently (no retry until the object changes): {message}"
            );
            Next::GiveUp
        }
        Outcome::Transient(message) => {
            tracing::warn!("reconcile failed, will retry with backoff: {message}");
            Next::Retry
        }
        Outcome::Trap(message) | Outcome::Deadline(message) | Outcome::MemoryLimit(message) => {
            tracing::error!("reconcile failed, will retry with backoff: {message}");
            Next::Retry
        }
    }
}

/// The host's own writes around one reconcile (see the module docs).
struct HostWrites<'a> {
    finalizer: Option<&'a str>,
    object_ref: &'a ObjectRef,
    /// The object's metadata as cached; read only when the guest declares a finalizer.
    head: Option<DynamicObject>,
    deleting: bool,
    shadow: bool,
    /// Shadow mode: what the host would have written.
    differences: Vec<Difference>,
}

impl<'a> HostWrites<'a> {
    fn new(
        step: Step<'a>,
        object_ref: &'a ObjectRef,
        stored: Option<&CachedObject>,
        deleting: bool,
    ) -> Self {
        Self {
            finalizer: step.finalizer,
            object_ref,
            head: step.finalizer.and(stored).and_then(CachedObject::to_head),
            deleting,
            shadow: step.shadow,
            differences: Vec::new(),
        }
    }

    /// Before the reconcile: adds the finalizer to an object not being deleted. `object` is
    /// what the guest will be given: the written version, or none if the object is gone.
    /// False: the write failed, retry the key.
    async fn before(&mut self, primary: &dyn Primary, object: &mut Option<String>) -> bool {
        let (Some(finalizer), Some(current), false) = (self.finalizer, &self.head, self.deleting)
        else {
            return true;
        };
        if self.shadow {
            self.differences.extend(crate::sandbox::shadow::single(
                format!("finalizer add on {}", self.object_ref),
                !crate::cluster::finalizer::carries(current, finalizer),
                format!("metadata.finalizers: {finalizer} would be added"),
            ));
            return true;
        }
        match primary
            .add_finalizer(self.object_ref, current, finalizer)
            .await
        {
            Ok(None) => {}
            Ok(Some(written)) => *object = Some(written.to_string()),
            Err(HostError::NotFound(_)) => *object = None,
            Err(e) => {
                tracing::warn!("adding finalizer {finalizer} failed, will retry: {e}");
                return false;
            }
        }
        true
    }

    /// After a successful reconcile of a deleted object: removes the finalizer from its latest
    /// cached version (in shadow mode that removal was compared in [`HostWrites::verdict`]).
    /// False: retry the key.
    async fn after_success(&self, primary: &dyn Primary) -> bool {
        let (Some(finalizer), true, false) = (self.finalizer, self.deleting, self.shadow) else {
            return true;
        };
        let Some(latest) = primary.cached(self.object_ref).and_then(|o| o.to_object()) else {
            return true;
        };
        match primary
            .remove_finalizer(self.object_ref, &latest, finalizer)
            .await
        {
            Ok(removed) => {
                if removed {
                    tracing::info!("finalizer {finalizer} removed");
                }
                true
            }
            Err(e) => {
                tracing::warn!("removing finalizer {finalizer} failed, will retry: {e}");
                false
            }
        }
    }

    /// Shadow mode: the verdict of one reconcile, the host's compared writes with the guest's
    /// (`guest_differences`); none in active mode.
    fn verdict(
        &mut self,
        key: &ObjectKey,
        outcome: &Outcome,
        guest_differences: &mut Vec<Difference>,
    ) -> Option<Vec<Difference>> {
        if !self.shadow {
            return None;
        }
        self.differences.append(guest_differences);
        let finished = matches!(outcome, Outcome::Ok { .. });
        let deleted = self.head.as_ref().filter(|_| self.deleting);
        // A finished reconcile of a deleted object would have removed the finalizer.
        if let (true, Some(finalizer), Some(object)) = (finished, self.finalizer, deleted) {
            self.differences.extend(crate::sandbox::shadow::single(
                format!("finalizer removal on {key}"),
                crate::cluster::finalizer::carries(object, finalizer),
                format!("metadata.finalizers: {finalizer} would be removed"),
            ));
        }
        (finished || !self.differences.is_empty()).then(|| std::mem::take(&mut self.differences))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::sandbox::providers::offline::{MemoryCache, RecordingCluster};

    const FINALIZER: &str = "example.com/cleanup";

    fn run(outcome: Outcome, conflicted: bool) -> Run {
        Run {
            outcome,
            conflicted,
            calls: None,
            replay: None,
            shadow_differences: Vec::new(),
            reused: false,
            store_time: Duration::ZERO,
            instantiate_time: Duration::ZERO,
            call_time: Duration::ZERO,
            teardown_time: Duration::ZERO,
        }
    }

    fn ok() -> Outcome {
        Outcome::Ok {
            requeue_after_ms: None,
        }
    }

    fn kind() -> Gvk {
        Gvk::new("", "v1", "ConfigMap")
    }

    fn key() -> ObjectKey {
        ObjectKey {
            namespace: Some("ns".into()),
            name: "a".into(),
        }
    }

    fn object_ref() -> ObjectRef {
        ObjectRef {
            kind: kind(),
            namespace: Some("ns".into()),
            name: "a".into(),
        }
    }

    /// The offline providers holding one ConfigMap `ns/a` with `metadata` merged in.
    fn loaded(metadata: &Value) -> RecordingCluster {
        let cache = Arc::new(MemoryCache::default());
        let mut object = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}});
        crate::sandbox::providers::offline::merge_patch(&mut object["metadata"], metadata);
        cache.put(object);
        RecordingCluster::new(cache)
    }

    fn finalizers(primary: &RecordingCluster) -> Value {
        let cached = primary.cached(&object_ref()).expect("cached");
        let object: Value = serde_json::from_str(cached.json()).unwrap();
        object["metadata"]["finalizers"].clone()
    }

    fn step(shadow: bool) -> Step<'static> {
        static KIND: std::sync::LazyLock<Gvk> = std::sync::LazyLock::new(kind);
        Step {
            kind: &KIND,
            finalizer: Some(FINALIZER),
            shadow,
        }
    }

    /// Syncs `key()` with a guest that answers `outcome` and keeps the request it was given.
    async fn sync_with(
        step: Step<'_>,
        primary: &dyn Primary,
        outcome: Outcome,
        conflicted: bool,
    ) -> (Synced, Option<Request>) {
        let mut given = None;
        let synced = sync(step, primary, &key(), 0, async |request| {
            given = Some(request);
            run(outcome, conflicted)
        })
        .await;
        (synced, given)
    }

    #[tokio::test]
    async fn the_finalizer_is_added_before_the_first_reconcile_and_the_guest_sees_it() {
        let primary = loaded(&serde_json::json!({}));
        let (synced, request) = sync_with(step(false), &primary, ok(), false).await;
        assert_eq!(
            synced.next,
            Next::Done {
                requeue_after: None
            }
        );
        let request = request.expect("the guest ran");
        assert!(!request.deleting);
        let given: Value = serde_json::from_str(request.object.as_deref().unwrap()).unwrap();
        assert_eq!(
            given["metadata"]["finalizers"],
            serde_json::json!([FINALIZER])
        );
        assert_ne!(
            given["metadata"]["resourceVersion"], "1",
            "the written version"
        );
        assert_eq!(finalizers(&primary), serde_json::json!([FINALIZER]));
    }

    #[tokio::test]
    async fn a_deleted_object_is_released_only_after_a_successful_reconcile() {
        let deleted = serde_json::json!({"deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["other.example/keep", FINALIZER]});
        let primary = loaded(&deleted);
        for (outcome, next) in [
            (Outcome::Transient("later".into()), Next::Retry),
            (Outcome::Permanent("never".into()), Next::GiveUp),
            (Outcome::Trap("trapped".into()), Next::Retry),
            (Outcome::Deadline("too slow".into()), Next::Retry),
        ] {
            let (synced, request) = sync_with(step(false), &primary, outcome, false).await;
            assert_eq!(synced.next, next);
            assert!(request.expect("the guest ran").deleting);
            assert_eq!(
                finalizers(&primary),
                serde_json::json!(["other.example/keep", FINALIZER]),
                "kept after a failed reconcile"
            );
        }
        let (synced, _) = sync_with(step(false), &primary, ok(), false).await;
        assert!(matches!(synced.next, Next::Done { .. }));
        assert_eq!(
            finalizers(&primary),
            serde_json::json!(["other.example/keep"]),
            "only its own removed"
        );
    }

    /// A test's primary: the offline one, with a key owned elsewhere or a finalizer write
    /// answered by `refusal`.
    struct Refusing {
        inner: RecordingCluster,
        foreign: bool,
        refusal: Option<HostError>,
    }

    #[async_trait::async_trait]
    impl Primary for Refusing {
        fn cached(&self, object: &ObjectRef) -> Option<Arc<CachedObject>> {
            self.inner.cached(object)
        }
        fn foreign(&self, _: &ObjectKey) -> bool {
            self.foreign
        }
        async fn add_finalizer(
            &self,
            object: &ObjectRef,
            current: &DynamicObject,
            finalizer: &str,
        ) -> Result<Option<Value>, HostError> {
            match &self.refusal {
                Some(e) => Err(e.clone()),
                None => self.inner.add_finalizer(object, current, finalizer).await,
            }
        }
        async fn remove_finalizer(
            &self,
            object: &ObjectRef,
            current: &DynamicObject,
            finalizer: &str,
        ) -> Result<bool, HostError> {
            match &self.refusal {
                Some(e) => Err(e.clone()),
                None => {
                    self.inner
                        .remove_finalizer(object, current, finalizer)
                        .await
                }
            }
        }
    }

    #[tokio::test]
    async fn a_conflict_retries_whatever_the_guest_returned() {
        let primary = loaded(&serde_json::json!({"finalizers": [FINALIZER]}));
        let (synced, _) = sync_with(step(false), &primary, ok(), true).await;
        assert_eq!(synced.next, Next::Retry, "a 409 during the reconcile");

        let conflicting = Refusing {
            inner: loaded(&serde_json::json!({})),
            foreign: false,
            refusal: Some(HostError::Conflict("the object has been modified".into())),
        };
        let ran = AtomicBool::new(false);
        let synced = sync(step(false), &conflicting, &key(), 0, async |_| {
            ran.store(true, Ordering::SeqCst);
            run(ok(), false)
        })
        .await;
        assert_eq!(synced.next, Next::Retry, "a 409 adding the finalizer");
        assert!(
            !ran.load(Ordering::SeqCst),
            "the guest ran without its finalizer"
        );

        let deleted = Refusing {
            inner: loaded(
                &serde_json::json!({"deletionTimestamp": "2026-01-01T00:00:00Z",
                "finalizers": [FINALIZER]}),
            ),
            foreign: false,
            refusal: Some(HostError::Conflict("the object has been modified".into())),
        };
        let (synced, _) = sync_with(step(false), &deleted, ok(), false).await;
        assert_eq!(synced.next, Next::Retry, "a 409 releasing the finalizer");
    }

    #[tokio::test]
    async fn a_key_outside_the_shard_is_given_up_and_a_gone_object_reaches_the_guest() {
        let empty = || RecordingCluster::new(Arc::new(MemoryCache::default()));
        let elsewhere = Refusing {
            inner: empty(),
            foreign: true,
            refusal: None,
        };
        let (synced, request) = sync_with(step(false), &elsewhere, ok(), false).await;
        assert_eq!(synced.next, Next::GiveUp);
        assert!(request.is_none() && synced.run.is_none(), "the guest ran");

        let (synced, request) = sync_with(step(false), &empty(), ok(), false).await;
        assert!(matches!(synced.next, Next::Done { .. }));
        let request = request.expect("the guest ran");
        assert!(request.object.is_none() && !request.deleting);
    }

    #[tokio::test]
    async fn in_shadow_mode_the_finalizer_writes_are_compared_not_made() {
        let primary = loaded(&serde_json::json!({}));
        let (synced, _) = sync_with(step(true), &primary, ok(), false).await;
        assert_eq!(finalizers(&primary), Value::Null, "written in shadow mode");
        let verdict = synced.verdict.expect("a finished reconcile has a verdict");
        assert!(
            format!("{verdict:?}").contains("would be added"),
            "{verdict:?}"
        );
        let (synced, _) = sync_with(step(false), &primary, ok(), false).await;
        assert!(synced.verdict.is_none(), "a verdict in active mode");
    }

    /// What the queue does after each way a reconcile can end: a success requeues only when
    /// the guest asked, a 409 on any write retries whatever the guest returned, a permanent
    /// error waits for the object to change, and everything else retries with backoff.
    #[test]
    fn decide_maps_every_outcome_to_what_the_queue_does_next() {
        let ok = |ms: Option<u64>| Outcome::Ok {
            requeue_after_ms: ms,
        };
        let why = || "why".to_owned();
        let table = [
            (
                ok(None),
                false,
                Next::Done {
                    requeue_after: None,
                },
            ),
            (
                ok(Some(1500)),
                false,
                Next::Done {
                    requeue_after: Some(Duration::from_millis(1500)),
                },
            ),
            (ok(Some(1500)), true, Next::Retry),
            (Outcome::Transient(why()), false, Next::Retry),
            (Outcome::Permanent(why()), false, Next::GiveUp),
            (Outcome::Permanent(why()), true, Next::GiveUp),
            (Outcome::Trap(why()), false, Next::Retry),
            (Outcome::Deadline(why()), false, Next::Retry),
            (Outcome::MemoryLimit(why()), false, Next::Retry),
        ];
        for (outcome, conflicted, expected) in table {
            let described = format!("{outcome:?} conflicted={conflicted}");
            assert_eq!(decide(&run(outcome, conflicted)), expected, "{described}");
        }
    }
}
