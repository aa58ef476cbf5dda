//! Where guests come from, and which grant each gets: the one of the source item it was
//! loaded from, never the one of the name it declares. A manifest is the guest's own word, so
//! a grant looked up by it would let any file take any guest's grant (and push the rightful
//! file out as a duplicate); the file's name is the operator's word, given where the grants
//! are.
//!
//! The rule, here alone ([`Origin::resolve`]), applied in one place
//! ([`super::ActiveGuest::admit`]) for `run` (the guest set) and for `check`, `reconcile` and
//! `rbac` ([`crate::cli`]):
//!
//! | grant key   | belongs to   | runs the guest as                                          |
//! |-------------|--------------|------------------------------------------------------------|
//! | `name`      | `name.wasm`  | `name`                                                     |
//! | `name@stem` | `stem.wasm`  | `name@stem`: a second version beside `name` (shadow trials) |
//!
//! A file whose stem is not the name it declares needs a `name@stem` grant; without one it is
//! refused ([`NotItsGrant`]), whatever other grants exist and whichever file loads first. A
//! running name thus encodes its file's stem, so no two files of one directory run under one
//! name.
//!
//! A place guests come from implements [`GuestSource`]: it lists its items, each an [`Origin`]
//! (a name for messages, a stem that keys its grant), reads one as an [`Artefact`] (bytes and
//! content hash), and says when it may have changed ([`Changes`]). Today the only source is a
//! directory of files ([`super::Directory`]); a registry of OCI artefacts and `Reconciler`
//! objects are the next, each item keyed by a name of the operator's (a repository, an object
//! name) the way a file is by its stem.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::config::{Grant, HostConfig};

/// How the origin of a `ClusterReconciler` object is named: `reconciler/NAME`; a namespaced
/// `Reconciler`'s is `reconciler/NAMESPACE.NAME` (names and namespaces are DNS labels: the dot
/// cannot occur in either, so neither kind's items can collide).
pub const RECONCILER_PREFIX: &str = "reconciler/";

/// A place guests come from. Calls may block (file system, network): the guest set calls
/// `list` and `read` from a blocking context.
pub trait GuestSource: Send + Sync {
    /// The items the source holds now, in a stable order.
    fn list(&self) -> Result<Vec<Origin>, SourceError>;
    /// One item's content now.
    fn read(&self, origin: &Origin) -> Result<Artefact, SourceError>;
    /// Starts following the source's changes.
    fn watch(&self) -> Result<Box<dyn Changes>, SourceError>;
    /// Whether `origin` is one of this source's items (see [`Sources`]).
    fn holds(&self, origin: &Origin) -> bool;
    /// Why `list` may not show everything the source holds yet (the `Reconciler` objects'
    /// first list has not arrived); none once it does.
    fn unsettled(&self) -> Option<String> {
        None
    }
    /// The content hash of `origin` if the source knows it without reading the content (a
    /// module pulled by digest): the guest set then reads only what it has not judged.
    fn known_hash(&self, _origin: &Origin) -> Option<String> {
        None
    }
    /// What the guest set decided about one of this source's items; a source that reports
    /// verdicts where its items live (a `Reconciler`'s status) keeps it.
    fn judged(&self, _origin: &Origin, _verdict: &Verdict) {}
    /// A reloaded configuration, applied by the guest set: a source whose items depend on it
    /// (which `Reconciler`s tenant rules admit) takes it and wakes its next rescan.
    fn reconfigured(&self, _config: &HostConfig) {}
    /// The rollout `origin`'s content `hash` was in when this host last ran it, if the source
    /// keeps one (a `Reconciler`'s status) and holds the version it rolled out from: what a
    /// host that starts afresh takes up instead of switching at once. Asked once, at the item's
    /// first load in this process.
    fn resumes(&self, _origin: &Origin, _hash: &str) -> Option<Resume> {
        None
    }
}

/// A rollout a source kept across a restart: the version it rolls out from, read, and where it
/// stood (its versions named by content hash); none where it has not begun yet (the item
/// changed while no host ran: it begins from `from`).
pub struct Resume {
    pub from: Artefact,
    pub(crate) status: Option<crate::supply::rollout::RolloutStatus>,
}

/// The guest set's decision on one item, as its source hears it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// This content runs as `guest`.
    Loaded { guest: String, hash: String },
    /// Refused for `cause` (a reason word: `NotAComponent`, `GrantBeyondAllowed`...), with
    /// `message`; `kept` (guest name, content hash) is the last good version still running.
    Refused {
        cause: &'static str,
        message: String,
        kept: Option<(String, String)>,
    },
    /// The item's guest no longer runs.
    Unloaded,
}

/// Several sources feeding one guest set: their items side by side (an item's name is unique
/// across them: paths, `reconciler/NAME`), each read, watched and told of by its own source.
pub struct Sources(Vec<Box<dyn GuestSource>>);

impl Sources {
    pub(crate) fn new(sources: Vec<Box<dyn GuestSource>>) -> Self {
        Self(sources)
    }

    fn of(&self, origin: &Origin) -> Result<&dyn GuestSource, SourceError> {
        self.0
            .iter()
            .find(|s| s.holds(origin))
            .map(AsRef::as_ref)
            .ok_or_else(|| SourceError::Stopped {
                what: format!("the source of {}", origin.name()),
            })
    }
}

impl GuestSource for Sources {
    fn list(&self) -> Result<Vec<Origin>, SourceError> {
        // One unreadable source fails the whole list: its items must not read as removed.
        let mut all = Vec::new();
        for source in &self.0 {
            all.extend(source.list()?);
        }
        Ok(all)
    }

    fn read(&self, origin: &Origin) -> Result<Artefact, SourceError> {
        self.of(origin)?.read(origin)
    }

    fn watch(&self) -> Result<Box<dyn Changes>, SourceError> {
        let watches = self.0.iter().map(|s| s.watch()).collect::<Result<_, _>>()?;
        Ok(Box::new(AnyChange(watches)))
    }

    fn holds(&self, origin: &Origin) -> bool {
        self.0.iter().any(|s| s.holds(origin))
    }

    fn unsettled(&self) -> Option<String> {
        self.0.iter().find_map(|s| s.unsettled())
    }

    fn known_hash(&self, origin: &Origin) -> Option<String> {
        self.of(origin).ok()?.known_hash(origin)
    }

    fn judged(&self, origin: &Origin, verdict: &Verdict) {
        if let Ok(source) = self.of(origin) {
            source.judged(origin, verdict);
        }
    }

    fn reconfigured(&self, config: &HostConfig) {
        for source in &self.0 {
            source.reconfigured(config);
        }
    }

    fn resumes(&self, origin: &Origin, hash: &str) -> Option<Resume> {
        self.of(origin).ok()?.resumes(origin, hash)
    }
}

/// The changes of several sources: the first of them.
struct AnyChange(Vec<Box<dyn Changes>>);

#[async_trait::async_trait]
impl Changes for AnyChange {
    async fn next(&mut self) -> Result<(), SourceError> {
        let nexts = self.0.iter_mut().map(|c| c.next());
        futures::future::select_all(nexts).await.0
    }

    fn retry_in(&mut self, after: Duration) {
        for changes in &mut self.0 {
            changes.retry_in(after);
        }
    }
}

/// How a source says it may have changed: the guest set lists it again after each `next`.
#[async_trait::async_trait]
pub trait Changes: Send {
    /// Returns when the source may have changed (or is due for a look anyway); an error when
    /// it can no longer tell.
    async fn next(&mut self) -> Result<(), SourceError>;
    /// The next `next` returns after `after` at most: a load failed for a reason that may
    /// pass (no free instance slot).
    fn retry_in(&mut self, after: Duration);
}

/// One item of a source, read: where it came from, its bytes and their content hash
/// (`runtime::content_hash`), by which a content already judged is not judged again.
pub struct Artefact {
    pub origin: Origin,
    pub bytes: Vec<u8>,
    pub hash: String,
    /// The trusted key whose signature admitted a pulled module (`reconcilers.verify`).
    pub signed_by: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source, or one item of it, cannot be read now.
    #[error("cannot read {what}: {error}")]
    Unreadable {
        what: String,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Changes of the source cannot be followed.
    #[error("cannot watch {what}: {error}")]
    Unwatchable {
        what: String,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The source stopped reporting changes.
    #[error("{what} stopped")]
    Stopped { what: String },
}

/// A key under `guests:` in the host configuration: `name`, or `name@stem` for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantKey {
    declared: String,
    stem: Option<String>,
}

impl GrantKey {
    /// Splits at the first `@`: a declared name is a DNS label and never holds one.
    pub fn parse(key: &str) -> Self {
        match key.split_once('@') {
            Some((declared, stem)) => Self {
                declared: declared.to_owned(),
                stem: Some(stem.to_owned()),
            },
            None => Self {
                declared: key.to_owned(),
                stem: None,
            },
        }
    }

    /// The name the guest declares in its manifest.
    pub(crate) fn declared(&self) -> &str {
        &self.declared
    }

    /// The stem of the file this grant belongs to.
    pub fn source_stem(&self) -> &str {
        self.stem.as_deref().unwrap_or(&self.declared)
    }
}

impl fmt::Display for GrantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.stem {
            Some(stem) => write!(f, "{}@{stem}", self.declared),
            None => f.write_str(&self.declared),
        }
    }
}

/// A guest that declares a name its source's grants do not give it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{file}: declares guest `{declared}`, but a grant goes with the file a guest is loaded from, not with the name it declares: guests.{declared} is the grant of {declared}.wasm; rename the file to {declared}.wasm, or grant it as guests.{declared}@{stem}"
)]
pub struct NotItsGrant {
    pub(crate) file: String,
    pub(crate) declared: String,
    pub(crate) stem: String,
}

/// Where a guest was loaded from: its name in messages and on `/guests` (a file's path), and
/// the stem that keys its grant (`network` of `network.wasm`).
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    name: String,
    stem: String,
    kind: OriginKind,
}

/// What kind of item an [`Origin`] is, and so where its grant comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum OriginKind {
    /// A file of the guest directory: its grant is the host configuration's.
    File,
    /// A module named on the command line (the offline runner): granted like a file.
    Module,
    /// A `ClusterReconciler` (`tenant` none) or namespaced `Reconciler` object: its grant is
    /// its own `spec.grant`, bounded by `reconcilers.allow` or by its namespace's tenant rule.
    /// `generation` is the object's, so a changed spec is a changed origin.
    Reconciler {
        grant: Box<Grant>,
        generation: i64,
        tenant: Option<Box<Tenant>>,
    },
}

/// Where a namespaced `Reconciler` lives, as its tenant rule is chosen and its guest held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub(crate) namespace: String,
    /// The namespace's labels when the object was listed (they choose the rule).
    pub(crate) labels: std::collections::BTreeMap<String, String>,
    /// `spec.serviceAccountName`, if the spec names one.
    pub(crate) service_account: Option<String>,
}

impl Tenant {
    /// A namespaced `Reconciler`'s place: its namespace, the namespace's labels, its account.
    pub fn new(
        namespace: &str,
        labels: std::collections::BTreeMap<String, String>,
        service_account: Option<String>,
    ) -> Self {
        Self {
            namespace: namespace.to_owned(),
            labels,
            service_account,
        }
    }
}

impl Origin {
    pub(crate) fn file(path: &Path) -> Self {
        // A stem that is not UTF-8 never equals a declared name (DNS labels), so it can only be
        // granted as `name@stem`; lossy keeps it printable in the message that says so.
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self {
            name: path.display().to_string(),
            stem,
            kind: OriginKind::File,
        }
    }

    /// A module pulled from a registry: named by its reference, its grant keyed by the last
    /// segment of its repository (`greeter` of `oci://r.example.com/guests/greeter:v1`), as a
    /// file's is by its stem.
    pub(crate) fn module(module: &crate::oci::ModuleRef) -> Self {
        let repository = module.reference().repository();
        Self {
            name: module.to_string(),
            stem: repository
                .rsplit('/')
                .next()
                .unwrap_or(repository)
                .to_owned(),
            kind: OriginKind::Module,
        }
    }

    /// The `Reconciler` object `name` (cluster-scoped, a DNS subdomain) at `generation`, with
    /// the grant its spec declares. Named `reconciler/NAME`; its name keys its guest's
    /// running name as a file's stem does.
    pub fn reconciler(name: &str, generation: i64, grant: Grant) -> Self {
        Self {
            name: format!("{RECONCILER_PREFIX}{name}"),
            stem: name.to_owned(),
            kind: OriginKind::Reconciler {
                grant: Box::new(grant),
                generation,
                tenant: None,
            },
        }
    }

    /// The namespaced `Reconciler` `name` in `tenant.namespace`: named
    /// `reconciler/NAMESPACE.NAME`, its guest running as `NAMESPACE.NAME` (or
    /// `DECLARED@NAMESPACE.NAME`).
    pub fn tenant_reconciler(name: &str, generation: i64, grant: Grant, tenant: Tenant) -> Self {
        let stem = format!("{}.{name}", tenant.namespace);
        Self {
            name: format!("{RECONCILER_PREFIX}{stem}"),
            stem,
            kind: OriginKind::Reconciler {
                grant: Box::new(grant),
                generation,
                tenant: Some(Box::new(tenant)),
            },
        }
    }

    /// Where a namespaced `Reconciler` lives; none for every other item.
    pub(crate) fn tenant(&self) -> Option<&Tenant> {
        match &self.kind {
            OriginKind::Reconciler { tenant, .. } => tenant.as_deref(),
            OriginKind::File | OriginKind::Module => None,
        }
    }

    pub fn kind(&self) -> &OriginKind {
        &self.kind
    }

    /// The grant the item carries itself (a `Reconciler`'s `spec.grant`), if any.
    pub(crate) fn own_grant(&self) -> Option<&Grant> {
        match &self.kind {
            OriginKind::Reconciler { grant, .. } => Some(grant),
            OriginKind::File | OriginKind::Module => None,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A `Reconciler`'s generation (its spec's version); none for a file.
    pub(crate) fn generation(&self) -> Option<i64> {
        match &self.kind {
            OriginKind::Reconciler { generation, .. } => Some(*generation),
            OriginKind::File | OriginKind::Module => None,
        }
    }

    pub fn stem(&self) -> &str {
        &self.stem
    }

    /// The key of this source's grant for a guest declaring `declared`: the name alone from the
    /// file of that name, `declared@stem` from any other.
    pub(crate) fn grant_key(&self, declared: &str) -> GrantKey {
        GrantKey {
            declared: declared.to_owned(),
            stem: (declared != self.stem).then(|| self.stem.clone()),
        }
    }

    /// The key the guest runs under, its name if it loads from the file of its name, refused
    /// when it is another file's without a `name@stem` grant. The grant itself may still be
    /// missing from `config` for a guest in its own file: that is an ungranted guest, not an
    /// impostor, and the caller says what it needs.
    /// An item that carries its own grant (a `Reconciler`) names its guest whatever it declares.
    pub(crate) fn resolve(
        &self,
        declared: &str,
        config: &HostConfig,
    ) -> Result<GrantKey, NotItsGrant> {
        let key = self.grant_key(declared);
        if self.own_grant().is_none()
            && key.stem.is_some()
            && !config.guests.contains_key(&key.to_string())
        {
            return Err(NotItsGrant {
                file: self.name.clone(),
                declared: declared.to_owned(),
                stem: self.stem.clone(),
            });
        }
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> HostConfig {
        HostConfig::parse(text, Path::new("host.yaml")).unwrap()
    }

    #[test]
    fn a_grant_key_names_the_file_it_belongs_to_and_reads_back_as_written() {
        for (key, declared, stem) in [
            ("network", "network", "network"),
            ("network@network-v2", "network", "network-v2"),
            ("a@b@c", "a", "b@c"),
        ] {
            let parsed = GrantKey::parse(key);
            assert_eq!(
                (parsed.declared(), parsed.source_stem()),
                (declared, stem),
                "{key}"
            );
            assert_eq!(parsed.to_string(), key);
        }
    }

    #[test]
    fn a_file_keys_the_grant_of_the_name_it_declares_only_under_its_own_stem() {
        let own = Origin::file(Path::new("/guests/network.wasm"));
        assert_eq!(own.grant_key("network").to_string(), "network");
        let other = Origin::file(Path::new("/guests/evil.wasm"));
        assert_eq!(other.grant_key("network").to_string(), "network@evil");
        // The source of a key is the file its guest was loaded from, both ways round.
        assert_eq!(other.grant_key("network").source_stem(), "evil");
    }

    #[test]
    fn a_guest_declaring_another_files_name_is_refused_unless_granted_for_its_own_file() {
        let grants = config("guests:\n  network: {}\n  network@network-v2: {mode: shadow}\n");
        let resolve = |file: &str, declared: &str| {
            Origin::file(Path::new(file))
                .resolve(declared, &grants)
                .map(|key| key.to_string())
        };
        assert_eq!(resolve("/g/network.wasm", "network").unwrap(), "network");
        assert_eq!(
            resolve("/g/network-v2.wasm", "network").unwrap(),
            "network@network-v2"
        );
        // Its own name without a grant: an ungranted guest, for the caller to refuse.
        assert_eq!(resolve("/g/widget.wasm", "widget").unwrap(), "widget");

        let err = resolve("/g/evil.wasm", "network").unwrap_err();
        assert_eq!(
            err.to_string(),
            "/g/evil.wasm: declares guest `network`, but a grant goes with the file a guest is loaded from, not with the name it declares: guests.network is the grant of network.wasm; rename the file to network.wasm, or grant it as guests.network@evil"
        );
        // A `name@stem` grant is its file's alone, and gives that file no other name.
        assert!(resolve("/g/network-v3.wasm", "network").is_err());
        assert!(resolve("/g/network-v2.wasm", "widget").is_err());
        assert!(resolve("/g/network@network-v2.wasm", "network").is_err());
    }
}
