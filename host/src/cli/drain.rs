//! `reconciler-host drain`: what the Helm chart's pre-delete hook runs, so that `helm uninstall`
//! leaves no object stuck deleting on the finalizer of a guest that is no longer there.
//!
//! 1. It withdraws every grant in the hosts' configuration ConfigMap: `guests: {}` and each
//!    `Reconciler` ceiling (`reconcilers.allow`, a tenant rule's `allow`) emptied. The running
//!    hosts follow the file as they follow any change (docs/operating.md, hot reload) and unload
//!    every guest, since no guest runs without reading its primary kind; each one that declared
//!    a finalizer is then listed on `/guests` with its `orphanedFinalizer`, as any unload lists it.
//! 2. It waits until no host Pod reports a guest running.
//! 3. It removes each of those finalizers from every object of its kind, with the patch of the
//!    `release` policy ([`crate::cluster::finalizer::remove_ops`]): no guest is left to put one back.
//!    Objects are listed as the host; a guest with its own ServiceAccount (a grant's
//!    `serviceAccount`, given as `--service-account GUEST=NS/NAME` or read from `/guests` before
//!    the grants go) wrote its finalizer as that account, and the patch goes as it too, which
//!    the host may impersonate for exactly that; others' patches go as the host, which holds
//!    their writes. Finalizers of guests unloaded earlier under `keep` go too.
//!
//! The hosts keep running without grants until Helm deletes them; a rollback or an upgrade
//! writes the configuration back.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde::Deserialize;
use serde_yaml::{Mapping, Value};

use crate::cluster::objects::Gvk;
use crate::config::ServiceAccountRef;

fn parse_account(text: &str) -> anyhow::Result<(String, ServiceAccountRef)> {
    let (guest, account) = text.split_once('=').ok_or_else(|| {
        anyhow::anyhow!("--service-account {text:?}: write it GUEST=NAMESPACE/NAME")
    })?;
    Ok((guest.to_owned(), account.parse()?))
}

#[derive(clap::Args)]
pub(crate) struct DrainArgs {
    /// The ConfigMap holding the hosts' configuration, in --namespace.
    #[arg(long)]
    config_map: String,
    /// Its key holding host.yaml.
    #[arg(long, default_value = "host.yaml")]
    key: String,
    /// The hosts' namespace (default: this Pod's, or the kubeconfig context's).
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// A label selector of the host Pods.
    #[arg(long)]
    selector: String,
    /// The port of the hosts' /guests.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The hosts listen on their node's loopback (hostNetwork): ask 127.0.0.1, so run on their
    /// node.
    #[arg(long)]
    loopback: bool,
    /// A guest that writes as its own ServiceAccount: GUEST=NAMESPACE/NAME (repeated).
    #[arg(long = "service-account", value_parser = parse_account)]
    service_accounts: Vec<(String, ServiceAccountRef)>,
    /// How long the hosts have to unload their guests.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// The configuration text with every grant withdrawn; everything else (backends, which change
/// only with a restart, registries) as it was.
pub(crate) fn withdraw(text: &str) -> Result<String, serde_yaml::Error> {
    let mut config: Value = serde_yaml::from_str(text)?;
    if !config.is_mapping() {
        config = Value::Mapping(Mapping::new());
    }
    config["guests"] = Value::Mapping(Mapping::new());
    if let Some(reconcilers) = config.get_mut("reconcilers").filter(|r| r.is_mapping()) {
        reconcilers["allow"] = Value::Mapping(Mapping::new());
        if let Some(Value::Sequence(tenants)) = reconcilers.get_mut("tenants") {
            for tenant in tenants.iter_mut().filter(|t| t.is_mapping()) {
                tenant["allow"] = Value::Mapping(Mapping::new());
            }
        }
    }
    serde_yaml::to_string(&config)
}

/// The part of a `/guests` entry the drain reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GuestEntry {
    file: String,
    /// Set while a version of the item runs.
    active_hash: Option<String>,
    guest: Option<String>,
    orphaned_finalizer: Option<Orphan>,
    /// The ServiceAccount a running guest writes as.
    service_account: Option<String>,
}

#[derive(Debug, Deserialize, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Orphan {
    finalizer: String,
    kind: Gvk,
}

/// What the hosts report: the items still running (pod: file), and every finalizer left
/// behind, with the guests that left it.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Survey {
    running: Vec<String>,
    orphans: BTreeMap<Orphan, Vec<String>>,
}

pub(crate) fn survey(reports: &[(String, Vec<GuestEntry>)]) -> Survey {
    let mut out = Survey::default();
    for (pod, entries) in reports {
        for entry in entries {
            if entry.active_hash.is_some() {
                out.running.push(format!("{pod}: {}", entry.file));
            }
            if let Some(orphan) = &entry.orphaned_finalizer {
                let guests = out.orphans.entry(orphan.clone()).or_default();
                let guest = entry.guest.clone().unwrap_or_default();
                if !guests.contains(&guest) {
                    guests.push(guest);
                }
            }
        }
    }
    out
}

pub(crate) async fn drain(args: DrainArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("cannot reach the API server")?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut accounts: BTreeMap<String, ServiceAccountRef> =
        args.service_accounts.iter().cloned().collect();
    // The accounts of guests running now (Reconcilers' among them), while /guests still says.
    if let Ok(reports) = reports(&pods, &http, &args).await {
        for entry in reports.iter().flat_map(|(_, entries)| entries) {
            if let (Some(guest), Some(Ok(account))) = (
                &entry.guest,
                entry.service_account.as_deref().map(str::parse),
            ) {
                accounts.entry(guest.clone()).or_insert(account);
            }
        }
    }
    let current = config_maps
        .get(&args.config_map)
        .await
        .with_context(|| format!("ConfigMap {namespace}/{}", args.config_map))?;
    let text = current
        .data
        .as_ref()
        .and_then(|d| d.get(&args.key))
        .with_context(|| {
            format!(
                "ConfigMap {namespace}/{} has no key {}",
                args.config_map, args.key
            )
        })?;
    let drained = withdraw(text).with_context(|| {
        format!(
            "ConfigMap {namespace}/{} key {}: not YAML",
            args.config_map, args.key
        )
    })?;
    if &drained != text {
        let patch = serde_json::json!({ "data": { args.key.clone(): drained } });
        config_maps
            .patch(
                &args.config_map,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .with_context(|| format!("withdrawing the grants in {}", args.config_map))?;
    }
    eprintln!(
        "drain: every grant in ConfigMap {namespace}/{} withdrawn; waiting for the hosts ({}) to unload their guests",
        args.config_map, args.selector
    );
    let survey = unloaded(&pods, &http, &args).await?;
    for (orphan, guests) in &survey.orphans {
        let account = guests.iter().find_map(|g| accounts.get(g));
        let released = release(&client, orphan, account).await.with_context(|| {
            format!(
                "releasing finalizer {} of {} (guests {})",
                orphan.finalizer,
                orphan.kind,
                guests.join(", ")
            )
        })?;
        eprintln!(
            "drain: finalizer {} of guest {} removed from {released} {} objects",
            orphan.finalizer,
            guests.join(", "),
            orphan.kind.kind
        );
    }
    eprintln!("drain: done; {} finalizers released", survey.orphans.len());
    Ok(())
}

/// Polls the host Pods' `/guests` until none runs a guest; their survey then.
async fn unloaded(
    pods: &Api<Pod>,
    http: &reqwest::Client,
    args: &DrainArgs,
) -> anyhow::Result<Survey> {
    let deadline = tokio::time::Instant::now() + args.timeout;
    let mut told = tokio::time::Instant::now();
    loop {
        let waiting = match reports(pods, http, args).await {
            Ok(reports) if reports.is_empty() => format!(
                "no host Pod runs (selector {}): nothing can say which finalizers its guests left; \
                 start the hosts, or uninstall with --no-hooks and remove the guests' finalizers by hand",
                args.selector
            ),
            Ok(reports) => {
                let survey = survey(&reports);
                if survey.running.is_empty() {
                    return Ok(survey);
                }
                format!("still running: {}", survey.running.join(", "))
            }
            Err(e) => format!("{e:#}"),
        };
        // A Pod still compiling a large guest takes the new configuration only after: say
        // what is awaited, every ten seconds, in the hook's log.
        if told.elapsed() >= Duration::from_secs(10) {
            eprintln!("drain: waiting; {waiting}");
            told = tokio::time::Instant::now();
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the hosts did not unload their guests within {}: {waiting}",
                humantime::format_duration(args.timeout)
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every running host Pod's `/guests`.
async fn reports(
    pods: &Api<Pod>,
    http: &reqwest::Client,
    args: &DrainArgs,
) -> anyhow::Result<Vec<(String, Vec<GuestEntry>)>> {
    let list = pods
        .list(&ListParams::default().labels(&args.selector))
        .await?;
    let mut out = Vec::new();
    for pod in list.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        let running = status.phase.as_deref() == Some("Running");
        let Some(ip) = status.pod_ip.filter(|_| running) else {
            continue;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let address = if args.loopback { "127.0.0.1" } else { &ip };
        let url = format!("http://{address}:{}/guests", args.port);
        let entries = http
            .get(&url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("GET {url} (Pod {name})"))?
            .json()
            .await
            .with_context(|| format!("GET {url} (Pod {name}): not a /guests list"))?;
        out.push((name, entries));
    }
    Ok(out)
}

/// Removes `orphan`'s finalizer from every object of its kind that carries it, listed as the
/// host and patched as `account` when the guest wrote as one; how many were released.
async fn release(
    client: &kube::Client,
    orphan: &Orphan,
    account: Option<&ServiceAccountRef>,
) -> Result<usize, kube::Error> {
    let gvk = kube::core::GroupVersionKind::from(&orphan.kind);
    let kind = crate::cluster::discovery::Resolver::default()
        .resolve(client, &gvk)
        .await?;
    let all = Api::<DynamicObject>::all_with(client.clone(), &kind.resource);
    let writer = account.map_or_else(
        || client.clone(),
        |a| crate::sandbox::identity::client_as(client, a),
    );
    crate::cluster::finalizer::release_all(&all, &writer, &kind.resource, &orphan.finalizer).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn withdrawing_empties_the_grants_and_ceilings_and_keeps_the_rest() {
        let text = "backends:\n  network: {provider: memory}\nguests:\n  network:\n    read: [samplecrd.k8s.io/v1/Network]\nreconcilers:\n  pullSecrets: [registry]\n  allow:\n    read: [v1/ConfigMap]\n  tenants:\n  - name: a\n    allow: {read: [v1/ConfigMap]}\n";
        let drained: Value = serde_yaml::from_str(&withdraw(text).unwrap()).unwrap();
        let expected: Value = serde_yaml::from_str(
            "backends:\n  network: {provider: memory}\nguests: {}\nreconcilers:\n  pullSecrets: [registry]\n  allow: {}\n  tenants:\n  - name: a\n    allow: {}\n",
        )
        .unwrap();
        assert_eq!(drained, expected);
        // An empty file, or a host without Reconcilers.
        assert_eq!(
            serde_yaml::from_str::<Value>(&withdraw("").unwrap()).unwrap(),
            serde_yaml::from_str::<Value>("guests: {}").unwrap()
        );
        assert!(withdraw("guests: [").is_err());
    }

    fn entries(json: &str) -> Vec<GuestEntry> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_survey_waits_for_every_pod_and_gathers_each_finalizer_once() {
        let orphan = r#"{"file": "/guests/network.wasm", "hash": "", "state": {"state": "unloaded"}, "guest": "network", "activeHash": null,
            "orphanedFinalizer": {"finalizer": "samplecrd.k8s.io/network-backend", "kind": {"group": "samplecrd.k8s.io", "version": "v1", "kind": "Network"},
            "policy": "keep", "unloadedAt": "2026-11-28T00:00:00Z", "objects": 3, "released": null}}"#;
        let running = r#"{"file": "/guests/widget.wasm", "hash": "h", "state": {"state": "loaded"}, "guest": "widget", "activeHash": "h"}"#;
        let refused = r#"{"file": "/guests/widget.wasm", "hash": "h", "state": {"state": "failed", "reason": "no grant"}, "guest": null, "activeHash": null}"#;
        let leader = ("a".to_owned(), entries(&format!("[{refused}, {orphan}]")));
        let standby = ("b".to_owned(), entries(&format!("[{running}, {orphan}]")));
        let both = survey(&[leader, standby]);
        assert_eq!(both.running, ["b: /guests/widget.wasm"]);
        let standby = ("b".to_owned(), entries(&format!("[{refused}, {orphan}]")));
        let leader = ("a".to_owned(), entries(&format!("[{refused}, {orphan}]")));
        let done = survey(&[leader, standby]);
        assert!(done.running.is_empty());
        let found: Vec<(&Orphan, &Vec<String>)> = done.orphans.iter().collect();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0.finalizer, "samplecrd.k8s.io/network-backend");
        assert_eq!(found[0].1, &["network"]);
    }
}
