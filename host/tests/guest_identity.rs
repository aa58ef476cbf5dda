//! Guests with their own ServiceAccount in the guest set: admitted only once an access review
//! says the account may make every read the grant allows, unloaded when a recheck finds a read
//! lost, loaded again once it is back, kept running while the reviewer cannot be reached, and
//! refused without an account when the host requires one. The reviewer here is a table; the
//! API server's own `SubjectAccessReview`s are exercised in `tests/tests/identity.rs`.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use reconciler_host::cluster::objects::Gvk;
use reconciler_host::config::{HostConfig, ServiceAccountRef};
use reconciler_host::sandbox::identity::{AccessReview, ReviewError, ReviewOutcome};
use reconciler_host::sandbox::runtime::{Runtime, RuntimeOptions};
use reconciler_host::sandbox::shadow::Shadows;
use reconciler_host::supply::guest_set::{Directory, FileState, FileStatus, GuestEvent, Guests};

/// Allows every review but the (verb, kind) pairs listed; answers with an error when `down`.
#[derive(Default)]
struct Table {
    denied: Mutex<BTreeSet<(String, Gvk)>>,
    down: Mutex<bool>,
    asked_as: Mutex<BTreeSet<String>>,
}

#[async_trait]
impl AccessReview for Table {
    async fn allowed(
        &self,
        account: &ServiceAccountRef,
        kind: &Gvk,
        verb: &str,
        _namespace: Option<&str>,
    ) -> Result<bool, ReviewError> {
        self.asked_as.lock().insert(account.to_string());
        if *self.down.lock() {
            return Err(ReviewError::Discovery {
                kind: kind.clone(),
                source: kube::Error::Service("connection refused".into()),
            });
        }
        Ok(!self
            .denied
            .lock()
            .contains(&(verb.to_owned(), kind.clone())))
    }
}

fn widget_config(extra: &str) -> String {
    format!(
        "{extra}guests:\n  widget:\n    serviceAccount: guests/widget\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]\n"
    )
}

fn guests(dir: &Path, config: &str, table: Option<Arc<Table>>) -> Arc<Guests> {
    let runtime = Arc::new(
        Runtime::new(&RuntimeOptions {
            cache_dir: Some(common::cache_dir()),
            ..RuntimeOptions::default()
        })
        .unwrap(),
    );
    let config = Arc::new(HostConfig::parse(config, "host.yaml".as_ref()).unwrap());
    let guests = Guests::new(
        Directory::new(dir.to_owned()),
        runtime,
        config,
        None,
        Arc::new(Shadows::new(None)),
    );
    if let Some(table) = table {
        guests.set_access_review(table, Some("team".into()));
    }
    guests
}

fn status(guests: &Guests, file: &Path) -> FileStatus {
    guests
        .statuses()
        .into_iter()
        .find(|s| s.file == file)
        .unwrap_or_else(|| panic!("{} has a status", file.display()))
}

fn refusal(guests: &Guests, file: &Path) -> String {
    match status(guests, file).state {
        FileState::Failed(reason) => reason,
        other => panic!("{} must be refused: {other:?}", file.display()),
    }
}

#[test]
fn an_identity_is_admitted_with_its_reads_and_unloaded_when_it_loses_one() {
    // Reviews are API calls the set makes from the blocking context it judges in.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let dir = tempfile::tempdir().unwrap();
    let table = Arc::new(Table::default());
    let widget = Gvk::new("test.reconciler.dev", "v1", "Widget");
    let configmap = Gvk::new("", "v1", "ConfigMap");
    table.denied.lock().insert(("watch".into(), widget.clone()));
    let guests = guests(dir.path(), &widget_config(""), Some(table.clone()));
    let mut events = guests.subscribe();
    let file = dir.path().join("widget.wasm");
    std::fs::copy(common::guest("widget"), &file).unwrap();

    // The account may not watch Widgets: refused at load, naming the verb, kind and namespace.
    guests.rescan();
    let reason = refusal(&guests, &file);
    assert!(
        reason.contains("reads its ServiceAccount guests/widget may not make: watch test.reconciler.dev/v1/Widget in namespace team"),
        "{reason}"
    );
    assert!(guests.active().is_empty());
    let review = status(&guests, &file)
        .access_review
        .expect("the review is shown");
    assert_eq!(review.account, "guests/widget");
    assert!(matches!(review.outcome, ReviewOutcome::Missing { .. }));
    assert_eq!(
        *table.asked_as.lock(),
        BTreeSet::from(["guests/widget".to_owned()])
    );

    // RBAC granted later: the next recheck loads it.
    table.denied.lock().clear();
    guests.recheck_identities();
    assert!(matches!(events.try_recv(), Ok(GuestEvent::Loaded(_))));
    let shown = status(&guests, &file);
    assert_eq!(shown.state, FileState::Loaded);
    assert_eq!(shown.service_account.as_deref(), Some("guests/widget"));
    assert_eq!(
        shown.access_review.map(|r| r.outcome),
        Some(ReviewOutcome::Allowed { checks: 6 })
    );

    // The reviewer unreachable: the guest keeps running on its last verdict.
    *table.down.lock() = true;
    guests.recheck_identities();
    assert!(events.try_recv().is_err(), "nothing changes");
    assert_eq!(guests.active().len(), 1);
    assert!(matches!(
        status(&guests, &file).access_review.map(|r| r.outcome),
        Some(ReviewOutcome::Failed { .. })
    ));

    // A read revoked: unloaded like a withdrawn grant.
    *table.down.lock() = false;
    table.denied.lock().insert(("list".into(), configmap));
    guests.recheck_identities();
    assert!(matches!(events.try_recv(), Ok(GuestEvent::Unloaded(name)) if name == "widget"));
    assert!(guests.active().is_empty());
    let reason = refusal(&guests, &file);
    assert!(
        reason.contains("list v1/ConfigMap in namespace team"),
        "{reason}"
    );
}

#[test]
fn a_host_that_requires_identities_refuses_a_guest_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = "identity: {required: true}\nguests:\n  widget:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]\n";
    let guests = guests(dir.path(), config, None);
    let file = dir.path().join("widget.wasm");
    std::fs::copy(common::guest("widget"), &file).unwrap();
    guests.rescan();
    let reason = refusal(&guests, &file);
    assert!(
        reason.contains("names no ServiceAccount and the host requires one for every guest (identity.required): add serviceAccount: NAMESPACE/NAME to guests.widget.serviceAccount"),
        "{reason}"
    );

    // With an account (and no reviewer: the offline judge), it loads.
    let other = tempfile::tempdir().unwrap();
    let guests = self::guests(
        other.path(),
        &widget_config("identity: {required: true}\n"),
        None,
    );
    std::fs::copy(common::guest("widget"), other.path().join("widget.wasm")).unwrap();
    guests.rescan();
    assert_eq!(guests.active().len(), 1);
}

#[test]
fn a_reconcilers_new_reads_refused_by_its_account_load_once_granted_while_the_old_ones_run() {
    use reconciler_host::config::Grant;
    use reconciler_host::supply::guest_set::Verdict;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let allow = "reconcilers:\n  allow:\n    serviceAccounts: [team/*]\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap, v1/Secret]\n    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]\n";
    let source = common::objects::Objects::default();
    let guests = Guests::new(
        source.clone(),
        Arc::new(
            Runtime::new(&RuntimeOptions {
                cache_dir: Some(common::cache_dir()),
                ..RuntimeOptions::default()
            })
            .unwrap(),
        ),
        Arc::new(HostConfig::parse(allow, "host.yaml".as_ref()).unwrap()),
        None,
        Arc::new(Shadows::new(None)),
    );
    let table = Arc::new(Table::default());
    guests.set_access_review(table.clone(), None);
    let bytes = std::fs::read(common::guest("widget")).unwrap();
    let grant = |reads: &str| -> Grant {
        serde_yaml::from_str(&format!(
            "{{serviceAccount: team/widget, read: [{reads}], write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]}}"
        ))
        .unwrap()
    };
    let declare = |generation: i64, grant: Grant| {
        source
            .items
            .lock()
            .insert("widget".into(), (generation, grant, bytes.clone()));
        guests.rescan();
    };
    let running_reads = || {
        guests
            .active()
            .first()
            .map(|g| g.grant.read.len())
            .unwrap_or_default()
    };
    let last = || source.verdicts.lock().last().cloned().unwrap();

    declare(1, grant("test.reconciler.dev/v1/Widget, v1/ConfigMap"));
    assert!(matches!(last(), (_, 1, Verdict::Loaded { .. })));

    // Generation 2 also reads Secrets, which the account may not get: refused, 1 keeps running.
    table
        .denied
        .lock()
        .insert(("get".into(), Gvk::new("", "v1", "Secret")));
    declare(
        2,
        grant("test.reconciler.dev/v1/Widget, v1/ConfigMap, v1/Secret"),
    );
    let (_, generation, verdict) = last();
    assert!(
        generation == 2
            && matches!(&verdict, Verdict::Refused { cause, kept: Some(_), .. } if *cause == "ReadsBeyondIdentity"),
        "{verdict:?}"
    );
    assert_eq!(running_reads(), 2);

    // Granted: the recheck loads generation 2, not just re-reviews generation 1.
    table.denied.lock().clear();
    guests.recheck_identities();
    assert!(
        matches!(last(), (_, 2, Verdict::Loaded { .. })),
        "{:?}",
        last()
    );
    assert_eq!(running_reads(), 3);
}
