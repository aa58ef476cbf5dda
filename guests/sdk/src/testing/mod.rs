//! A fake host for a guest's native unit tests (`cargo test` for the machine's own target), so
//! that a test can call the guest's [`Watches::map`](crate::Watches::map), its
//! [`Indexes::index`](crate::Indexes::index) or a whole [`Guest::reconcile`](crate::Guest::reconcile)
//! even when they read the cache or write. Natively, wit-bindgen's imports have no host behind
//! them; with a [`FakeHost`] installed on the test's thread, [`lister`](crate::lister),
//! [`cluster`](crate::cluster), [`event`](crate::event), [`queue`](crate::queue) and
//! [`log`](crate::log) answer from it. Only in native builds: none of it is in a component.
//!
//! ```
//! use reconciler_guest::serde_json::{Value, json};
//! use reconciler_guest::testing::{Call, FakeHost};
//! use reconciler_guest::{Gvk, ObjectKey, gvk, lister};
//!
//! // A guest's map function: the web Widgets of a ConfigMap's namespace that name it.
//! fn widgets_using(config_map: &str) -> Vec<ObjectKey> {
//!     let config_map: Value = reconciler_guest::serde_json::from_str(config_map).unwrap();
//!     let namespace = config_map["metadata"]["namespace"].as_str();
//!     let widgets = lister::list(&widget(), namespace, Some("app=web")).unwrap_or_default();
//!     widgets
//!         .iter()
//!         .filter(|w| w["spec"]["configMap"] == config_map["metadata"]["name"])
//!         .map(|w| ObjectKey::new(namespace, w["metadata"]["name"].as_str().unwrap()))
//!         .collect()
//! }
//! fn widget() -> Gvk {
//!     gvk!("example.com", "v1", "Widget")
//! }
//! let widget_named = |namespace: &str, name: &str, app: &str| {
//!     json!({"apiVersion": "example.com/v1", "kind": "Widget",
//!            "metadata": {"namespace": namespace, "name": name, "labels": {"app": app}},
//!            "spec": {"configMap": "settings"}})
//! };
//!
//! let host = FakeHost::new()
//!     .with_objects([
//!         widget_named("demo", "b", "web"),
//!         widget_named("demo", "a", "web"),
//!         widget_named("demo", "db", "db"),   // not selected
//!         widget_named("other", "c", "web"), // another namespace
//!     ])
//!     .install(); // this thread's host until `host` is dropped
//!
//! let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                         "metadata": {"namespace": "demo", "name": "settings"}});
//! assert_eq!(
//!     widgets_using(&config_map.to_string()),
//!     [ObjectKey::new(Some("demo"), "a"), ObjectKey::new(Some("demo"), "b")]
//! );
//! assert_eq!(
//!     host.calls(),
//!     [Call::List {
//!         kind: widget(),
//!         namespace: Some("demo".into()),
//!         label_selector: Some("app=web".into()),
//!     }]
//! );
//! ```
//!
//! What the fake answers, kept simple on purpose (the offline runner, `reconciler-host
//! reconcile` and `test`, runs the built component under its grant and is the full model):
//!
//! - **reads**: `get` finds an object by kind (group, version and kind), namespace and name;
//!   `list` takes the objects of a kind in a namespace (none: all) matching a label selector
//!   in the host's syntax (`=`, `==`, `!=`, `key`, `!key`, `in (..)`, `notin (..)`; a bad one
//!   is `invalid` with the host's text), sorted by namespace, then name, as the host's cache
//!   returns them.
//! - **writes** answer as a server would and change the fake's objects, so a later read sees
//!   them: `patch-status` merges the patch's `status` into the object (an RFC 7386 merge patch;
//!   `not-found` when there is no such object); `apply` and `apply-with` merge the object into
//!   the stored one, or create it (`invalid` without `apiVersion`, `kind` and `metadata.name`);
//!   `delete` removes it. `record-event` and `enqueue` are recorded only.
//! - **every call**, log lines included, is recorded in order: [`FakeHost::calls`],
//!   [`FakeHost::writes`], [`FakeHost::logs`]; [`FakeHost::fail`] makes calls fail.
//! - **not modelled**: grants (every kind is readable, every write allowed), field ownership
//!   (an `apply-with` without `force` never conflicts), `resourceVersion` and `generation`,
//!   what the host refuses inside `map` (writes) and `index` (every call), and the network
//!   backend and HTTP.

mod selector;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use crate::cluster::ApplyOptions;
use crate::event::Event;
use crate::log::Level;
use crate::{Gvk, HostError, Json, ObjectKey, ObjectRef, Request};

/// One call the guest made to the host, in the contract's terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `lister.get`.
    Get(ObjectRef),
    /// `lister.list`.
    List {
        kind: Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    },
    /// `cluster.patch-status`: the whole merge patch, `{"status": ...}` (its text, as a JSON
    /// string, when it is not JSON).
    PatchStatus { target: ObjectRef, patch: Value },
    /// `cluster.apply`: the object sent.
    Apply(Value),
    /// `cluster.apply-with`: the object sent and whether it was forced.
    ApplyWith { object: Value, force: bool },
    /// `cluster.delete`.
    Delete(ObjectRef),
    /// `cluster.record-event`.
    RecordEvent(Event),
    /// `queue.enqueue`.
    Enqueue {
        key: ObjectKey,
        after: Option<Duration>,
    },
    /// `log.log`.
    Log { level: Level, message: String },
}

/// The contract's names of the calls, as [`Call::name`] gives them and [`FakeHost::fail`]
/// takes them.
const CALL_NAMES: [&str; 9] = [
    "get",
    "list",
    "patch-status",
    "apply",
    "apply-with",
    "delete",
    "record-event",
    "enqueue",
    "log",
];

impl Call {
    /// The contract's name of the function: `get`, `list`, `patch-status`, `apply`,
    /// `apply-with`, `delete`, `record-event`, `enqueue` or `log`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Call::Get(_) => "get",
            Call::List { .. } => "list",
            Call::PatchStatus { .. } => "patch-status",
            Call::Apply(_) => "apply",
            Call::ApplyWith { .. } => "apply-with",
            Call::Delete(_) => "delete",
            Call::RecordEvent(_) => "record-event",
            Call::Enqueue { .. } => "enqueue",
            Call::Log { .. } => "log",
        }
    }

    /// Whether the call asks the host to change something (or to record an event, or enqueue):
    /// every call but `get`, `list` and `log`.
    #[must_use]
    pub fn is_write(&self) -> bool {
        !matches!(self, Call::Get(_) | Call::List { .. } | Call::Log { .. })
    }
}

/// Where an object is kept: sorted by kind, then namespace (`""` when cluster-scoped, as in
/// the host's cache), then name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    group: String,
    version: String,
    kind: String,
    namespace: String,
    name: String,
}

impl Place {
    fn of(target: &ObjectRef) -> Self {
        Place {
            group: target.kind.group.clone(),
            version: target.kind.version.clone(),
            kind: target.kind.kind.clone(),
            namespace: target.namespace.clone().unwrap_or_default(),
            name: target.name.clone(),
        }
    }

    fn is_of(&self, kind: &Gvk) -> bool {
        self.group == kind.group && self.version == kind.version && self.kind == kind.kind
    }
}

#[derive(Default)]
struct State {
    objects: BTreeMap<Place, Value>,
    calls: Vec<Call>,
    /// What [`FakeHost::fail`] set: the error a call of that name returns.
    failures: BTreeMap<&'static str, HostError>,
}

impl State {
    /// Records `call`; the error [`FakeHost::fail`] set for it, if any.
    fn record(&mut self, call: Call) -> Result<(), HostError> {
        let failure = self.failures.get(call.name()).cloned();
        self.calls.push(call);
        failure.map_or(Ok(()), Err)
    }
}

thread_local! {
    /// The fake answering this thread's host calls: one per test thread, so `cargo test`'s
    /// parallel tests each have their own.
    static INSTALLED: RefCell<Option<Rc<RefCell<State>>>> = const { RefCell::new(None) };
}

/// Objects for the guest to read, and a record of every call it makes. Build one with
/// [`FakeHost::new`] and [`FakeHost::with_objects`], then [`FakeHost::install`] it; the
/// guard it returns reads the same fake ([`FakeHost::calls`], [`FakeHost::objects`], ...).
#[derive(Default)]
pub struct FakeHost {
    state: Rc<RefCell<State>>,
}

impl FakeHost {
    /// A fake with no objects.
    #[must_use]
    pub fn new() -> Self {
        FakeHost::default()
    }

    /// Adds an object for the guest to read: a `serde_json::Value`, a `k8s-openapi` object, any
    /// `Serialize` value whose JSON has `apiVersion`, `kind` and `metadata.name`, or the JSON
    /// text of one (a `&str` or `String`). One of the same kind, namespace and name replaces
    /// the one before.
    ///
    /// # Panics
    ///
    /// When the object does not serialise, its text is not JSON, or it has no `apiVersion`,
    /// `kind` or `metadata.name`: the test's own objects are wrong.
    #[must_use]
    pub fn with_object(self, object: impl Serialize) -> Self {
        let object = to_object(object);
        let Some(target) = ObjectRef::from_json(&object) else {
            panic!("FakeHost: object {object} needs apiVersion, kind and metadata.name");
        };
        self.state
            .borrow_mut()
            .objects
            .insert(Place::of(&target), object);
        self
    }

    /// Adds each object, as [`FakeHost::with_object`].
    ///
    /// # Panics
    ///
    /// As [`FakeHost::with_object`].
    #[must_use]
    pub fn with_objects<T: Serialize>(self, objects: impl IntoIterator<Item = T>) -> Self {
        objects.into_iter().fold(self, FakeHost::with_object)
    }

    /// Makes this fake the host of the current thread's calls until the guard is dropped.
    ///
    /// # Panics
    ///
    /// When another fake is installed on this thread (drop its guard first).
    #[must_use = "the fake is uninstalled when the guard is dropped"]
    pub fn install(self) -> FakeHostGuard {
        INSTALLED.with(|installed| {
            let mut installed = installed.borrow_mut();
            assert!(
                installed.is_none(),
                "FakeHost: another fake host is installed on this thread; drop its guard first"
            );
            *installed = Some(Rc::clone(&self.state));
        });
        FakeHostGuard { host: self }
    }

    /// Every call so far, in order.
    #[must_use]
    pub fn calls(&self) -> Vec<Call> {
        self.state.borrow().calls.clone()
    }

    /// The calls so far that ask for a change ([`Call::is_write`]): what the guest would have
    /// done to the cluster.
    #[must_use]
    pub fn writes(&self) -> Vec<Call> {
        self.state
            .borrow()
            .calls
            .iter()
            .filter(|c| c.is_write())
            .cloned()
            .collect()
    }

    /// The lines logged so far, in order.
    #[must_use]
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.state
            .borrow()
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Log { level, message } => Some((*level, message.clone())),
                _ => None,
            })
            .collect()
    }

    /// The object now (as the writes so far left it), or none.
    #[must_use]
    pub fn object(&self, target: &ObjectRef) -> Option<Value> {
        self.state.borrow().objects.get(&Place::of(target)).cloned()
    }

    /// Every object now, sorted by kind, namespace and name.
    #[must_use]
    pub fn objects(&self) -> Vec<Value> {
        self.state.borrow().objects.values().cloned().collect()
    }

    /// The request the host would hand a reconcile of `target` now: its object as the writes
    /// so far left it (none when it is gone), `deleting` when it carries a
    /// `metadata.deletionTimestamp`, first attempt.
    #[must_use]
    pub fn request(&self, target: &ObjectRef) -> Request {
        let object = self.object(target);
        Request {
            ref_: target.clone(),
            deleting: object
                .as_ref()
                .is_some_and(|o| !o["metadata"]["deletionTimestamp"].is_null()),
            object: object.map(|o| o.to_string()),
            attempt: 0,
        }
    }

    /// From now on, the calls named (the contract's names, as [`Call::name`]; none: every call
    /// but `log`) fail with `error`. They are still recorded; a failed write changes nothing.
    ///
    /// # Panics
    ///
    /// On a name that is not a call's.
    #[allow(clippy::needless_pass_by_value)] // a test writes the error in the call
    pub fn fail(&self, calls: &[&str], error: HostError) {
        let mut state = self.state.borrow_mut();
        if calls.is_empty() {
            for name in CALL_NAMES.iter().filter(|n| **n != "log") {
                state.failures.insert(name, error.clone());
            }
        }
        for name in calls {
            let Some(name) = CALL_NAMES.iter().find(|n| *n == name) else {
                panic!("FakeHost::fail: no call is named {name:?} (one of {CALL_NAMES:?})");
            };
            state.failures.insert(name, error.clone());
        }
    }
}

/// The installed [`FakeHost`]: read it through this guard; dropping it uninstalls the fake.
pub struct FakeHostGuard {
    host: FakeHost,
}

impl std::ops::Deref for FakeHostGuard {
    type Target = FakeHost;

    fn deref(&self) -> &FakeHost {
        &self.host
    }
}

impl Drop for FakeHostGuard {
    fn drop(&mut self) {
        // `try_with`: a guard dropped while the thread ends has nothing left to uninstall.
        let _ = INSTALLED.try_with(|installed| installed.borrow_mut().take());
    }
}

/// The JSON of a test's object; text is parsed (no Kubernetes object is a JSON string).
fn to_object(object: impl Serialize) -> Value {
    match serde_json::to_value(object) {
        Ok(Value::String(text)) => serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("FakeHost: object text {text:?} is not JSON: {e}")),
        Ok(value) => value,
        Err(e) => panic!("FakeHost: an object does not serialise: {e}"),
    }
}

/// RFC 7386 JSON merge patch, as the offline runner writes patches and applies.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// The object's labels; none that are not strings.
fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// The contract's imports, natively: what [`crate::host`] calls instead of the bindings. Each
/// has the signature of the generated import it stands for.
pub(crate) mod imports {
    use super::{
        ApplyOptions, Call, Duration, Event, HostError, Json, Level, ObjectKey, ObjectRef, Place,
        Rc, State, Value, merge_patch, selector,
    };
    use crate::Gvk;

    /// Answers a call from this thread's fake.
    fn answer<R>(call: impl FnOnce(&mut State) -> R) -> R {
        let installed =
            super::INSTALLED.with(|installed| installed.borrow().as_ref().map(Rc::clone));
        let Some(state) = installed else {
            panic!(
                "reconciler-guest: no host to call: host calls work only inside the component; \
                 in a native test, install a fake host first: \
                 `let host = reconciler_guest::testing::FakeHost::new().with_objects([..]).install();`"
            );
        };
        call(&mut state.borrow_mut())
    }

    pub(crate) fn get(target: &ObjectRef) -> Result<Option<Json>, HostError> {
        answer(|state| {
            state.record(Call::Get(target.clone()))?;
            Ok(state.objects.get(&Place::of(target)).map(Value::to_string))
        })
    }

    pub(crate) fn list(
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Json>, HostError> {
        answer(|state| {
            state.record(Call::List {
                kind: kind.clone(),
                namespace: namespace.map(str::to_owned),
                label_selector: label_selector.map(str::to_owned),
            })?;
            let selector = selector::parse(label_selector.unwrap_or_default())
                .map_err(|e| HostError::Invalid(format!("label-selector: {e}")))?;
            Ok(state
                .objects
                .iter()
                .filter(|(place, _)| {
                    place.is_of(kind) && namespace.is_none_or(|ns| place.namespace == ns)
                })
                .filter(|(_, object)| selector::matches(&selector, &super::labels(object)))
                .map(|(_, object)| object.to_string())
                .collect())
        })
    }

    pub(crate) fn patch_status(target: &ObjectRef, patch: &str) -> Result<Json, HostError> {
        answer(|state| {
            let parsed = serde_json::from_str::<Value>(patch);
            state.record(Call::PatchStatus {
                target: target.clone(),
                patch: parsed
                    .as_ref()
                    .map_or_else(|_| Value::String(patch.to_owned()), Value::clone),
            })?;
            let patch = parsed.map_err(|e| {
                HostError::Invalid(format!("the status patch of {target} is not JSON: {e}"))
            })?;
            let Some(object) = state.objects.get_mut(&Place::of(target)) else {
                return Err(HostError::NotFound(format!(
                    "{target} is not among the fake host's objects"
                )));
            };
            // Only `status` is written through the status subresource, as on a real server.
            if let Some(status) = patch.get("status") {
                merge_patch(object, &serde_json::json!({ "status": status }));
            }
            Ok(object.to_string())
        })
    }

    pub(crate) fn apply(object: &str) -> Result<Json, HostError> {
        answer(|state| {
            let parsed = serde_json::from_str::<Value>(object);
            state.record(Call::Apply(
                parsed
                    .as_ref()
                    .map_or_else(|_| Value::String(object.to_owned()), Value::clone),
            ))?;
            merge_applied(state, parsed)
        })
    }

    pub(crate) fn apply_with(object: &str, options: ApplyOptions) -> Result<Json, HostError> {
        answer(|state| {
            let parsed = serde_json::from_str::<Value>(object);
            state.record(Call::ApplyWith {
                object: parsed
                    .as_ref()
                    .map_or_else(|_| Value::String(object.to_owned()), Value::clone),
                force: options.force,
            })?;
            merge_applied(state, parsed)
        })
    }

    /// Field ownership is not modelled: the applied object is merged into the stored one as a
    /// merge patch, as the offline runner does.
    fn merge_applied(
        state: &mut State,
        applied: serde_json::Result<Value>,
    ) -> Result<Json, HostError> {
        let applied = applied
            .map_err(|e| HostError::Invalid(format!("the applied object is not JSON: {e}")))?;
        let Some(target) = ObjectRef::from_json(&applied) else {
            return Err(HostError::Invalid(
                "the applied object needs apiVersion, kind and metadata.name".into(),
            ));
        };
        let object = state
            .objects
            .entry(Place::of(&target))
            .or_insert(Value::Null);
        merge_patch(object, &applied);
        Ok(object.to_string())
    }

    pub(crate) fn delete(target: &ObjectRef) -> Result<bool, HostError> {
        answer(|state| {
            state.record(Call::Delete(target.clone()))?;
            Ok(state.objects.remove(&Place::of(target)).is_some())
        })
    }

    pub(crate) fn record_event(event: &Event) -> Result<(), HostError> {
        answer(|state| state.record(Call::RecordEvent(event.clone())))
    }

    pub(crate) fn enqueue(key: &ObjectKey, after_ms: Option<u64>) -> Result<(), HostError> {
        answer(|state| {
            state.record(Call::Enqueue {
                key: key.clone(),
                after: after_ms.map(Duration::from_millis),
            })
        })
    }

    pub(crate) fn log(level: Level, message: &str) {
        answer(|state| {
            state.calls.push(Call::Log {
                level,
                message: message.to_owned(),
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use crate::{cluster, event, gvk, lister, queue};

    fn config_map(namespace: &str, name: &str, labels: &Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"namespace": namespace, "name": name, "labels": labels},
               "data": {"name": name}})
    }

    fn at(namespace: &str, name: &str) -> ObjectRef {
        ObjectRef::namespaced(gvk!("", "v1", "ConfigMap"), namespace, name)
    }

    fn names(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    /// Three `ConfigMap`s in two namespaces, loaded out of order, a Secret and a Namespace.
    fn cluster() -> FakeHostGuard {
        FakeHost::new()
            .with_objects([
                config_map("b", "web", &json!({"app": "web", "tier": "front"})),
                config_map("a", "db", &json!({"app": "db"})),
                config_map("a", "web", &json!({"app": "web"})),
            ])
            .with_object(r#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": "a", "name": "web"}}"#)
            .with_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}))
            .install()
    }

    #[test]
    fn get_finds_an_object_by_kind_namespace_and_name() {
        let host = cluster();
        let found = lister::get(&at("a", "web")).unwrap().unwrap();
        assert_eq!(found["data"]["name"], "web");
        assert_eq!(found["metadata"]["labels"]["app"], "web");
        assert_eq!(lister::get(&at("a", "nothing")).unwrap(), None);
        // The Secret of the same namespace and name is another object.
        let secret = ObjectRef::namespaced(gvk!("", "v1", "Secret"), "a", "web");
        assert_eq!(lister::get(&secret).unwrap().unwrap()["kind"], "Secret");
        let other_version = ObjectRef::namespaced(gvk!("", "v2", "ConfigMap"), "a", "web");
        assert_eq!(lister::get(&other_version).unwrap(), None);
        let namespace = ObjectRef::cluster_scoped(gvk!("", "v1", "Namespace"), "a");
        assert!(lister::get(&namespace).unwrap().is_some());
        assert_eq!(host.calls().len(), 5);
        assert_eq!(host.calls()[0], Call::Get(at("a", "web")));
    }

    #[test]
    fn list_filters_by_kind_and_namespace_sorted_by_namespace_then_name() {
        let _host = cluster();
        let kind = gvk!("", "v1", "ConfigMap");
        assert_eq!(
            names(&lister::list(&kind, None, None).unwrap()),
            ["a/db", "a/web", "b/web"]
        );
        assert_eq!(
            names(&lister::list(&kind, Some("a"), None).unwrap()),
            ["a/db", "a/web"]
        );
        assert!(lister::list(&kind, Some("c"), None).unwrap().is_empty());
        let namespaces = lister::list(&gvk!("", "v1", "Namespace"), None, None).unwrap();
        assert_eq!(names(&namespaces), ["/a"]);
    }

    #[test]
    fn list_selects_by_labels_as_the_host_does() {
        let _host = cluster();
        let kind = gvk!("", "v1", "ConfigMap");
        let select = |selector: &str| names(&lister::list(&kind, None, Some(selector)).unwrap());
        assert_eq!(select("app=web"), ["a/web", "b/web"]);
        assert_eq!(select("app==web,tier=front"), ["b/web"]);
        assert_eq!(select("app!=web"), ["a/db"]);
        assert_eq!(select("tier"), ["b/web"]);
        assert_eq!(select("!tier"), ["a/db", "a/web"]);
        assert_eq!(select("app in (db, web)"), ["a/db", "a/web", "b/web"]);
        assert_eq!(select("tier notin (front)"), ["a/db", "a/web"]);
        assert_eq!(select(""), ["a/db", "a/web", "b/web"]);
    }

    #[test]
    fn a_bad_selector_is_invalid_with_the_hosts_text() {
        let _host = cluster();
        let err = lister::list(&gvk!("", "v1", "ConfigMap"), None, Some("app=web,")).unwrap_err();
        assert_eq!(
            err.describe(),
            "invalid: label-selector: invalid label selector \"app=web,\" at byte 8: expected a label key, found the end of the selector"
        );
    }

    #[test]
    fn writes_are_recorded_and_change_what_later_reads_see() {
        let host = cluster();
        let returned =
            cluster::patch_status(&at("a", "web"), &json!({"phase": "Ready", "n": 1})).unwrap();
        assert_eq!(returned["status"], json!({"phase": "Ready", "n": 1}));
        cluster::patch_status(&at("a", "web"), &json!({"n": null})).unwrap();
        let read = lister::get(&at("a", "web")).unwrap().unwrap();
        assert_eq!(read["status"], json!({"phase": "Ready"}));
        assert_eq!(
            read["data"]["name"], "web",
            "a status patch leaves the rest"
        );

        let applied = cluster::apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "a", "name": "web", "annotations": {"k": "v"}}}))
        .unwrap();
        assert_eq!(applied["metadata"]["annotations"]["k"], "v");
        assert_eq!(
            applied["data"]["name"], "web",
            "an apply merges into the object"
        );
        let created = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "c", "name": "new"}});
        cluster::apply_with(&created, ApplyOptions { force: false }).unwrap();
        assert_eq!(host.object(&at("c", "new")), Some(created.clone()));

        assert!(cluster::delete(&at("a", "db")).unwrap());
        assert!(!cluster::delete(&at("a", "db")).unwrap());
        event::normal(&at("a", "web"), "Synced", "done");
        queue::enqueue(
            &ObjectKey::new(Some("a"), "web"),
            Some(Duration::from_secs(2)),
        )
        .unwrap();

        assert_eq!(
            names(&host.objects()),
            ["a/web", "b/web", "c/new", "/a", "a/web"],
            "sorted by kind (ConfigMap, Namespace, Secret), then namespace and name"
        );
        let writes: Vec<&str> = host.writes().iter().map(Call::name).collect();
        assert_eq!(
            writes,
            [
                "patch-status",
                "patch-status",
                "apply",
                "apply-with",
                "delete",
                "delete",
                "record-event",
                "enqueue"
            ]
        );
        let writes = host.writes();
        assert_eq!(
            writes[0],
            Call::PatchStatus {
                target: at("a", "web"),
                patch: json!({"status": {"phase": "Ready", "n": 1}})
            }
        );
        assert_eq!(
            writes[3],
            Call::ApplyWith {
                object: created,
                force: false
            }
        );
        assert_eq!(
            writes[6],
            Call::RecordEvent(Event {
                regarding: at("a", "web"),
                event_type: EventType::Normal,
                reason: "Synced".into(),
                message: "done".into(),
            })
        );
        assert_eq!(
            writes[7],
            Call::Enqueue {
                key: ObjectKey::new(Some("a"), "web"),
                after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(host.calls().len(), 9, "and the one read");
    }

    #[test]
    fn writes_the_server_would_refuse_are_refused() {
        let host = cluster();
        let gone = cluster::patch_status(&at("a", "gone"), &json!({})).unwrap_err();
        assert_eq!(gone.kind(), "not-found");
        let nameless = cluster::apply(&json!({"apiVersion": "v1", "kind": "ConfigMap"}));
        assert_eq!(nameless.unwrap_err().kind(), "invalid");
        let raw = cluster::patch_status_raw(&at("a", "web"), "{not json").unwrap_err();
        assert_eq!(raw.kind(), "invalid");
        assert_eq!(
            host.writes()[2],
            Call::PatchStatus {
                target: at("a", "web"),
                patch: Value::String("{not json".into())
            }
        );
    }

    #[test]
    fn a_failing_call_is_recorded_and_changes_nothing() {
        let host = cluster();
        host.fail(
            &["apply-with"],
            HostError::Conflict("owned by kubectl".into()),
        );
        let applied = cluster::apply_with(
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"namespace": "a", "name": "web"}, "data": {"x": "y"}}),
            ApplyOptions { force: false },
        );
        assert_eq!(applied, Err(HostError::Conflict("owned by kubectl".into())));
        assert_eq!(
            host.object(&at("a", "web")).unwrap()["data"]["x"],
            Value::Null
        );
        assert!(lister::get(&at("a", "web")).is_ok(), "other calls answer");

        host.fail(&[], HostError::Unavailable("down".into()));
        assert!(lister::get(&at("a", "web")).is_err());
        event::warning(&at("a", "web"), "Failed", "x");
        assert_eq!(
            host.logs(),
            [(
                Level::Warn,
                "could not record event Failed on ConfigMap a/web: unavailable: down".into()
            )],
            "a best-effort event logs the refusal; log calls never fail"
        );
        assert_eq!(host.calls().len(), 5);
    }

    #[test]
    fn a_request_carries_the_object_as_the_writes_left_it() {
        let host = cluster();
        cluster::patch_status(&at("a", "web"), &json!({"seen": true})).unwrap();
        let request = host.request(&at("a", "web"));
        assert_eq!(request.ref_, at("a", "web"));
        assert_eq!(
            request.object_value().unwrap().unwrap()["status"]["seen"],
            true
        );
        assert!(!request.deleting);
        assert_eq!(host.request(&at("a", "gone")).object, None);
        cluster::apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "a", "name": "web", "deletionTimestamp": "2026-01-02T03:04:05Z"}}))
        .unwrap();
        assert!(host.request(&at("a", "web")).deleting);
    }

    #[test]
    #[should_panic(expected = "no call is named \"patch\"")]
    fn failing_a_call_that_does_not_exist_is_the_tests_mistake() {
        FakeHost::new().fail(&["patch"], HostError::Other(String::new()));
    }

    #[test]
    fn without_a_fake_a_host_call_says_how_to_install_one() {
        let panic = std::panic::catch_unwind(|| lister::get(&at("a", "web"))).unwrap_err();
        let message = panic.downcast_ref::<&str>().unwrap();
        assert!(message.contains("FakeHost::new()"), "{message}");
    }

    #[test]
    fn the_guard_uninstalls_the_fake_and_each_thread_has_its_own() {
        let host = cluster();
        std::thread::spawn(|| {
            let _other = FakeHost::new().install();
            assert_eq!(lister::get(&at("a", "web")).unwrap(), None);
        })
        .join()
        .unwrap();
        assert!(lister::get(&at("a", "web")).unwrap().is_some());
        drop(host);
        assert!(std::panic::catch_unwind(|| lister::get(&at("a", "web"))).is_err());
        let _again = FakeHost::new().install();
        assert_eq!(lister::get(&at("a", "web")).unwrap(), None);
    }

    #[test]
    #[should_panic(expected = "another fake host is installed on this thread")]
    fn two_fakes_on_one_thread_are_the_tests_mistake() {
        let _first = FakeHost::new().install();
        let _second = FakeHost::new().install();
    }

    #[test]
    #[should_panic(expected = "needs apiVersion, kind and metadata.name")]
    fn an_object_without_a_name_is_the_tests_mistake() {
        let _ = FakeHost::new().with_object(json!({"apiVersion": "v1", "kind": "ConfigMap"}));
    }
}
