//! The rollouts that `Reconciler` objects' statuses record (`status.rollout`, written by the
//! replica that judges them): what every other replica follows, and what a host that starts
//! afresh (a restart, a failover to a process that never ran the rollout, a guest loaded again
//! after it stopped) takes up.
//!
//! Taking one up: when an object's status records a rollout under its current generation that
//! was not promoted, a load of its module where no version of it runs waits until the version
//! it rolls out from (`status.rollout.fromModule`) is pulled too, under the same registries,
//! pull Secret and signatures as `spec.module` (a failed pull is retried; the spec's module does
//! not run without it). The guest set then admits that version like any content and runs it as
//! the stable one; the rollout goes on from the step its status names (or stays rolled back).
//! Without such a rollout, a spec with a plan whose module is not the one that served
//! (`status.module`: it changed while no host ran) is rolled out from that one, from the first
//! step. The status is trusted as far as the spec is: whoever may write an object's status may
//! name these versions, within the same rules as the spec's module.

use std::collections::BTreeMap;

use kube::api::DynamicObject;

use super::pulls::{Pull, Records, Resuming};
use crate::config::HostConfig;
use crate::oci::ModuleRef;
use crate::supply::rollout::{Phase, RolloutStatus};

/// The rollouts the statuses of `objects` (by record key) record, by item, their versions
/// named by content hash where this host knows them. What a load of each object would take up
/// is noted in `records` (`Record::resuming`).
pub(super) fn recorded<'a>(
    objects: impl Iterator<Item = (String, &'a DynamicObject)>,
    records: &mut Records,
    config: &HostConfig,
) -> BTreeMap<String, RolloutStatus> {
    let mut recorded = BTreeMap::new();
    for (key, object) in objects {
        let status = object
            .data
            .pointer("/status/rollout")
            .filter(|r| !r.is_null())
            .and_then(|r| serde_json::from_value::<RolloutStatus>(r.clone()).ok());
        let from_module = object
            .data
            .pointer("/status/rollout/fromModule")
            .and_then(serde_json::Value::as_str);
        let noted = status
            .as_ref()
            .is_some_and(|status| note(records, &key, object, status, from_module, config));
        if !noted {
            note_serving(records, &key, object, config);
        }
        let Some(status) = status else {
            continue;
        };
        let hash = |digest: &str| records.hash_of(&key, digest).map(str::to_owned);
        if let (Some(from), Some(to)) = (hash(&status.from), hash(&status.to)) {
            recorded.insert(
                format!("{}{key}", crate::supply::guest_set::RECONCILER_PREFIX),
                RolloutStatus { from, to, ..status },
            );
        }
    }
    recorded
}

/// Notes `status` to be taken up at object `key`'s next first load (a host started afresh, or
/// the object's guest loaded again after it stopped), when it can be: the rollout runs under
/// the object's generation and was not promoted, and the version it rolls out from is named by a
/// module pinned to its digest that the object's tenant rule (if any) lets it pull.
fn note(
    records: &mut Records,
    key: &str,
    object: &DynamicObject,
    status: &RolloutStatus,
    from_module: Option<&str>,
    config: &HostConfig,
) -> bool {
    let Some(record) = records.objects.get_mut(key) else {
        return false;
    };
    let current = status.generation.is_some() && status.generation == object.metadata.generation;
    if record.spec.is_err()
        || !current
        || status.phase == Phase::Promoted
        || status.from == status.to
    {
        return false;
    }
    if let Some(resuming) = record.resuming.as_mut().filter(|r| {
        r.status
            .as_ref()
            .is_some_and(|recorded| recorded.same_rollout(status))
    }) {
        // Its pull goes on; the step is the judge's latest.
        resuming.status = Some(status.clone());
        return true;
    }
    let module = match from_module.map(str::parse::<ModuleRef>) {
        Some(Ok(module)) if module.digest() == Some(status.from.as_str()) => module,
        _ => {
            // Read at every rescan: said at debug, not as a flood of warnings.
            tracing::debug!(
                reconciler = key,
                "status.rollout.fromModule does not name the version it rolls out from by its digest; the rollout is not taken up"
            );
            return false;
        }
    };
    if !tenant_allows(record.rule(), &module, config) {
        tracing::debug!(reconciler = key, module = %module, "status.rollout.fromModule is in a registry the namespace's tenant rule does not allow; the rollout is not taken up");
        return false;
    }
    record.resuming = Some(Resuming {
        status: Some(status.clone()),
        module,
        pull: Pull::Pending,
    });
    true
}

/// Notes, for object `key` whose status records no rollout to take up, the module that served
/// it last (`status.module`) when its spec, with a rollout plan, names another: the spec changed
/// while no host ran, and the new module is rolled out from the one that served.
fn note_serving(records: &mut Records, key: &str, object: &DynamicObject, config: &HostConfig) {
    let Some(record) = records.objects.get_mut(key) else {
        return;
    };
    let serving = object
        .data
        .pointer("/status/module")
        .and_then(serde_json::Value::as_str)
        .and_then(|m| m.parse::<ModuleRef>().ok())
        .filter(|m| m.digest().is_some());
    let wanted = match (&record.spec, serving) {
        (Ok(spec), Some(serving))
            if spec.grant.rollout.is_some()
                && spec.module.digest().is_some()
                && spec.module.digest() != serving.digest() =>
        {
            Some(serving)
        }
        _ => None,
    };
    let Some(module) = wanted.filter(|m| tenant_allows(record.rule(), m, config)) else {
        record.resuming = None;
        return;
    };
    if record
        .resuming
        .as_ref()
        .is_some_and(|r| r.status.is_none() && r.module == module)
    {
        return;
    }
    record.resuming = Some(Resuming {
        status: None,
        module,
        pull: Pull::Pending,
    });
}

/// Whether the tenant rule `rule` (by index; none for a `ClusterReconciler`) lets its
/// Reconcilers pull `module`.
fn tenant_allows(rule: Option<usize>, module: &ModuleRef, config: &HostConfig) -> bool {
    let rule = rule.and_then(|index| {
        config
            .reconcilers
            .as_ref()
            .and_then(|r| r.tenants.get(index))
    });
    rule.is_none_or(|rule| rule.allow.registries.iter().any(|r| r.covers(module)))
}
