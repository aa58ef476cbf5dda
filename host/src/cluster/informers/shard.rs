//! Sharded scopes: an informer that holds only the objects whose `metadata.uid` hashes into a
//! [`SlotSet`] (sharded mode, see `crate::replicas::shards`).
//!
//! Two ways to get there. On the server: lists and watches carry `shardSelector` (KEP-5866,
//! kube-apiserver feature gate `ShardedListAndWatch`, alpha in v1.36) and each replica receives
//! only its share, objects and watch traffic alike. On the client: the informer lists and watches
//! the whole collection and drops what falls outside on arrival, which works on any server but
//! makes every replica pay for every object on the wire and in parsing (not in memory: dropped
//! objects are never stored).
//!
//! [`ShardFilter`] picks one per informer. `auto` asks first: one list of one item with the
//! selector, before the first real list. A server that applied the selector echoes it in
//! `metadata.shardInfo.selector`; one with the gate off ignores the parameter without a word,
//! so the answer is checked rather than assumed. Custom resources are filtered but never echo it
//! (v1.36.3: `UnstructuredList` does not implement `ShardedListInterface`), so without an echo
//! the probe asks twice more: a selector that matches (practically) nothing, and no selector. A
//! server that returns an object to the second and none to the first filters. On an empty
//! collection nothing can be told; the selector is sent anyway (ignored, it costs nothing, and
//! the client-side check keeps the result right). The client-side check runs in every mode: one
//! hash per object, and it guards against a server that filters lists but not watches, or that
//! lost the gate in a restart after the probe.

use std::{fmt, str::FromStr};

use kube::{Client, api::DynamicObject, api::ListParams};
use serde::Deserialize;

use crate::cluster::shard_ranges::SlotSet;

/// What `/shards` (`crate::replicas::shards`) reads of one guest's primary cache: the
/// [`Informer`](super::Informer)'s share of the keys.
pub(crate) trait Share: Send + Sync {
    /// Objects in the cache: the guest's keys on this replica.
    fn keys(&self) -> usize;
    /// Where the share is filtered: `server`, `client`, or none yet.
    fn filter(&self) -> Option<&'static str>;
}

/// How sharded informers filter (`run --shard-filter`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ShardFilter {
    /// On the server when it honours `shardSelector` (asked once per informer), else on the client.
    #[default]
    Auto,
    /// On the server only: while the API server ignores `shardSelector`, the informer does not
    /// sync and its last error says why.
    Server,
    /// On the client only: `shardSelector` is never sent.
    Client,
}

impl ShardFilter {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Server => "server",
            Self::Client => "client",
        }
    }
}

impl fmt::Display for ShardFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ShardFilter {
    type Err = UnknownShardFilter;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "server" => Ok(Self::Server),
            "client" => Ok(Self::Client),
            other => Err(UnknownShardFilter(other.to_owned())),
        }
    }
}

/// A name that is no [`ShardFilter`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown shard filter {0:?}; use auto, server or client")]
pub struct UnknownShardFilter(String);

/// Where a sharded informer's objects are filtered, once decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FilterMode {
    /// The API server applies `shardSelector` (the client-side check still runs).
    Server,
    /// The whole collection arrives; objects outside the slots are dropped on arrival.
    Client,
}

impl FilterMode {
    /// The label value in metrics and `/shards`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Client => "client",
        }
    }
}

impl fmt::Display for FilterMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `obj` belongs in an informer sharded over `slots` (none: unsharded, everything does).
/// An object without a uid has no slot and belongs to no shard. Cost: one FNV hash of the uid.
pub(super) fn owns(slots: Option<&SlotSet>, obj: &DynamicObject) -> bool {
    slots.is_none_or(|slots| {
        obj.metadata
            .uid
            .as_deref()
            .is_some_and(|uid| slots.owns_uid(uid))
    })
}

#[derive(Deserialize)]
struct ProbeList {
    #[serde(default)]
    metadata: ProbeMeta,
}

#[derive(Deserialize, Default)]
struct ProbeMeta {
    #[serde(rename = "shardInfo")]
    shard_info: Option<ShardInfo>,
}

#[derive(Deserialize)]
struct ShardInfo {
    #[serde(default)]
    selector: String,
}

/// Whether the list response `body` says the server applied a shard selector.
pub(super) fn honoured(body: &str) -> Result<bool, serde_json::Error> {
    let list: ProbeList = serde_json::from_str(body)?;
    Ok(list
        .metadata
        .shard_info
        .is_some_and(|info| !info.selector.is_empty()))
}

/// A selector for (practically) no object: hash 0 only.
pub(super) const CANARY: &str =
    "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')";

/// What the probe found out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Probe {
    /// The answer echoed the selector in `shardInfo`.
    Echoed,
    /// No echo, but the canary selector filtered an object out (custom resources).
    Filtered,
    /// The server ignores the selector.
    Ignored,
    /// No echo and no object to tell by.
    Unknown,
}

impl Probe {
    pub(super) fn honoured(self) -> bool {
        self != Self::Ignored
    }
}

async fn one_item(client: &Client, collection_url: &str) -> Result<String, kube::Error> {
    let request = kube::core::Request::new(collection_url)
        .list(&ListParams::default().limit(1))
        .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await
}

fn has_items(body: &str) -> Result<bool, kube::Error> {
    #[derive(Deserialize)]
    struct Items {
        #[serde(default)]
        items: Vec<serde_json::Value>,
    }
    let list: Items = serde_json::from_str(body).map_err(kube::Error::SerdeError)?;
    Ok(!list.items.is_empty())
}

/// Whether the server honours `shardSelector` on `collection_url`: `sharded` adds this
/// informer's selector, `canary` adds [`CANARY`], `plain` none (see `client.rs`). Cost: one
/// list of one item, three when the server does not echo the selector.
pub(super) async fn probe(
    sharded: &Client,
    canary: &Client,
    plain: &Client,
    collection_url: &str,
) -> Result<Probe, kube::Error> {
    let body = one_item(sharded, collection_url).await?;
    if honoured(&body).map_err(kube::Error::SerdeError)? {
        return Ok(Probe::Echoed);
    }
    if has_items(&one_item(canary, collection_url).await?)? {
        return Ok(Probe::Ignored);
    }
    if has_items(&one_item(plain, collection_url).await?)? {
        Ok(Probe::Filtered)
    } else {
        Ok(Probe::Unknown)
    }
}

/// `last_error` of an informer in `server` mode on a server that ignores `shardSelector`.
pub(super) fn not_honoured(informer: &str) -> String {
    format!(
        "{informer}: --shard-filter server, but the API server ignored shardSelector (no \
         metadata.shardInfo, and a selector matching nothing still listed objects); enable kube-apiserver's ShardedListAndWatch \
         feature gate (--feature-gates=ShardedListAndWatch=true, Kubernetes v1.36+), or run \
         with --shard-filter auto or client to filter on the client; retrying"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::shard_ranges::slot_of;

    fn with_uid(uid: Option<&str>) -> DynamicObject {
        let mut obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "namespace": "a", "name": "x" },
        }))
        .unwrap();
        obj.metadata.uid = uid.map(ToOwned::to_owned);
        obj
    }

    #[test]
    fn ownership_follows_the_uid_slot() {
        let uid = "6a4c5e5e-8f39-4a5b-9a0e-0c2b8d3e1f00";
        let slot = slot_of(uid);
        let mine = SlotSet::range(slot, slot + 1);
        let others = SlotSet::all().difference(&mine);
        assert!(owns(Some(&mine), &with_uid(Some(uid))));
        assert!(!owns(Some(&others), &with_uid(Some(uid))));
        assert!(!owns(Some(&SlotSet::empty()), &with_uid(Some(uid))));
        assert!(
            !owns(Some(&SlotSet::all()), &with_uid(None)),
            "no uid, no slot"
        );
        assert!(owns(None, &with_uid(None)), "unsharded takes everything");
    }

    #[test]
    fn the_probe_trusts_only_an_echoed_selector() {
        let honouring = r#"{"kind":"ConfigMapList","apiVersion":"v1",
            "metadata":{"resourceVersion":"42","continue":"abc",
                "shardInfo":{"selector":"shardRange(object.metadata.uid, '0x0', '0x8000000000000000')"}},
            "items":[{"metadata":{"name":"x"}}]}"#;
        assert!(honoured(honouring).unwrap());
        // A server with the gate off answers the same list without shardInfo.
        let ignoring = r#"{"kind":"ConfigMapList","apiVersion":"v1",
            "metadata":{"resourceVersion":"42"},"items":[]}"#;
        assert!(!honoured(ignoring).unwrap());
        assert!(!honoured(r#"{"metadata":{"shardInfo":{"selector":""}}}"#).unwrap());
        assert!(!honoured(r#"{"metadata":{"shardInfo":{}}}"#).unwrap());
        assert!(!honoured(r#"{"items":[]}"#).unwrap());
        assert!(honoured("<html>").is_err());
    }

    #[test]
    fn shard_filter_names() {
        for filter in [ShardFilter::Auto, ShardFilter::Server, ShardFilter::Client] {
            assert_eq!(filter.as_str().parse::<ShardFilter>(), Ok(filter));
            let by_clap = <ShardFilter as clap::ValueEnum>::from_str(filter.as_str(), false);
            assert_eq!(by_clap, Ok(filter));
        }
        assert_eq!(" Server ".parse::<ShardFilter>(), Ok(ShardFilter::Server));
        assert!(
            "both"
                .parse::<ShardFilter>()
                .unwrap_err()
                .to_string()
                .contains("auto, server or client")
        );
        assert_eq!(ShardFilter::default(), ShardFilter::Auto);
        assert_eq!(FilterMode::Client.to_string(), "client");
    }
}
