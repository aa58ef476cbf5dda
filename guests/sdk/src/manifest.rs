//! Building a [`Manifest`]: what a guest asks the host to watch.

use crate::{Gvk, Manifest, Mapping, SecondaryWatch};

impl Manifest {
    /// A guest named `name` reconciling every object of `primary` in all namespaces, with no
    /// secondaries, no finalizer, the host's default concurrency and no resync.
    pub fn new(name: impl Into<String>, primary: Gvk) -> Self {
        Manifest {
            name: name.into(),
            primary,
            namespace: None,
            label_selector: None,
            secondary: Vec::new(),
            finalizer: None,
            concurrency: 0,
            resync_seconds: 0,
            generation_changed_only: false,
        }
    }

    /// Watch only this namespace.
    #[must_use]
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Watch only primaries matching this label selector.
    #[must_use]
    pub fn selecting(mut self, label_selector: impl Into<String>) -> Self {
        self.label_selector = Some(label_selector.into());
        self
    }

    /// Also reconcile a primary when one of its `kind` objects changes, found through
    /// `mapping` (owner references, or a label naming the primary).
    #[must_use]
    pub fn watches(mut self, kind: Gvk, mapping: Mapping) -> Self {
        self.secondary.push(SecondaryWatch { kind, mapping });
        self
    }

    /// The host keeps this finalizer on every primary until a reconcile with `deleting`
    /// succeeds, so external state is cleaned up before the object goes.
    #[must_use]
    pub fn finalizer(mut self, finalizer: impl Into<String>) -> Self {
        self.finalizer = Some(finalizer.into());
        self
    }

    /// At most `n` keys reconciled at once (0 = host default).
    #[must_use]
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = n;
        self
    }

    /// Re-reconcile every key this often even without changes, e.g. to repair drift in
    /// external state (0 = never).
    #[must_use]
    pub fn resync_seconds(mut self, seconds: u32) -> Self {
        self.resync_seconds = seconds;
        self
    }

    /// Reconcile a primary only when its `metadata.generation` changes (its spec, or its
    /// deletion), not on status, label or annotation writes: a guest that records something
    /// new in its status on every reconcile then does not wake itself. Creation, deletion,
    /// secondaries, requeues and resync still reconcile.
    #[must_use]
    pub fn generation_changed_only(mut self) -> Self {
        self.generation_changed_only = true;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gvk;

    #[test]
    fn builder_sets_exactly_what_was_asked() {
        let m = Manifest::new("widget", gvk!("test.reconciler.dev", "v1", "Widget"))
            .watches(gvk!("", "v1", "ConfigMap"), Mapping::Owner)
            .finalizer("test.reconciler.dev/cleanup")
            .concurrency(2);
        assert_eq!(m.name, "widget");
        assert_eq!(m.secondary.len(), 1);
        assert_eq!(m.secondary[0].mapping, Mapping::Owner);
        assert_eq!(m.finalizer.as_deref(), Some("test.reconciler.dev/cleanup"));
        assert_eq!((m.concurrency, m.resync_seconds), (2, 0));
        assert!(!m.generation_changed_only);
        assert_eq!((&m.namespace, &m.label_selector), (&None, &None));
        assert!(m.generation_changed_only().generation_changed_only);
    }
}
