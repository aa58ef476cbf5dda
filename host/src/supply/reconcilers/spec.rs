//! The `ClusterReconciler` (`clusterreconcilers.reconciler.dev`, `v1alpha1`, cluster-scoped)
//! and `Reconciler` (`reconcilers.reconciler.dev`, namespaced) kinds as the host reads them:
//! `spec.module`, `spec.grant`, `spec.pullSecretRef`, and a namespaced one's
//! `spec.serviceAccountName`. The CRD's schema and CEL rules
//! (`deploy/crds/reconcilers.yaml`) refuse most mistakes at admission; what the schema cannot
//! say (a kind written wrong, a grant the host's types refuse) is refused here, with the field.

use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use serde::Deserialize;

use crate::config::Grant;
use crate::oci::ModuleRef;

pub(crate) use crate::cluster::objects::reconciler_kind::{
    CLUSTER_KIND, CLUSTER_PLURAL, GROUP, KIND, PLURAL, VERSION,
};

/// The API resource of `ClusterReconciler` objects.
pub(crate) fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, CLUSTER_KIND),
        CLUSTER_PLURAL,
    )
}

/// The API resource of namespaced `Reconciler` objects.
pub(crate) fn namespaced_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// A `Reconciler`'s spec, as the host runs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spec {
    pub module: ModuleRef,
    pub grant: Grant,
    /// The dockerconfigjson Secret (in the host's namespace) to pull with.
    pub pull_secret: Option<String>,
    /// A namespaced Reconciler's account of its namespace to write as.
    pub service_account_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSpec {
    module: String,
    #[serde(default)]
    grant: serde_json::Value,
    #[serde(default)]
    pull_secret_ref: Option<SecretRef>,
    #[serde(default)]
    service_account_name: Option<String>,
    #[serde(default)]
    rollout: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretRef {
    name: String,
}

impl Spec {
    /// The spec of `object`, or why it cannot run (the field and the rule).
    pub(crate) fn of(object: &DynamicObject) -> Result<Self, SpecError> {
        let spec = object.data.get("spec").ok_or(SpecError::Missing)?;
        // Read in place: this runs for every object on every rescan.
        let raw = RawSpec::deserialize(spec).map_err(SpecError::Shape)?;
        let module = raw.module.parse::<ModuleRef>().map_err(SpecError::Module)?;
        let grant = if raw.grant.is_null() {
            Grant::default()
        } else {
            serde_json::from_value::<Grant>(raw.grant).map_err(SpecError::Grant)?
        };
        grant
            .write_verbs
            .check(&grant.write)
            .map_err(SpecError::WriteVerbs)?;
        let mut grant = grant;
        if let Some(rollout) = raw.rollout {
            // A tag is resolved again by every process that starts: a rollout's two versions
            // must be the same on every replica and after every restart.
            if module.digest().is_none() {
                return Err(SpecError::RolloutTag);
            }
            let plan = serde_json::from_value::<crate::config::Rollout>(rollout)
                .map_err(SpecError::Rollout)?;
            plan.check().map_err(SpecError::Plan)?;
            grant.rollout = Some(plan);
        }
        Ok(Self {
            module,
            grant,
            pull_secret: raw.pull_secret_ref.map(|r| r.name),
            service_account_name: raw.service_account_name,
        })
    }
}

/// Why a Reconciler's spec cannot run: the field, and the rule it breaks.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpecError {
    #[error("spec: missing")]
    Missing,
    #[error("spec: {0}")]
    Shape(serde_json::Error),
    #[error("spec.module: {0}")]
    Module(crate::oci::ModuleRefError),
    #[error("spec.grant: {0}")]
    Grant(serde_json::Error),
    #[error("spec.grant.{0}")]
    WriteVerbs(crate::config::UnlistedKind),
    #[error("spec.rollout: {0}")]
    Rollout(serde_json::Error),
    #[error(
        "spec.module: with spec.rollout, the module is pinned by its digest (REPO@sha256:…); a tag would be resolved again by each replica and after each restart"
    )]
    RolloutTag,
    #[error("spec.{0}")]
    Plan(crate::config::PlanError),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(spec: &serde_json::Value) -> DynamicObject {
        let mut object = DynamicObject::new("greeter", &api_resource());
        object.data = serde_json::json!({ "spec": spec });
        object
    }

    #[test]
    fn a_spec_gives_its_module_grant_and_pull_secret() {
        let spec = Spec::of(&object(&serde_json::json!({
            "module": "oci://127.0.0.1:5000/guests/greeter:v1",
            "grant": {
                "mode": "shadow",
                "read": ["test.reconciler.dev/v1/Widget"],
                "write": ["test.reconciler.dev/v1/Widget/status"],
                "limits": {"deadline": "2s", "memoryMiB": 32}
            },
            "pullSecretRef": {"name": "registry"}
        })))
        .unwrap();
        assert_eq!(
            spec.module.to_string(),
            "oci://127.0.0.1:5000/guests/greeter:v1"
        );
        assert_eq!(spec.grant.mode, crate::config::Mode::Shadow);
        assert_eq!(spec.grant.read.len(), 1);
        assert_eq!(spec.grant.write.len(), 1);
        assert_eq!(spec.grant.limits.memory_mib, Some(32));
        assert_eq!(spec.pull_secret.as_deref(), Some("registry"));
        assert_eq!(spec.grant.rollout, None, "no rollout: an immediate switch");
    }

    #[test]
    fn a_rollout_in_the_spec_becomes_the_grants_plan() {
        let spec = Spec::of(&object(&serde_json::json!({
            "module": "oci://127.0.0.1:5000/guests/greeter:v2@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "rollout": {"steps": [{"shadow": {"duration": "1m"}}, {"canary": {"percent": 20}}],
                        "gates": {"minSample": 30}}
        })))
        .unwrap();
        let plan = spec.grant.rollout.expect("the plan");
        assert_eq!(plan.steps.len(), 2);
        assert_eq!(plan.gates.min_sample, 30);
    }

    #[test]
    fn a_spec_the_host_cannot_run_names_the_field() {
        for (spec, field) in [
            (
                serde_json::json!({"module": "127.0.0.1:5000/g"}),
                "spec.module",
            ),
            (
                serde_json::json!({"module": "oci://r.example/g", "grant": {"read": ["Widget"]}}),
                "spec.grant",
            ),
            (
                serde_json::json!({"module": "oci://r.example/g", "grant": {"reads": []}}),
                "spec.grant",
            ),
            (serde_json::json!({"grant": {}}), "spec:"),
            (
                serde_json::json!({"module": "oci://r.example/g", "grant": {
                    "write": ["v1/ConfigMap"], "writeVerbs": {"v1/Secret": ["patch"]}}}),
                "spec.grant.writeVerbs names v1/Secret",
            ),
            (
                serde_json::json!({"module": "oci://r.example/g@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                    "rollout": {"steps": [{"canary": {"percent": 0}}]}}),
                "spec.rollout: ",
            ),
            (
                serde_json::json!({"module": "oci://r.example/g:v2", "rollout": {}}),
                "spec.module: with spec.rollout, the module is pinned by its digest",
            ),
            (
                serde_json::json!({"module": "oci://r.example/g@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                    "rollout": {"steps": [{"canary": {"percent": 50}}, {"shadow": {}}]}}),
                "spec.rollout.steps[1]: a shadow step after a canary",
            ),
            (
                serde_json::json!({"module": "oci://r.example/g", "grant": {
                    "write": ["v1/ConfigMap"], "writeVerbs": {"v1/ConfigMap": ["update"]}}}),
                "spec.grant: `update` is not a verb here",
            ),
        ] {
            let err = Spec::of(&object(&spec)).unwrap_err().to_string();
            assert!(err.starts_with(field), "{spec}: {err}");
        }
    }
}
