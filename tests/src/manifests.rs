//! Server-side apply of YAML manifests: CRDs (waiting for `Established`) and any other objects.
//!
//! Relative paths are taken from the repository root, because cargo runs each test in its
//! package directory (`tests/`), where `examples/...` would not resolve.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{self, Scope};
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;

use crate::FIELD_MANAGER;
use crate::paths::repo_root;
use crate::wait::wait_until;

/// How long a CRD may take to become `Established` (normally well under a second).
pub const CRD_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);

fn resolve(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        repo_root().join(path)
    }
}

/// The YAML documents of a file, empty ones skipped, each as JSON.
fn documents(path: &Path) -> Result<Vec<serde_json::Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = serde_json::Value::deserialize(doc)
            .with_context(|| format!("{}: YAML document {} is not valid", path.display(), i + 1))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// Applies every CRD in the YAML file (server-side apply, forced, field manager
/// [`FIELD_MANAGER`]) and waits until each is `Established`. Safe to call from many tests at
/// once: applying an unchanged CRD is a no-op.
pub async fn apply_crd_file(
    client: &Client,
    path: impl AsRef<Path>,
) -> Result<Vec<CustomResourceDefinition>> {
    let path = resolve(path.as_ref());
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for (i, doc) in documents(&path)?.into_iter().enumerate() {
        let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        if kind != "CustomResourceDefinition" {
            bail!(
                "{}: document {} is a {kind:?}, not a CustomResourceDefinition; use apply_file for other objects",
                path.display(),
                i + 1
            );
        }
        let crd: CustomResourceDefinition = serde_json::from_value(doc).with_context(|| {
            format!("{}: document {} is not a valid CRD", path.display(), i + 1)
        })?;
        let name = crd.name_any();
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying CRD {name} from {}", path.display()))?;
        names.push(name);
    }
    if names.is_empty() {
        bail!("{} holds no CRD", path.display());
    }
    let mut crds = Vec::new();
    for name in names {
        let crd = wait_crd_established(client, &name, CRD_ESTABLISHED_TIMEOUT).await?;
        wait_crd_discoverable(client, &crd).await?;
        crds.push(crd);
    }
    Ok(crds)
}

/// Waits until discovery serves every version of the CRD's kind: kube-apiserver sets
/// `Established` before its handler for a new group/version is in place, and a discovery
/// request in between gets a 404 (seen under load on this 2-core machine).
async fn wait_crd_discoverable(client: &Client, crd: &CustomResourceDefinition) -> Result<()> {
    let spec = &crd.spec;
    for version in spec.versions.iter().filter(|v| v.served) {
        let gvk = GroupVersionKind::gvk(&spec.group, &version.name, &spec.names.kind);
        wait_until(
            &format!(
                "{} {} to be discoverable",
                spec.names.kind,
                gvk.api_version()
            ),
            CRD_ESTABLISHED_TIMEOUT,
            || async {
                discovery::pinned_kind(client, &gvk)
                    .await
                    .map_err(Into::into)
            },
        )
        .await?;
    }
    Ok(())
}

/// Waits until the CRD `name` has condition `Established=True`; the timeout error shows the
/// conditions it had last.
pub async fn wait_crd_established(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> Result<CustomResourceDefinition> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_until(
        &format!("CRD {name} to be Established"),
        timeout,
        || async {
            let crd = api.get(name).await?;
            let conditions = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .map(Vec::as_slice)
                .unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                return Ok(crd);
            }
            let summary: Vec<String> = conditions
                .iter()
                .map(|c| {
                    format!(
                        "{}={} ({})",
                        c.type_,
                        c.status,
                        c.message.as_deref().unwrap_or("")
                    )
                })
                .collect();
            Err(anyhow!("conditions: [{}]", summary.join(", ")))
        },
    )
    .await
}

/// Applies every object in the YAML file (server-side apply, forced, field manager
/// [`FIELD_MANAGER`]) and returns them as stored. Kinds are resolved through discovery, retried
/// for a few seconds so objects of a just-established CRD work. Namespaced objects without a
/// namespace go to `namespace`; an error names the file and document otherwise.
pub async fn apply_file(
    client: &Client,
    path: impl AsRef<Path>,
    namespace: Option<&str>,
) -> Result<Vec<DynamicObject>> {
    let path = resolve(path.as_ref());
    let mut applied = Vec::new();
    for (i, doc) in documents(&path)?.into_iter().enumerate() {
        let at = || format!("{} document {}", path.display(), i + 1);
        let object: DynamicObject =
            serde_json::from_value(doc).with_context(|| format!("{} is not an object", at()))?;
        let types = object
            .types
            .clone()
            .ok_or_else(|| anyhow!("{} has no apiVersion/kind", at()))?;
        let gvk = GroupVersionKind::try_from(&types).with_context(at)?;
        let (resource, caps) = wait_until(
            &format!(
                "the API server to serve {}/{}",
                types.api_version, types.kind
            ),
            Duration::from_secs(10),
            || async { Ok(discovery::pinned_kind(client, &gvk).await?) },
        )
        .await
        .with_context(at)?;
        let name = object.name_any();
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &resource),
            Scope::Namespaced => {
                let ns = object
                    .namespace()
                    .or_else(|| namespace.map(str::to_owned))
                    .ok_or_else(|| {
                        anyhow!(
                            "{} ({} {name}) is namespaced but names no namespace",
                            at(),
                            types.kind
                        )
                    })?;
                Api::namespaced_with(client.clone(), &ns, &resource)
            }
        };
        let stored = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .with_context(|| format!("applying {} {name} from {}", types.kind, at()))?;
        applied.push(stored);
    }
    Ok(applied)
}

/// The widget test guest's kind, `test.reconciler.dev/v1` `Widget`
/// (`guests/testing/widget/crd.yaml`).
pub fn widget_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk(&GroupVersionKind::gvk(
        "test.reconciler.dev",
        "v1",
        "Widget",
    ))
}

/// The widget test guest's objects in namespace `ns`.
pub fn widgets(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &widget_resource())
}

/// Creates Widget `name` asking the widget guest to echo its name (`spec.message`) and to own
/// a `ConfigMap` `<name>-widget`: a well-behaved guest's work that tests watch converge.
pub async fn create_widget(api: &Api<DynamicObject>, name: &str) -> Result<()> {
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": {"message": name, "configMap": true},
    }))?;
    api.create(&kube::api::PostParams::default(), &object)
        .await
        .with_context(|| format!("creating Widget {name}"))?;
    Ok(())
}

/// Waits until each Widget made by [`create_widget`] shows its name in `status.message` and
/// owns its `ConfigMap`; on timeout the error carries the host's log tail.
pub async fn widgets_converged<N: AsRef<str> + std::fmt::Debug>(
    client: &Client,
    ns: &str,
    names: &[N],
    host: &crate::HostProcess,
) -> Result<()> {
    let api = widgets(client, ns);
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), ns);
    wait_until(
        &format!("widgets {names:?} converged"),
        Duration::from_secs(120),
        || async {
            let mut missing = Vec::new();
            for name in names.iter().map(AsRef::as_ref) {
                let object = api.get(name).await?;
                let message = object.data.pointer("/status/message");
                let owned = config_maps.get_opt(&format!("{name}-widget")).await?;
                if message.and_then(serde_json::Value::as_str) != Some(name) || owned.is_none() {
                    missing.push(name);
                }
            }
            anyhow::ensure!(missing.is_empty(), "not converged: {missing:?}");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))
}
