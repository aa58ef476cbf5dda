//! Who is calling and about what: the per-guest context that lives as long as a guest version
//! ([`GuestContext`]) and the per-reconcile one every `Host` trait is implemented on
//! ([`CallContext`]), with the steps every call shares (parse a body, host work, finish).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::budget::{Budget, HostBytes};
use super::error::HostError;
use super::replay::{self, Call};
use super::seams::{Cluster, Enqueuer, Lister};
use crate::cluster::objects::Gvk;
use crate::config::{Grant, Rates};
use crate::metrics::{HostCallOutcome, Metrics};
use crate::sandbox::manifest::Manifest;
use crate::sandbox::wit::types;

/// The providers behind the capabilities, chosen by the host: built by
/// [`crate::sandbox::providers::kube`] in `run` and [`crate::sandbox::providers::offline`] in the offline runner.
#[derive(Clone)]
pub struct Providers {
    pub lister: Arc<dyn Lister>,
    pub cluster: Arc<dyn Cluster>,
    pub queue: Arc<dyn Enqueuer>,
    /// The `network` backend, when the host configures one.
    pub network: Option<Arc<dyn crate::sandbox::backends::NetworkBackend>>,
    /// Outbound HTTP (`wasi:http`), when the host sends any for this guest.
    pub http: Option<Arc<dyn super::http::outbound::Outbound>>,
}

impl Providers {
    /// These providers with outbound HTTP served by `http`.
    #[must_use]
    pub fn with_http(mut self, http: Arc<dyn super::http::outbound::Outbound>) -> Self {
        self.http = Some(http);
        self
    }
}

/// Where a guest may act, beyond its grant's kinds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    /// `run --watch-namespace`: namespaced writes and events stay inside it.
    pub(crate) namespace: Option<String>,
    /// The namespace of the guest's primary watch (its manifest's, else the host's): the
    /// namespace of every key it may enqueue.
    pub(crate) primary_namespace: Option<String>,
    /// The finalizer the guest's manifest declares: the only one its applied objects may carry.
    pub(crate) finalizer: Option<String>,
    /// The guest's primary kind: the only kind whose objects may carry that finalizer (none:
    /// not checked, for tests that build a scope by hand).
    pub(crate) primary: Option<Gvk>,
    /// A namespaced `Reconciler`'s namespace: every write and event names an object in it
    /// (never a cluster-scoped one).
    pub(crate) tenant: Option<String>,
}

impl Scope {
    /// The scope a manifest asks for inside the host's `--watch-namespace`.
    pub(crate) fn of(manifest: &Manifest, watch_namespace: Option<&str>) -> Self {
        Self {
            namespace: watch_namespace.map(str::to_owned),
            primary_namespace: manifest
                .namespace
                .clone()
                .or_else(|| watch_namespace.map(str::to_owned)),
            finalizer: manifest.finalizer.clone(),
            primary: Some(manifest.primary.clone()),
            tenant: None,
        }
    }

    /// This scope held to `namespace` (a namespaced `Reconciler`'s guest), if given.
    #[must_use]
    pub(crate) fn in_tenant(mut self, namespace: Option<&str>) -> Self {
        self.tenant = namespace.map(str::to_owned);
        self
    }

    /// Denies a namespaced object outside `--watch-namespace`.
    pub(super) fn check(
        &self,
        guest: &str,
        namespace: Option<&str>,
        what: &str,
    ) -> Result<(), HostError> {
        if let Some(tenant) = &self.tenant
            && namespace != Some(tenant.as_str())
        {
            let there = namespace.map_or_else(
                || "on a cluster-scoped object".to_owned(),
                |ns| format!("in namespace {ns}"),
            );
            return Err(HostError::Denied(format!(
                "guest `{guest}` may not {what} {there}: a namespaced Reconciler acts only in its namespace {tenant}"
            )));
        }
        match (&self.namespace, namespace) {
            (Some(allowed), Some(ns)) if allowed != ns => Err(HostError::Denied(format!(
                "guest `{guest}` may not {what} in namespace {ns}: the host runs with --watch-namespace {allowed}"
            ))),
            _ => Ok(()),
        }
    }
}

/// Everything a guest's imports need that lives as long as the guest version is loaded.
pub struct GuestContext {
    /// The guest's manifest name: grant key, field manager, metric label.
    pub(crate) name: String,
    pub(crate) grant: Grant,
    pub(crate) scope: Scope,
    pub(crate) providers: Providers,
    pub(crate) budget: Arc<Budget>,
    pub(crate) metrics: Option<Metrics>,
    /// A fixed wall-clock time for the guest (offline runs that must be reproducible).
    pub(crate) fixed_clock: Option<std::time::SystemTime>,
}

impl GuestContext {
    /// A context with the given grant and providers, default scope and rates, no metrics.
    pub fn new(name: impl Into<String>, grant: Grant, providers: Providers) -> Self {
        let rates = if grant.unrestricted {
            Rates::unlimited()
        } else {
            grant.limits.rates()
        };
        let budget = Arc::new(Budget::new(rates));
        Self {
            name: name.into(),
            grant,
            scope: Scope::default(),
            providers,
            budget,
            metrics: None,
            fixed_clock: None,
        }
    }

    #[must_use]
    pub(crate) fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    #[must_use]
    pub(crate) fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    #[must_use]
    pub(crate) fn with_clock(mut self, at: Option<std::time::SystemTime>) -> Self {
        self.fixed_clock = at;
        self
    }

    /// Shares another version's budget (a hot swap keeps the guest's rates).
    #[must_use]
    pub(crate) fn with_budget(mut self, budget: Arc<Budget>) -> Self {
        self.budget = budget;
        self
    }

    /// A context whose every call is denied: used while a guest describes itself.
    pub(crate) fn loading(file: &str) -> Self {
        Self::new(file, Grant::default(), Providers::deny_all())
    }
}

/// Per-reconcile state of the capabilities: who is calling, about which key, until when. The
/// `Host` traits of every interface are implemented on it.
pub struct CallContext {
    pub(crate) guest: Arc<GuestContext>,
    /// Display form of the key being reconciled, for log lines.
    pub(crate) key: String,
    pub(crate) deadline: Instant,
    /// The runtime whose reactor serves the providers and WASI; the guest call runs on it.
    pub(crate) runtime: Option<tokio::runtime::Handle>,
    /// Set when any write hit a 409: the host retries the reconcile whatever the guest returns.
    pub(crate) conflicted: bool,
    /// When set, every call is appended here (offline runner, conformance tests).
    pub(crate) calls: Option<Vec<Call>>,
    /// The last line the guest logged at error level (the Rust SDK logs its panics there).
    pub(crate) last_error: Option<String>,
    /// Log lines dropped by the guest's log rate in this reconcile.
    pub(crate) logs_dropped: u64,
    /// Shadow mode: the changes this reconcile intended that would have changed something.
    pub(crate) shadow_differences: Vec<crate::sandbox::shadow::Difference>,
    /// Host memory held for the last list's result until the guest's next list or body, or the
    /// reconcile's end: the copy lives on in wasmtime until it is lowered into the guest's
    /// memory, after the import returns.
    pub(super) held: Option<HostBytes>,
    /// The wall clock and random seed this reconcile's guest is given, instead of live ones
    /// (a recorded or replayed reconcile).
    pub(crate) pinned: Option<Pinned>,
    /// Replaying a record: every call is answered from it, no provider is called.
    pub(crate) replay: Option<Box<replay::Replayer>>,
    /// What this reconcile's outbound HTTP exchanges left (they run in tasks of their own);
    /// folded into the fields above by [`CallContext::absorb_http`] when the call ends.
    pub(crate) http: Arc<std::sync::Mutex<super::http::session::Session>>,
}

/// What a recorded reconcile's guest sees of time and chance, so a replay can give it the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pinned {
    /// The wall clock, stopped at this instant for the whole reconcile.
    pub(crate) clock: std::time::SystemTime,
    /// Seeds every WASI random source.
    pub(crate) seed: u64,
}

/// Host work units (objects visited times selector terms) done on the calling async worker:
/// ~5-10 µs of label checks. Above it the work moves off the worker with `block_in_place`,
/// which costs ~1 µs (median; 4 µs p99) where `spawn_blocking` costs ~5 µs (10 µs p99),
/// both measured on the 2-core dev machine; below it moving would cost more than it saves.
pub(super) const INLINE_WORK: usize = 1024;

impl CallContext {
    /// A context for reconciling `key`; the deadline is reset when the reconcile starts.
    pub fn new(
        guest: Arc<GuestContext>,
        key: String,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Self {
        let deadline = Instant::now() + guest.grant.limits.deadline();
        Self {
            guest,
            key,
            deadline,
            runtime,
            conflicted: false,
            calls: None,
            last_error: None,
            logs_dropped: 0,
            shadow_differences: Vec::new(),
            held: None,
            pinned: None,
            replay: None,
            http: Arc::default(),
        }
    }

    /// The context an instance kept between reconciles holds while idle: its guest, no key.
    #[must_use]
    pub(crate) fn idle(&self) -> Self {
        Self::new(self.guest.clone(), String::new(), self.runtime.clone())
    }

    /// Records every call of this reconcile (see [`Call`]).
    #[must_use]
    pub fn recording(mut self) -> Self {
        self.calls = Some(Vec::new());
        self
    }

    /// Gives the guest this clock and random seed (see [`Pinned`]).
    #[must_use]
    pub(crate) fn pinned(mut self, pinned: Pinned) -> Self {
        self.pinned = Some(pinned);
        self
    }

    /// Answers every call from `replay` (see [`replay::Replayer`]).
    #[must_use]
    pub(crate) fn replaying(mut self, replay: replay::Replayer) -> Self {
        // HTTP exchanges are answered by the request hook, in their own order.
        let (http, rest) = replay.split(super::http::session::INTERFACE);
        super::http::session::lock(&self.http).replay = Some(http.into());
        self.replay = Some(Box::new(rest));
        self
    }

    /// Folds what the outbound HTTP exchanges recorded into this context: their calls (after
    /// the others), shadow mode's requests not sent, and a replay's divergence.
    pub(crate) fn absorb_http(&mut self) {
        let session = std::mem::take(&mut *super::http::session::lock(&self.http));
        if let Some(calls) = &mut self.calls {
            calls.extend(session.calls);
        }
        self.shadow_differences.extend(session.differences);
        if let Some(replay) = &mut self.replay {
            let unanswered = session.replay.as_ref().and_then(|q| q.front().cloned());
            replay.http_diverged(session.divergence, unanswered);
        }
    }

    /// In a replay, the recorded answer to this call (its `ok` value or error); otherwise
    /// none, and the call goes to its provider.
    pub(super) fn replayed(
        &mut self,
        interface: &'static str,
        function: &'static str,
        args: impl FnOnce() -> Value,
    ) -> Option<Result<Value, HostError>> {
        let replay = self.replay.as_mut()?;
        Some(replay.answer(interface, function, &args()))
    }

    /// One import call as every capability makes it: in a replay, answered from the record
    /// (`from_record` reads the recorded answer); otherwise by `live`, its provider. Then
    /// counted and, when recording, recorded (`args` and `returned` build the JSON only then).
    pub(super) async fn recorded<T>(
        &mut self,
        (interface, function): (&'static str, &'static str),
        args: impl Fn() -> Value,
        from_record: impl FnOnce(Value) -> Result<T, HostError>,
        live: impl AsyncFnOnce(&mut Self) -> Result<T, HostError>,
        returned: impl FnOnce(&T) -> Value,
    ) -> Result<T, HostError> {
        let result = match self.replayed(interface, function, &args) {
            Some(answer) => answer.and_then(from_record),
            None => live(self).await,
        };
        self.finish(interface, function, args, &result, returned);
        result
    }

    /// The context of `manifest()`: a guest that calls the host while describing itself is
    /// refused (no grant is known yet).
    pub(crate) fn loading(file: &str, deadline: Duration) -> Self {
        let mut call = Self::new(Arc::new(GuestContext::loading(file)), String::new(), None);
        call.deadline = Instant::now() + deadline;
        call
    }

    pub(super) fn name(&self) -> &str {
        &self.guest.name
    }

    /// Whether this guest runs in shadow mode: nothing it would change is changed.
    pub(super) fn shadow(&self) -> bool {
        self.guest.grant.mode == crate::config::Mode::Shadow
    }

    pub(super) fn differs(&mut self, difference: Option<crate::sandbox::shadow::Difference>) {
        self.shadow_differences.extend(difference);
    }

    /// Waits for a write token, bounded by the deadline (the runtime's timeout cancels the
    /// wait, and with it the guest, when the deadline passes first).
    pub(super) async fn write_token(&self) {
        self.guest.budget.writes.until_ready().await;
    }

    /// Parses a JSON body the guest handed over (`field` names it in refusals), charging what
    /// that costs the host to the guest, in this order:
    /// 1. more than 3 MiB: `invalid` (free);
    /// 2. the body rate: waits for the body's bytes (`bodyBytesPerSecond`);
    /// 3. host CPU the guest still owes: waits for its share to refill;
    /// 4. a pre-pass without allocation ([`crate::cluster::validation::json_shape`]): bad JSON, too
    ///    deep or more than 262,144 values is `invalid`, and no tree is built;
    /// 5. the tree's estimated bytes plus a copy of the text (what the provider sends) held
    ///    from the guest's host-memory budget: more than its whole memory cap is `invalid`,
    ///    otherwise this waits while the guest's other reconciles hold the rest;
    /// 6. the parse.
    ///
    /// The time of 4 and 6 is taken from the guest's CPU share. Waits end at the deadline.
    /// Keep the returned guard until the provider call returns: the memory is counted while it
    /// lives. The API server's answer is not counted: it is bounded by the server's own object
    /// size limit (etcd's 1.5 MiB by default).
    pub(super) async fn parse_body(
        &mut self,
        field: &str,
        text: &str,
    ) -> Result<(Value, HostBytes), HostError> {
        use crate::cluster::validation::{Invalid, json_shape};
        // A list's copy is in the guest's memory by now; held on, it could block this body.
        self.held = None;
        let budget = &self.guest.budget;
        crate::cluster::validation::body_size(field, text)?;
        budget.body_bytes(text.len()).await.map_err(|_| {
            HostError::Limited(format!(
                "{field}: {} bytes exceed guest `{}`'s body rate bucket",
                text.len(),
                self.name()
            ))
        })?;
        budget.settle_cpu().await;
        let shape = {
            let _meter = budget.meter();
            json_shape(field, text)?
        };
        let needed = shape.tree_bytes(text.len()).saturating_add(text.len());
        let Some(held) = budget.hold(needed).await else {
            return Err(Invalid::new(
                field,
                format!(
                    "parsing this body ({} bytes, {} values) would hold ~{} MiB of host memory, more than guest `{}`'s memory cap of {} MiB (limits.memoryMiB), which bounds what the host holds for it; send a smaller body",
                    text.len(),
                    shape.values,
                    needed.div_ceil(1 << 20),
                    self.name(),
                    budget.host_memory_bytes() >> 20
                ),
            )
            .into());
        };
        let value = {
            let _meter = budget.meter();
            serde_json::from_str(text)
                .map_err(|e| Invalid::new(field, format!("is not valid JSON: {e}")))?
        };
        Ok((value, held))
    }

    /// Runs synchronous host work for the guest (`units`: objects visited times selector terms)
    /// and takes its time from the guest's CPU share. Work above [`INLINE_WORK`] moves off the
    /// async worker, so the other guests' reconciles on it go on (on a current-thread runtime,
    /// the offline runner's and tests', it runs in place). Not cancellable once started: its
    /// cost is bounded by the cache it reads and the 4 KiB selector cap.
    pub(super) fn host_work<T>(&self, units: usize, work: impl FnOnce() -> T) -> T {
        let _meter = self.guest.budget.meter();
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if units <= INLINE_WORK || !multi_thread {
            work()
        } else {
            tokio::task::block_in_place(work)
        }
    }

    /// Counts (and, when recording, records) one finished call. `args` and `returned` build
    /// the recorded JSON only when recording, so the hot path pays nothing for them.
    pub(super) fn finish<T>(
        &mut self,
        interface: &'static str,
        function: &'static str,
        args: impl FnOnce() -> Value,
        result: &Result<T, HostError>,
        returned: impl FnOnce(&T) -> Value,
    ) {
        if let Some(metrics) = &self.guest.metrics {
            let outcome = match result {
                Ok(_) => HostCallOutcome::Ok,
                Err(e) => e.outcome(),
            };
            metrics.host_call(&self.guest.name, interface, function, outcome);
        }
        if matches!(result, Err(HostError::Conflict(_))) {
            self.conflicted = true;
        }
        if let Some(calls) = &mut self.calls {
            let returned = match result {
                Ok(v) => serde_json::json!({ "ok": returned(v) }),
                Err(e) => serde_json::json!({ "error": { e.kind(): e.message() } }),
            };
            calls.push(Call {
                interface,
                function,
                args: args(),
                returned,
            });
        }
    }
}

impl types::Host for CallContext {}

/// Records a returned value as it is.
pub(super) fn as_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Embeds JSON text as JSON in recorded calls (falls back to the string if it does not parse).
pub(super) fn embed(text: &str) -> Value {
    if text.len() > crate::cluster::validation::MAX_BODY_BYTES {
        return Value::String(format!("<{} bytes>", text.len()));
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::capabilities::testing;

    const STATUS_GRANT: &str =
        "{read: [v1/ConfigMap], write: [v1/ConfigMap/status], limits: {memoryMiB: 1}}";

    fn cm() -> types::ObjectRef {
        types::ObjectRef {
            kind: crate::cluster::objects::Gvk::new("", "v1", "ConfigMap").into(),
            namespace: Some("ns".into()),
            name: "a".into(),
        }
    }

    fn status_of_zeros(n: usize) -> String {
        format!(r#"{{"status":{{"x":[{}0]}}}}"#, "0,".repeat(n))
    }

    #[test]
    fn a_namespaced_reconcilers_guest_acts_only_in_its_namespace() {
        let scope = Scope::default().in_tenant(Some("team-a"));
        assert!(scope.check("g", Some("team-a"), "write").is_ok());
        for (namespace, shown) in [
            (Some("team-b"), "in namespace team-b"),
            (None, "on a cluster-scoped object"),
        ] {
            let err = scope
                .check("g", namespace, "write")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(shown) && err.contains("its namespace team-a"),
                "{err}"
            );
        }
        // Every other guest: cluster-scoped objects and other namespaces as before.
        assert!(Scope::default().check("g", None, "write").is_ok());
        assert!(Scope::default().check("g", Some("team-b"), "write").is_ok());
    }

    #[tokio::test]
    async fn a_body_is_charged_to_the_guest_before_it_is_parsed() {
        use crate::sandbox::wit::reconciler::api::cluster::Host as _;
        let h = testing::Harness::new();
        h.cache.put(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}));
        let mut call = h.call(STATUS_GRANT, Scope::default());
        let refused = |result: Result<String, types::Error>| match result {
            Err(types::Error::Invalid(m)) => m,
            other => panic!("not refused as invalid: {other:?}"),
        };
        // Too many values: refused by the pre-pass, whatever the cap.
        let m = refused(call.patch_status(cm(), status_of_zeros(300_000)).await);
        assert!(
            m.starts_with("patch: holds more than 262144 JSON values"),
            "{m}"
        );
        // A tree of ~2.2 MiB against a cap of 1 MiB: refused, naming both, before parsing.
        let m = refused(call.patch_status(cm(), status_of_zeros(20_000)).await);
        assert!(
            m.starts_with("patch: parsing this body (40020 bytes, 20004 values) would hold ~3 MiB")
                && m.contains("guest `g`'s memory cap of 1 MiB"),
            "{m}"
        );
        // Within the cap: parsed and sent.
        call.patch_status(cm(), status_of_zeros(100)).await.unwrap();
    }

    #[tokio::test]
    async fn bodies_beyond_the_guests_body_rate_wait_for_it() {
        use crate::sandbox::wit::reconciler::api::cluster::Host as _;
        let h = testing::Harness::new();
        h.cache.put(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}));
        let mut call = h.call(
            "{read: [v1/ConfigMap], write: [v1/ConfigMap/status], limits: {bodyBytesPerSecond: 1024}}",
            Scope::default(),
        );
        // The bucket holds one largest body (3 MiB); the second 2 MiB waits ~1,000 s at 1 KiB/s.
        let body = format!(r#"{{"status":{{"x":"{}"}}}}"#, "a".repeat(2 << 20));
        call.patch_status(cm(), body.clone()).await.unwrap();
        let second =
            tokio::time::timeout(Duration::from_millis(300), call.patch_status(cm(), body)).await;
        assert!(second.is_err(), "a body beyond the rate was parsed at once");
    }
}
