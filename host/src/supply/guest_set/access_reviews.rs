//! The access reviews of guests' own ServiceAccounts ([`crate::sandbox::identity`]), as the guest set
//! makes them: at load, when a grant changes what it reads or whom it names, and on every
//! recheck; the last review of each item is kept for `/guests`. A review is an API call: the
//! set makes it from the blocking context it judges in, on the host's runtime.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::grants::{ActiveGuest, IdentityError};
use crate::sandbox::identity::{AccessReview, Review, ReviewOutcome, review_reads};

/// Who reviews, and the namespace guests read in (the host's `--watch-namespace`).
struct Reviewer {
    review: Arc<dyn AccessReview>,
    namespace: Option<String>,
}

#[derive(Default)]
pub(super) struct Reviews {
    reviewer: RwLock<Option<Reviewer>>,
    /// The last review by item name.
    last: Mutex<BTreeMap<String, Review>>,
}

impl Reviews {
    pub(super) fn set_reviewer(&self, review: Arc<dyn AccessReview>, namespace: Option<String>) {
        *self.reviewer.write() = Some(Reviewer { review, namespace });
    }

    /// Reviews the reads of `active` (from item `item`) against its ServiceAccount, if it names
    /// one and a reviewer is set; the review is kept either way. Call from a blocking context.
    pub(super) fn check(&self, item: &str, active: &ActiveGuest) -> Result<(), IdentityError> {
        let Some(account) = &active.grant.service_account else {
            self.last.lock().remove(item);
            return Ok(());
        };
        let review = {
            let reviewer = self.reviewer.read();
            let Some(reviewer) = reviewer.as_ref() else {
                return Ok(());
            };
            // A namespaced Reconciler's guest reads in its namespace only.
            let namespace = active.tenant().or(reviewer.namespace.as_deref());
            let future = review_reads(
                reviewer.review.as_ref(),
                account,
                &active.grant.read,
                namespace,
            );
            tokio::runtime::Handle::current().block_on(future)
        };
        let outcome = review.outcome.clone();
        self.last.lock().insert(item.to_owned(), review);
        match outcome {
            ReviewOutcome::Allowed { .. } => Ok(()),
            ReviewOutcome::Missing { missing } => Err(IdentityError::ReadsBeyondIdentity {
                file: item.to_owned(),
                guest: active.name().to_owned(),
                account: account.to_string(),
                missing: missing.join(", "),
            }),
            ReviewOutcome::Failed { error } => Err(IdentityError::ReviewFailed {
                file: item.to_owned(),
                account: account.to_string(),
                error,
            }),
        }
    }

    pub(super) fn last(&self, item: &str) -> Option<Review> {
        self.last.lock().get(item).cloned()
    }

    /// The items whose last review did not allow them.
    pub(super) fn not_allowed(&self) -> BTreeSet<String> {
        self.last
            .lock()
            .iter()
            .filter(|(_, r)| !matches!(r.outcome, ReviewOutcome::Allowed { .. }))
            .map(|(item, _)| item.clone())
            .collect()
    }

    pub(super) fn forget(&self, item: &str) {
        self.last.lock().remove(item);
    }
}
