//! Access reviews: whether a guest's ServiceAccount may itself `get`, `list` and `watch` every
//! kind its grant lets the guest read, in the namespaces it reads. Reads go through the host's
//! shared informers under the host's identity (one cache per kind, whatever the number of
//! guests), so the API server never sees a guest's read; this review is how the account's
//! RBAC still bounds them. Cost: three `SubjectAccessReview`s per kind read, sent together, at
//! load, on a grant change and every `identity.recheck`.

use std::collections::BTreeSet;

use async_trait::async_trait;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::core::GroupVersionKind;
use serde::Serialize;

use crate::cluster::objects::Gvk;
use crate::config::ServiceAccountRef;

/// The verbs an informer needs of a kind.
pub const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

/// Answers "may `account` do `verb` on `kind` in `namespace`?" (none: every namespace, or a
/// cluster-scoped kind).
#[async_trait]
pub trait AccessReview: Send + Sync {
    async fn allowed(
        &self,
        account: &ServiceAccountRef,
        kind: &Gvk,
        verb: &str,
        namespace: Option<&str>,
    ) -> Result<bool, ReviewError>;
}

/// Why the API server could not be asked whether an account may make a request.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("discovery of {kind}: {source}")]
    Discovery { kind: Gvk, source: kube::Error },
    #[error("SubjectAccessReview for {account} ({verb} {kind}): {source}")]
    Review {
        account: String,
        verb: String,
        kind: Gvk,
        source: kube::Error,
    },
}

/// The last review of one guest's identity, as `/guests` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    /// The account reviewed (`NAMESPACE/NAME`).
    pub account: String,
    /// When it was made (RFC 3339, UTC).
    pub(crate) at: String,
    #[serde(flatten)]
    pub outcome: ReviewOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum ReviewOutcome {
    /// The account may make every read the grant allows (`checks` access reviews).
    Allowed { checks: usize },
    /// Reads the grant allows and the account may not make, each as `verb kind in where`.
    Missing { missing: Vec<String> },
    /// The API server could not be asked; the previous verdict stands.
    Failed { error: String },
}

impl Review {
    fn now(account: &ServiceAccountRef, outcome: ReviewOutcome) -> Self {
        Self {
            account: account.to_string(),
            at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            outcome,
        }
    }
}

/// Reviews every read of `kinds` by `account` within `namespace` (none: all namespaces).
pub async fn review_reads(
    reviewer: &dyn AccessReview,
    account: &ServiceAccountRef,
    kinds: &BTreeSet<Gvk>,
    namespace: Option<&str>,
) -> Review {
    let checks: Vec<(&Gvk, &str)> = kinds
        .iter()
        .flat_map(|kind| READ_VERBS.map(|verb| (kind, verb)))
        .collect();
    let answers = futures::future::join_all(
        checks
            .iter()
            .map(|(kind, verb)| reviewer.allowed(account, kind, verb, namespace)),
    )
    .await;
    let mut missing = Vec::new();
    for ((kind, verb), answer) in checks.iter().zip(answers) {
        match answer {
            Ok(true) => {}
            Ok(false) => {
                let place = namespace.map_or_else(
                    || "all namespaces".to_owned(),
                    |ns| format!("namespace {ns}"),
                );
                missing.push(format!("{verb} {kind} in {place}"));
            }
            Err(error) => {
                let error = error.to_string();
                return Review::now(account, ReviewOutcome::Failed { error });
            }
        }
    }
    let outcome = if missing.is_empty() {
        ReviewOutcome::Allowed {
            checks: checks.len(),
        }
    } else {
        ReviewOutcome::Missing { missing }
    };
    Review::now(account, outcome)
}

/// Reviews through the API server (`authorization.k8s.io/v1` `SubjectAccessReview`, which the
/// host needs `create` on), naming the account's user and groups as impersonation gives them.
#[derive(Clone)]
pub struct ApiServerReview {
    client: kube::Client,
    discovery: crate::cluster::discovery::Resolver,
}

impl ApiServerReview {
    pub(crate) fn new(
        client: kube::Client,
        discovery: crate::cluster::discovery::Resolver,
    ) -> Self {
        Self { client, discovery }
    }
}

#[async_trait]
impl AccessReview for ApiServerReview {
    async fn allowed(
        &self,
        account: &ServiceAccountRef,
        kind: &Gvk,
        verb: &str,
        namespace: Option<&str>,
    ) -> Result<bool, ReviewError> {
        let resolved = self
            .discovery
            .resolve(&self.client, &GroupVersionKind::from(kind))
            .await
            .map_err(|source| ReviewError::Discovery {
                kind: kind.clone(),
                source,
            })?;
        // A cluster-scoped kind is reviewed without a namespace, so a RoleBinding cannot
        // appear to grant it.
        let namespace = namespace.filter(|_| resolved.namespaced);
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(account.username()),
                groups: Some(account.groups()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(kind.group.clone()),
                    version: Some(kind.version.clone()),
                    resource: Some(resolved.resource.plural.clone()),
                    verb: Some(verb.to_owned()),
                    namespace: namespace.map(str::to_owned),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReviewError::Review {
                account: account.to_string(),
                verb: verb.to_owned(),
                kind: kind.clone(),
                source,
            })?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Allows everything but the listed (verb, kind) pairs; fails when told to.
    struct Table {
        denied: Vec<(&'static str, Gvk)>,
        fail: bool,
        asked: Mutex<Vec<(String, Option<String>)>>,
    }

    #[async_trait]
    impl AccessReview for Table {
        async fn allowed(
            &self,
            _: &ServiceAccountRef,
            kind: &Gvk,
            verb: &str,
            namespace: Option<&str>,
        ) -> Result<bool, ReviewError> {
            self.asked
                .lock()
                .unwrap()
                .push((format!("{verb} {kind}"), namespace.map(str::to_owned)));
            if self.fail {
                return Err(ReviewError::Discovery {
                    kind: kind.clone(),
                    source: kube::Error::Service("connection refused".into()),
                });
            }
            Ok(!self.denied.iter().any(|(v, k)| *v == verb && k == kind))
        }
    }

    #[tokio::test]
    async fn every_read_verb_of_every_kind_is_reviewed_and_each_missing_one_named() {
        let account: ServiceAccountRef = "guests/greeter".parse().unwrap();
        let widget = Gvk::new("test.reconciler.dev", "v1", "Widget");
        let kinds = BTreeSet::from([widget.clone(), Gvk::new("", "v1", "ConfigMap")]);
        let table = Table {
            denied: vec![("watch", widget.clone())],
            fail: false,
            asked: Mutex::default(),
        };
        let review = review_reads(&table, &account, &kinds, Some("team")).await;
        assert_eq!(
            review.outcome,
            ReviewOutcome::Missing {
                missing: vec!["watch test.reconciler.dev/v1/Widget in namespace team".into()]
            }
        );
        let asked = table.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 6);
        assert!(asked.iter().all(|(_, ns)| ns.as_deref() == Some("team")));

        let all = Table {
            denied: vec![],
            fail: false,
            asked: Mutex::default(),
        };
        let review = review_reads(&all, &account, &kinds, None).await;
        assert_eq!(review.outcome, ReviewOutcome::Allowed { checks: 6 });

        let down = Table {
            denied: vec![],
            fail: true,
            asked: Mutex::default(),
        };
        let review = review_reads(&down, &account, &kinds, None).await;
        assert!(
            matches!(review.outcome, ReviewOutcome::Failed { ref error } if error.contains("connection refused"))
        );
    }
}
