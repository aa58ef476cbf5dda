//! The API server's CRD naming controller as a guest: a port of `NamingConditionController`
//! (`k8s.io/apiextensions-apiserver@v0.37.2`, `pkg/controller/status/naming_controller.go`,
//! unchanged since v0.36.3).
//!
//! For every `CustomResourceDefinition` it decides which of the requested names (plural,
//! singular, short names, kind, list kind) the CRD may have: a name is granted when the CRD
//! already holds it or no CRD of the same group has accepted it. It writes
//! `status.acceptedNames` and the `NamesAccepted` and `Established` conditions, and after a
//! write (which may release a name) or a deletion it requeues every other CRD of the group.
//!
//! A sync reads top to bottom, as upstream's `sync`:
//!
//! 1. The CRD is gone: requeue the rest of its group (its names are free now).
//! 2. Spec names equal the accepted names (semantically): nothing to do.
//! 3. Judge the names against the group's accepted names ([`naming::judge`]).
//! 4. Names and `NamesAccepted` unchanged: nothing to write.
//! 5. Write the status; a `not-found` or `conflict` ends the sync quietly (the change brings
//!    the CRD back), then requeue the rest of the group.
//!
//! Upstream keeps a mutation cache so that its next sync sees its own write; the host's
//! read-your-writes (a write's returned object is in the cache at once) plays that part.
//! Upstream runs one worker because the name reservation is not safe to run concurrently;
//! so does this guest (`concurrency(1)`), and its informer resyncs every 5 minutes, as does
//! this guest's primary watch.
//!
//! The API server already runs the real controller, so this guest normally runs in shadow mode
//! beside it (`examples/naming.yaml`): it changes nothing and reports whether it agrees.

mod crd;
mod naming;

use reconciler_guest::serde_json::{self, Value, json};
use reconciler_guest::{
    Action, Guest, Gvk, HostError, Manifest, ObjectKey, ReconcileError, Request, cluster,
    conditions, gvk, info, lister, permanent, queue,
};

use crate::crd::Crd;
use crate::naming::{NAMES_ACCEPTED, Taken};

struct Naming;

fn crd_kind() -> Gvk {
    gvk!("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
}

impl Guest for Naming {
    fn manifest() -> Manifest {
        // One worker as upstream; a 5 minute resync as the API server's CRD informer factory.
        Manifest::new("naming", crd_kind())
            .concurrency(1)
            .resync_seconds(300)
    }

    fn reconcile(req: Request) -> Result<Action, ReconcileError> {
        sync(&req)?;
        Ok(Action::await_change())
    }
}

reconciler_guest::export!(Naming);

fn sync(req: &Request) -> Result<(), ReconcileError> {
    let key = &req.ref_.name;
    let Some(object) = req.object_value()? else {
        // Deleted: it has freed its names; reconsider the rest of its group.
        return requeue_other_group_crds(key);
    };
    let crd = Crd::parse(&object)
        .map_err(|e| permanent(format!("CustomResourceDefinition {key}: {e}")))?;
    if crd.spec_names.semantically_equal(&crd.accepted_names) {
        return Ok(());
    }

    let others = group_crds()?;
    let judged = naming::judge(&crd, &Taken::in_group(&crd.group, &others));
    if crd.accepted_names == judged.names
        && judged
            .names_accepted
            .equivalent(crd.condition(NAMES_ACCEPTED).as_ref())
    {
        return Ok(());
    }

    let mut updated = crd.clone();
    let now = serde_json::to_value(conditions::now())
        .ok()
        .and_then(|t| t.as_str().map(str::to_owned))
        .unwrap_or_default();
    updated.set_condition(&judged.names_accepted, &now);
    updated.set_condition(&judged.established, &now);
    let patch = json!({
        // Upstream's UpdateStatus carries the version it read; so does this patch, so a
        // concurrent change fails with a conflict instead of being overwritten.
        "metadata": { "resourceVersion": object.pointer("/metadata/resourceVersion") },
        "status": {
            "acceptedNames": judged.names.to_merge_patch(),
            "conditions": updated.conditions,
        },
    });
    match cluster::patch_status_raw(&req.ref_, &patch.to_string()) {
        Ok(_) => {}
        // Deleted or changed meanwhile: the change brings this CRD back.
        Err(HostError::NotFound(_) | HostError::Conflict(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    info!(
        "{key}: NamesAccepted={} {}",
        judged.names_accepted.status, judged.names_accepted.reason
    );
    // The write may have released a name another CRD of the group is waiting for.
    requeue_other_group_crds(key)
}

/// Every CRD in the cache, parsed leniently (only names, group and accepted names are read).
fn group_crds() -> Result<Vec<Crd>, ReconcileError> {
    lister::list(&crd_kind(), None, None)?
        .iter()
        .map(|object| {
            Crd::parse_other(object).map_err(|e| {
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                permanent(format!("CustomResourceDefinition {name} in the cache: {e}"))
            })
        })
        .collect()
}

/// `requeueAllOtherGroupCRDs`: the group is what follows the first `.` of the name.
fn requeue_other_group_crds(name: &str) -> Result<(), ReconcileError> {
    let Some((_, group)) = name.split_once('.') else {
        return Err(permanent(format!(
            "CustomResourceDefinition {name}: a name is <plural>.<group>, this one has no group"
        )));
    };
    let mut requeued = 0;
    for crd in group_crds()? {
        if crd.group == group && crd.name != name {
            queue::enqueue(
                &ObjectKey {
                    namespace: None,
                    name: crd.name,
                },
                None,
            )?;
            requeued += 1;
        }
    }
    if requeued > 0 {
        info!("{name}: requeued {requeued} other CRDs of group {group}");
    }
    Ok(())
}
