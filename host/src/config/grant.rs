//! A guest's grant (`guests.<name>`, a Reconciler's `spec.grant`): what it may read, write,
//! call and hold, and how its changes reach the world (`mode`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{
    HttpRule, Limits, ReadSelectors, RecordPolicy, ServiceAccountRef, Verb, WriteTarget, WriteVerbs,
};
use crate::cluster::objects::Gvk;

/// `guests.<name>.primaryReads`: see [`Grant::primary_reads`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrimaryReads {
    #[default]
    Share,
    Whole,
}

/// What one guest may do. Everything not listed is denied.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    /// `active` (default) or `shadow`: in shadow mode the guest runs with this grant but
    /// changes nothing; each intended change is compared with the live state
    /// (see `crate::sandbox::shadow`). Changing it reloads the guest, without a restart.
    #[serde(default)]
    pub mode: Mode,
    /// Kinds the guest may watch and read through the lister (and record events about).
    #[serde(
        default,
        deserialize_with = "crate::cluster::objects::deserialize_kinds"
    )]
    pub read: BTreeSet<Gvk>,
    /// A label selector per read kind (`{v1/ConfigMap: "app=web"}`): the guest reads and
    /// watches only objects of the kind that match it, and the host caches only those. Every
    /// watch of the kind gets the selector added to its own.
    #[serde(default)]
    pub read_selectors: ReadSelectors,
    /// Sharded hosts (`run --shards auto`): what the lister shows of the guest's primary kind.
    /// `share` (default): this replica's share, the cache its controller runs on (objects of
    /// other shares read as absent), so each replica caches only its share. `whole`: every
    /// object, for guests that look up other objects of their own kind (the naming guest lists
    /// a group's CRDs); every replica then caches the whole kind. Other kinds are always whole.
    #[serde(default)]
    pub primary_reads: PrimaryReads,
    /// Kinds (apply, delete, finalizers) and subresources (`.../status`) it may write.
    #[serde(default)]
    pub write: BTreeSet<WriteTarget>,
    /// The verbs it gets on a kind of `write` (`{apps/v1/Deployment: [patch]}`): `create`,
    /// `patch`, `delete` (see `writes`); a kind not named here gets every one.
    #[serde(default)]
    pub write_verbs: WriteVerbs,
    /// Label keys the guest may set on objects it applies: each a key or a prefix ending in
    /// `*` (`example.com/*`). A list is the complete set. Unset: every key outside Kubernetes'
    /// own domains (`kubernetes.io`, `k8s.io` and their subdomains), whose keys act
    /// cluster-wide (`pod-security.kubernetes.io/enforce` on a Namespace, node roles...) and
    /// so are set only where listed here.
    #[serde(default)]
    pub labels: Option<Vec<String>>,
    /// Annotation keys the guest may set on objects it applies, as for `labels`
    /// (`kubernetes.io/service-account.name` on a Secret makes the API server mint a token).
    #[serde(default)]
    pub annotations: Option<Vec<String>>,
    /// Backends (by name under `backends:`) it may call.
    #[serde(default)]
    pub backends: BTreeSet<String>,
    /// Environment variables the guest sees through WASI; none by default.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// URL prefixes the guest may call through `wasi:http/outgoing-handler`, with the methods
    /// and the credentials the host adds (docs/http.md); none by default.
    #[serde(default)]
    pub http: Vec<HttpRule>,
    #[serde(default)]
    pub limits: Limits,
    /// The ServiceAccount (`NAMESPACE/NAME`) every API write of the guest is sent as, so the
    /// API server checks it against that account's RBAC too; its reads are reviewed against
    /// the same account at load and periodically (see `crate::sandbox::identity`).
    #[serde(default)]
    pub service_account: Option<ServiceAccountRef>,
    /// Record reconciles for offline replay (`reconcile --replay`); none by default. Only the
    /// host configuration sets it: a `Reconciler`'s grant cannot (its schema has no such field).
    #[serde(default)]
    pub record: Option<RecordPolicy>,
    /// How a new version of the guest's module takes over (`crate::config::Rollout`): unset,
    /// at once; set, through shadow and canary steps judged by gates. A `Reconciler` writes it
    /// as `spec.rollout`.
    #[serde(default)]
    pub rollout: Option<super::Rollout>,
    /// Allows every read, write and backend: only the offline runner uses this, when it is
    /// given no host configuration.
    #[serde(skip)]
    pub unrestricted: bool,
    /// Where the grant was written, so a refusal says where to add what is missing.
    #[serde(skip)]
    pub written_in: WrittenIn,
}

/// Where a grant was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WrittenIn {
    /// `guests.<name>` of the host configuration.
    #[default]
    HostConfig,
    /// `spec.grant` of the `Reconciler` object of this name.
    Reconciler(String),
}

/// A call outside the grant. The message names the guest, the missing right and where to add it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("guest `{guest}` may not {what}: add it to {place}")]
pub(crate) struct Denied {
    pub(crate) guest: String,
    pub(crate) what: String,
    pub(crate) field: &'static str,
    /// Where to add it ([`Grant::place_in_full`]).
    pub(crate) place: String,
}

impl Grant {
    /// Where `field` of this grant of `guest` is written, in short: `guests.NAME.FIELD`, or
    /// `spec.grant.FIELD of Reconciler NAME`.
    pub(crate) fn place(&self, guest: &str, field: &str) -> String {
        match &self.written_in {
            WrittenIn::HostConfig => format!("guests.{guest}.{field}"),
            WrittenIn::Reconciler(name) => format!("spec.grant.{field} of Reconciler {name}"),
        }
    }

    /// [`Self::place`] with the document it is in.
    pub(crate) fn place_in_full(&self, guest: &str, field: &str) -> String {
        let place = self.place(guest, field);
        match &self.written_in {
            WrittenIn::HostConfig => format!("{place} in the host configuration"),
            WrittenIn::Reconciler(_) => {
                format!("{place} (within reconcilers.allow of the host configuration)")
            }
        }
    }

    pub fn unrestricted() -> Self {
        Self {
            unrestricted: true,
            ..Self::default()
        }
    }

    pub(crate) fn may_read(&self, guest: &str, kind: &Gvk) -> Result<(), Denied> {
        if self.unrestricted || self.read.contains(kind) {
            return Ok(());
        }
        Err(Denied {
            guest: guest.to_owned(),
            what: format!("read {kind}"),
            field: "read",
            place: self.place_in_full(guest, "read"),
        })
    }

    /// Whether `verb` on `kind` (or its `subresource`, whose one write is `patch`) is granted.
    pub(crate) fn may_write(
        &self,
        guest: &str,
        kind: &Gvk,
        subresource: Option<&str>,
        verb: Verb,
    ) -> Result<(), Denied> {
        if self.unrestricted || self.write_verbs.allow(&self.write, kind, subresource, verb) {
            return Ok(());
        }
        let wanted = WriteTarget {
            kind: kind.clone(),
            subresource: subresource.map(str::to_owned),
        };
        let listed = self.write.contains(&wanted);
        let (what, field) = if listed {
            (format!("{verb} {wanted}"), "writeVerbs")
        } else {
            (format!("write {wanted}"), "write")
        };
        Err(Denied {
            guest: guest.to_owned(),
            what,
            field,
            place: self.place_in_full(guest, field),
        })
    }

    /// Whether an apply may create `kind`'s objects, not only change existing ones.
    pub(crate) fn may_create(&self, kind: &Gvk) -> bool {
        self.unrestricted || self.write_verbs.of(kind).contains(&Verb::Create)
    }

    pub(crate) fn may_call_backend(&self, guest: &str, backend: &str) -> Result<(), Denied> {
        if self.unrestricted || self.backends.contains(backend) {
            return Ok(());
        }
        Err(Denied {
            guest: guest.to_owned(),
            what: format!("call the `{backend}` backend"),
            field: "backends",
            place: self.place_in_full(guest, "backends"),
        })
    }
}

/// How a guest's changes reach the world (`guests.<name>.mode` in the host configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Writes, events and backend calls are made.
    #[default]
    Active,
    /// Nothing is changed; intended changes are compared with the live state.
    Shadow,
}
