//! The offline runner, `reconciler-host reconcile`: one reconcile of one key without a cluster,
//! the way Kubewarden's `kwctl run` tests a policy. Objects are loaded into an in-memory cache;
//! cluster writes are recorded (and applied to that cache, as the API server would), never
//! sent; the network backend lives in memory. With a host configuration the guest is admitted
//! and granted exactly as `run` does it ([`crate::supply::guest_set::ActiveGuest::admit`]), so a fixture
//! that passes here passes there. Outbound HTTP is answered from a file of exchanges, never
//! sent. Every host call is recorded and returned with the result, the host's own finalizer
//! writes among them. `reconciler-host test` runs a folder of such cases against their pinned
//! outputs ([`fixtures`]).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use kube::api::DynamicObject;
use serde_json::json;

use crate::cluster::informers::CachedObject;
use crate::cluster::objects::{Gvk, ObjectKey, ObjectRef};
use crate::config::{Grant, HostConfig};
use crate::controller::failure_event;
use crate::controller::sync::{Primary, Step, sync};
use crate::oci::{Auth, ModuleRef, Puller};
use crate::sandbox::backends::{MemoryBackend, NetworkBackend};
use crate::sandbox::capabilities::{Call, CallContext, GuestContext, HostError, Scope};
use crate::sandbox::providers::offline::{FixtureOutbound, MemoryCache, RecordingCluster};
use crate::sandbox::runtime::{LoadedGuest, Request, Runtime, RuntimeOptions};
use crate::supply::guest_set::{ActiveGuest, GrantError, Origin};

mod fixtures;
mod watches;

pub(crate) use fixtures::{FixtureRun, Guests};

/// A guest as the command line names it: a file, or `oci://…` (pulled into the host's cache).
#[derive(Debug, Clone)]
pub(crate) enum GuestRef {
    File(PathBuf),
    Module(ModuleRef),
}

impl std::str::FromStr for GuestRef {
    type Err = crate::oci::ModuleRefError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.starts_with("oci://") {
            text.parse().map(Self::Module)
        } else {
            Ok(Self::File(PathBuf::from(text)))
        }
    }
}

/// One offline reconcile as `reconcile` asks for it: the guest, how to pull it, and what it is
/// given.
pub(crate) struct OfflineRun {
    /// The guest component: a file, or a module in a registry.
    pub guest: GuestRef,
    /// Registry credentials for a module, `--plain-http` and `--verify-key`.
    pub auth: Auth,
    pub pull: PullOptions,
    pub inputs: Inputs,
}

/// How a module is pulled from the command line.
#[derive(Default)]
pub(crate) struct PullOptions {
    /// `--plain-http`: every registry over plain HTTP.
    pub plain_http: bool,
    /// `--verify-key`: the module runs only if one of these keys signed its digest.
    pub trusted: Option<crate::oci::TrustPolicy>,
}

impl OfflineRun {
    /// Runs the reconcile step `run` runs (the finalizer writes included, on the loaded
    /// objects) and maps the events; returns `{"result": ..., "calls": [...]}` and
    /// `{"indexes": ..., "watches": [...]}`.
    pub(crate) async fn reconcile(self) -> anyhow::Result<serde_json::Value> {
        let runtime = local_runtime()?;
        let config = self.inputs.config.as_ref();
        let (loaded, origin) =
            load(runtime.clone(), self.guest, config, &self.auth, &self.pull).await?;
        self.inputs.reconcile(runtime, loaded, &origin).await
    }
}

/// What one offline reconcile is given besides the guest: the objects, the HTTP exchanges, the
/// events and the key. `reconcile`'s flags, or a test case's files.
#[derive(clap::Args)]
pub(crate) struct Given {
    /// Files or directories of objects (multi-document YAML or JSON).
    #[arg(long, num_args = 1.., required_unless_present = "replay")]
    pub objects: Vec<PathBuf>,
    /// A YAML or JSON list of HTTP exchanges (`{method, url, status, headers?, body?}` or
    /// `{method, url, error}`) answering the guest's outbound requests; nothing is sent.
    /// Credentials the grant names are read from the loaded Secret and ConfigMap objects.
    #[arg(long)]
    pub http: Option<PathBuf>,
    /// Events of watched kinds (objects, or `{type, object}` watch events as `kubectl get
    /// --watch --output-watch-events -o json` prints them; YAML or JSON): each is mapped
    /// through the guest's watches, and the output's `watches` says which keys it wakes
    /// and through which watch (`indexes`: each computed index's values per primary).
    #[arg(long, conflicts_with = "replay")]
    pub events: Option<PathBuf>,
    /// Kind of the key: group/version/Kind (version/Kind for the core group). Default: the
    /// guest's primary kind.
    #[arg(long)]
    pub kind: Option<Gvk>,
    /// The key: [namespace/]name. Optional with --events (then only the events are mapped).
    #[arg(long, required_unless_present_any = ["replay", "events"])]
    pub key: Option<ObjectKey>,
    /// JSON file holding the in-memory network backend's state; read before, written after.
    #[arg(long)]
    pub backend_state: Option<PathBuf>,
    /// The retry count the guest sees.
    #[arg(long, default_value_t = 0)]
    pub attempt: u32,
    /// Fix the guest's wall clock at this RFC 3339 time, for reproducible output.
    #[arg(long, value_parser = humantime::parse_rfc3339)]
    pub now: Option<std::time::SystemTime>,
}

/// Everything one offline reconcile is given but the guest: the world it runs in and the key.
pub(crate) struct Inputs {
    pub given: Given,
    /// How answers name the `http` file (a case's own `http.yaml`); default: as given.
    pub http_name: Option<PathBuf>,
    /// With a configuration, the guest's grant applies as in `run`; without, every call is
    /// allowed.
    pub config: Option<HostConfig>,
}

impl Inputs {
    /// Runs the reconcile step `run` runs on these inputs with `loaded` (from `origin`, whose
    /// grant applies), the host's finalizer writes shown among the calls, when there is a key;
    /// maps the events through the guest's watches when there are events.
    ///
    /// # Panics
    ///
    /// When the task running the guest panics: a host bug (a guest's trap is an outcome).
    pub(crate) async fn reconcile(
        self,
        runtime: Arc<Runtime>,
        loaded: LoadedGuest,
        origin: &Origin,
    ) -> anyhow::Result<serde_json::Value> {
        let cache = Arc::new(MemoryCache::load(&self.given.objects)?);
        let (loaded, grant) = admit(origin, loaded, self.config.as_ref())?;
        let mut output = serde_json::Map::new();
        if let Some(key) = &self.given.key {
            let ran = self
                .reconcile_key(runtime.clone(), &loaded, grant.clone(), cache.clone(), key)
                .await?;
            output.extend(ran);
        }
        if let Some(events) = &self.given.events {
            // Before the reconcile's writes reach the cache, so the events meet the loaded
            // objects.
            let watches = watches::Watches {
                runtime,
                loaded: &loaded,
                grant: &grant,
                cache: Arc::new(MemoryCache::load(&self.given.objects)?),
            };
            if let serde_json::Value::Object(mapped) = watches.map(events).await? {
                output.extend(mapped);
            }
        }
        Ok(serde_json::Value::Object(output))
    }

    /// The network backend: in memory whatever the configuration's provider (its state read
    /// from and written to `--backend-state`), its `allowedCidrs` applying as in `run`.
    fn network(&self) -> anyhow::Result<Arc<MemoryBackend>> {
        let allowed = self
            .config
            .as_ref()
            .and_then(|c| {
                c.backends
                    .get(crate::sandbox::capabilities::NETWORK_BACKEND)
            })
            .and_then(|b| b.allowed_cidrs().map(<[ipnet::IpNet]>::to_vec));
        let policy = crate::sandbox::backends::Policy::new(allowed)?;
        let backend = match &self.given.backend_state {
            Some(path) => MemoryBackend::with_state_file(path.clone())?,
            None => MemoryBackend::new(),
        };
        Ok(Arc::new(backend.with_policy(policy)))
    }

    /// One reconcile of `key`: `{"result": ..., "calls": [...]}`.
    async fn reconcile_key(
        &self,
        runtime: Arc<Runtime>,
        loaded: &LoadedGuest,
        grant: Grant,
        cache: Arc<MemoryCache>,
        key: &ObjectKey,
    ) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
        let mut outbound = FixtureOutbound::load(self.given.http.as_deref(), cache.clone())?;
        if let Some(name) = &self.http_name {
            outbound = outbound.shown_as(name);
        }
        let manifest = &loaded.manifest;
        let kind = self
            .given
            .kind
            .clone()
            .unwrap_or_else(|| manifest.primary.clone());
        let network = self.network()?;
        let cluster = Arc::new(RecordingCluster::new(cache.clone()).with_namespaces());
        // The grant's check comes first: a guest without `http:` rules never reaches it.
        let providers = crate::sandbox::providers::offline::providers_writing_to(
            cache.clone(),
            cluster.clone(),
            Some(network as Arc<dyn NetworkBackend>),
        )
        .with_http(Arc::new(outbound));
        let context = Arc::new(
            GuestContext::new(manifest.name.clone(), grant, providers)
                .with_scope(Scope::of(manifest, None))
                .with_clock(self.given.now),
        );

        // The reconcile step `run` takes, finalizer writes included, on the loaded objects.
        let step = Step {
            kind: &kind,
            finalizer: manifest.finalizer.as_deref(),
            shadow: context.grant.mode == crate::config::Mode::Shadow,
        };
        let primary = ShownWrites::new(&cluster);
        let handle = tokio::runtime::Handle::current();
        let object_ref = ObjectRef {
            kind: kind.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        };
        let existed = cache.get(&object_ref).is_some();
        let synced = sync(step, &primary, key, self.given.attempt, async |request| {
            let call = CallContext::new(context.clone(), key.to_string(), Some(handle)).recording();
            let (loaded, runtime) = (loaded.clone(), runtime.clone());
            tokio::task::spawn_blocking(move || runtime.reconcile(&loaded, call, request))
                .await
                .expect("the reconcile task panicked")
        })
        .await;
        let run = synced
            .run
            .context("the reconcile step ended before the guest ran")?;
        let mut calls = primary.around(run.calls.unwrap_or_default());
        // The Warning event `run` leaves on the primary after a failed reconcile (none in
        // shadow mode), as the last of the host's writes.
        if !step.shadow
            && let Some(event) = failure_event(&run.outcome, &object_ref, existed)
        {
            calls.push(Call {
                interface: "host",
                function: "record-event",
                args: serde_json::to_value(&event)?,
                returned: json!({ "ok": null }),
            });
        }
        let mut output = serde_json::Map::new();
        output.insert("result".into(), serde_json::to_value(&run.outcome)?);
        output.insert("calls".into(), serde_json::to_value(&calls)?);
        Ok(output)
    }
}

/// The guest admitted under its grant as `run` admits it (the grant of the file's source, the
/// guest running under its key); without a configuration, every call is allowed.
fn admit(
    origin: &Origin,
    loaded: LoadedGuest,
    config: Option<&HostConfig>,
) -> anyhow::Result<(LoadedGuest, Grant)> {
    let Some(config) = config else {
        return Ok((loaded, Grant::unrestricted()));
    };
    let admitted = ActiveGuest::admit(origin, loaded, config).map_err(|e| match e {
        GrantError::NotItsGrant(impostor) => anyhow::Error::from(impostor),
        GrantError::NoGrant { guest, .. } => {
            anyhow::anyhow!("guest `{guest}` has no grant in the host configuration")
        }
        GrantError::BeyondGrant { guest, missing, .. } => {
            anyhow::anyhow!("guest `{guest}` would be refused: {missing}")
        }
        other => anyhow::Error::from(other),
    })?;
    Ok((admitted.loaded, admitted.grant))
}

/// The offline primary (the loaded objects) with the host's own finalizer writes recorded as
/// calls of interface `host`, so the output shows the writes `run` makes around the guest's:
/// `add-finalizer` before its calls, `remove-finalizer` after them. A write the host does not
/// make (the object already carries the finalizer, or no longer does) is not shown.
struct ShownWrites<'a> {
    cluster: &'a RecordingCluster,
    added: parking_lot::Mutex<Vec<Call>>,
    removed: parking_lot::Mutex<Vec<Call>>,
}

impl<'a> ShownWrites<'a> {
    fn new(cluster: &'a RecordingCluster) -> Self {
        Self {
            cluster,
            added: parking_lot::Mutex::default(),
            removed: parking_lot::Mutex::default(),
        }
    }

    /// The guest's `calls` with the host's writes around them, in the order they were made.
    fn around(&self, calls: Vec<Call>) -> Vec<Call> {
        let mut all = std::mem::take(&mut *self.added.lock());
        all.extend(calls);
        all.append(&mut self.removed.lock());
        all
    }
}

/// One of the host's finalizer writes, as the guest's calls are shown.
fn host_call<T>(
    function: &'static str,
    object: &ObjectRef,
    finalizer: &str,
    result: &Result<T, HostError>,
) -> Call {
    let returned = match result {
        Ok(_) => json!({ "ok": null }),
        Err(e) => {
            // The WIT error's case, as `capabilities` records a guest's call.
            let (kind, message) = match e {
                HostError::Denied(m) | HostError::Forbidden(m) => ("denied", m),
                HostError::NotFound(m) => ("not-found", m),
                HostError::Conflict(m) | HostError::FieldConflict(m) => ("conflict", m),
                HostError::Invalid(m) => ("invalid", m),
                HostError::Unavailable(m) | HostError::Limited(m) => ("unavailable", m),
                HostError::Other(m) => ("other", m),
            };
            json!({ "error": { kind: message } })
        }
    };
    Call {
        interface: "host",
        function,
        args: json!({ "ref": object, "finalizer": finalizer }),
        returned,
    }
}

/// The offline runner's primary: the loaded objects, the finalizer writes applied to them as
/// JSON patches, as the API server would apply them.
#[async_trait::async_trait]
impl Primary for RecordingCluster {
    fn cached(&self, object: &ObjectRef) -> Option<Arc<CachedObject>> {
        let object: DynamicObject = serde_json::from_value(self.object(object)?).ok()?;
        CachedObject::new(&object).ok().map(Arc::new)
    }

    fn foreign(&self, _: &ObjectKey) -> bool {
        false
    }

    async fn add_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<Option<serde_json::Value>, HostError> {
        match crate::cluster::finalizer::add_ops(current, finalizer) {
            Some(ops) => self.json_patch(object, ops).map(Some),
            None => Ok(None),
        }
    }

    async fn remove_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<bool, HostError> {
        match crate::cluster::finalizer::remove_ops(current, finalizer) {
            Some(ops) => self.json_patch(object, ops).map(|_| true),
            None => Ok(false),
        }
    }
}

#[async_trait::async_trait]
impl Primary for ShownWrites<'_> {
    fn cached(&self, object: &ObjectRef) -> Option<Arc<CachedObject>> {
        self.cluster.cached(object)
    }

    fn foreign(&self, key: &ObjectKey) -> bool {
        self.cluster.foreign(key)
    }

    async fn add_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<Option<serde_json::Value>, HostError> {
        let result = self.cluster.add_finalizer(object, current, finalizer).await;
        if !matches!(result, Ok(None)) {
            let call = host_call("add-finalizer", object, finalizer, &result);
            self.added.lock().push(call);
        }
        result
    }

    async fn remove_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<bool, HostError> {
        let result = self
            .cluster
            .remove_finalizer(object, current, finalizer)
            .await;
        if !matches!(result, Ok(false)) {
            let call = host_call("remove-finalizer", object, finalizer, &result);
            self.removed.lock().push(call);
        }
        result
    }
}

/// A runtime for a command that loads guests on this machine (`reconcile`, `check`, `push`,
/// `rbac --guests`): compiled guests are cached where `run` caches them.
pub(crate) fn local_runtime() -> anyhow::Result<Arc<Runtime>> {
    Ok(Arc::new(Runtime::new(&RuntimeOptions {
        cache_dir: crate::manager::default_cache_dir(),
        ..RuntimeOptions::default()
    })?))
}

/// Loads a guest from `bytes` (compiled through the cache) off the async workers; `name` is
/// the file or reference its messages name.
pub(crate) async fn load_bytes(
    runtime: Arc<Runtime>,
    bytes: Vec<u8>,
    name: PathBuf,
) -> anyhow::Result<LoadedGuest> {
    Ok(tokio::task::spawn_blocking(move || runtime.load(&bytes, &name)).await??)
}

/// Reads and loads a guest (compiled through the cache) off the async workers.
pub(crate) async fn load_guest(
    runtime: Arc<Runtime>,
    file: PathBuf,
) -> anyhow::Result<LoadedGuest> {
    let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
    load_bytes(runtime, bytes, file).await
}

/// Loads the guest from its file, or pulls it into the host's cache first; returns it with the
/// origin its grant is keyed by.
async fn load(
    runtime: Arc<Runtime>,
    guest: GuestRef,
    config: Option<&HostConfig>,
    auth: &Auth,
    pull: &PullOptions,
) -> anyhow::Result<(LoadedGuest, Origin)> {
    Ok(match guest {
        GuestRef::File(file) => {
            let origin = Origin::file(&file);
            (load_guest(runtime, file).await?, origin)
        }
        GuestRef::Module(module) => {
            let settings = config
                .as_ref()
                .map(|c| c.registries.clone())
                .unwrap_or_default();
            let cache_dir = crate::manager::default_cache_dir()
                .context("no cache directory for pulled modules (set HOME or XDG_CACHE_HOME)")?;
            let who = crate::oci::Requester {
                auth,
                secret: None,
                trust: pull.trusted.as_ref(),
            };
            let pulled = Puller::new(&settings, &cache_dir, pull.plain_http)
                .pull(&module, who)
                .await?;
            tracing::info!(%module, digest = %pulled.digest, from_cache = pulled.from_cache,
                signed_by = pulled.signed_by.as_deref().unwrap_or("-"), "module pulled");
            let name = PathBuf::from(module.pinned(&pulled.digest)?.to_string());
            (
                load_bytes(runtime, pulled.bytes, name).await?,
                Origin::module(&module),
            )
        }
    })
}

/// `reconcile --replay`: a recorded reconcile run again offline, every host call answered
/// from the record (see `crate::sandbox::records` and [`crate::sandbox::capabilities::replay`]).
pub(crate) struct OfflineReplay {
    pub record: PathBuf,
    /// Another build to replay the record with; default: the recorded guest's own file,
    /// checked against the recorded digest.
    pub guest: Option<GuestRef>,
    pub auth: Auth,
    pub pull: PullOptions,
    /// With a configuration, the guest is admitted under its grant as in `run`.
    pub config: Option<HostConfig>,
}

impl OfflineReplay {
    /// Runs the replay; returns `{"result", "calls", "replay": {identical, sameResult,
    /// firstDivergence, ...}}`.
    pub(crate) async fn replay(self) -> anyhow::Result<serde_json::Value> {
        use crate::sandbox::capabilities::replay::Replayer;
        use crate::sandbox::records::Record;

        let mut record = Record::read(&self.record)?;
        let recorded_calls = record.calls.len();
        let runtime = local_runtime()?;
        let same_build = self.guest.is_none();
        let guest = match self.guest {
            Some(guest) => guest,
            None => record.guest.source.parse()?,
        };
        let (loaded, origin) = load(
            runtime.clone(),
            guest,
            self.config.as_ref(),
            &self.auth,
            &self.pull,
        )
        .await?;
        let digest = format!("sha256:{}", loaded.hash);
        if same_build && digest != record.guest.digest {
            anyhow::bail!(
                "{} is not the recorded build ({} recorded, {digest} there now); name the build to replay with --guest",
                record.guest.source,
                record.guest.digest
            );
        }
        let (loaded, grant) = match &self.config {
            None => (loaded, Grant::unrestricted()),
            Some(config) => {
                let admitted = ActiveGuest::admit(&origin, loaded, config)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                (admitted.loaded, admitted.grant)
            }
        };
        let kind: Gvk = record.kind.parse()?;
        let key: ObjectKey = record.key.parse()?;
        let object_ref = ObjectRef {
            kind,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        };
        // Every call is answered from the record; the providers are never reached.
        let providers = crate::sandbox::providers::offline::providers(
            Arc::new(MemoryCache::default()),
            Some(Arc::new(MemoryBackend::new()) as Arc<dyn NetworkBackend>),
        );
        let context = Arc::new(
            GuestContext::new(loaded.manifest.name.clone(), grant, providers)
                .with_scope(Scope::of(&loaded.manifest, None)),
        );
        let request = Request {
            object: (!record.request.object.is_null()).then(|| record.request.object.to_string()),
            deleting: record.request.deleting,
            object_ref,
            attempt: record.request.attempt,
        };
        let call = CallContext::new(
            context,
            key.to_string(),
            Some(tokio::runtime::Handle::current()),
        )
        .recording()
        .pinned(record.pinned())
        .replaying(Replayer::new(std::mem::take(&mut record.calls)));
        let name = loaded.manifest.name.clone();
        let run =
            tokio::task::spawn_blocking(move || runtime.reconcile(&loaded, call, request)).await?;
        let result = serde_json::to_value(&run.outcome)?;
        let divergence = run.replay.and_then(|replay| replay.finish());
        let same_result = result == record.result && run.conflicted == record.conflicted;
        Ok(json!({
            "result": result,
            "calls": run.calls.unwrap_or_default(),
            "replay": {
                "record": self.record,
                "recorded": {"guest": record.guest, "result": record.result, "calls": recorded_calls},
                "replayed": {"guest": name, "digest": digest},
                "identical": same_result && divergence.is_none(),
                "sameResult": same_result,
                "firstDivergence": divergence,
                "redacted": record.redacted,
            },
        }))
    }
}
