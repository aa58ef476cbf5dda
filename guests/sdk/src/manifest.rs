//! Building a [`Manifest`] and [`Watch`]es: what a guest asks the host to watch.

use crate::{
    ComputedIndex, FieldIndex, Gvk, IndexValue, Lookup, Manifest, Mapping, OwnerLabels,
    SecondaryWatch, Watch, WatchMapping,
};

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

impl Watch {
    /// Objects of `kind` that name a primary in their `metadata.ownerReferences` (change that
    /// with one of the `by_` methods), in the primary watch's namespace (or every namespace),
    /// whatever their labels.
    #[must_use]
    pub fn new(kind: Gvk) -> Self {
        Watch {
            kind,
            mapping: WatchMapping::Owner,
            namespace: None,
            label_selector: None,
        }
    }

    /// Map through `metadata.ownerReferences` entries whose kind is the primary kind (the
    /// default).
    #[must_use]
    pub fn by_owner(mut self) -> Self {
        self.mapping = WatchMapping::Owner;
        self
    }

    /// Map through `label`, whose value is the primary's name in the object's namespace.
    #[must_use]
    pub fn by_label(mut self, label: impl Into<String>) -> Self {
        self.mapping = WatchMapping::Label(label.into());
        self
    }

    /// Map through two labels naming the primary: `namespace_label`'s value its namespace,
    /// `name_label`'s its name. For children that can carry no owner reference: in another
    /// namespace, or cluster-scoped. A label value holds at most 63 characters, so this names
    /// primaries whose names are that short.
    #[must_use]
    pub fn by_owner_labels(
        mut self,
        namespace_label: impl Into<String>,
        name_label: impl Into<String>,
    ) -> Self {
        self.mapping = WatchMapping::OwnerLabels(OwnerLabels {
            namespace: Some(namespace_label.into()),
            name: name_label.into(),
        });
        self
    }

    /// Map through one label naming a cluster-scoped primary.
    #[must_use]
    pub fn by_owner_name_label(mut self, name_label: impl Into<String>) -> Self {
        self.mapping = WatchMapping::OwnerLabels(OwnerLabels {
            namespace: None,
            name: name_label.into(),
        });
        self
    }

    /// Map to the primaries whose `field` equals the object's `value`: an index the host keeps
    /// over its primary cache, so no guest call per event. `field` is a path into the primary,
    /// `[*]` for every item of a list: `spec.source`, `spec.targetNamespaces[*]`,
    /// `spec.refs[*].name`; a value that is not a string is not indexed.
    #[must_use]
    pub fn by_field(mut self, field: impl Into<String>, value: IndexValue) -> Self {
        self.mapping = WatchMapping::Field(FieldIndex {
            field: field.into(),
            value,
        });
        self
    }

    /// Map through the guest's [`crate::Watches::map`], called once per event of the kind in a
    /// fresh instance: the most flexible mapping, and the dearest.
    #[must_use]
    pub fn by_function(mut self) -> Self {
        self.mapping = WatchMapping::Function;
        self
    }

    /// Watch this namespace only (ignored for cluster-scoped kinds). Without it: the primary
    /// watch's namespace when the manifest restricts it, every namespace otherwise.
    #[must_use]
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Take only events of objects matching this label selector (`app=web,tier!=db`). The
    /// events come from the lister's cache of the kind, which this does not narrow: the
    /// grant's `readSelectors` for the kind bound what the host caches.
    #[must_use]
    pub fn selecting(mut self, label_selector: impl Into<String>) -> Self {
        self.label_selector = Some(label_selector.into());
        self
    }
}

impl ComputedIndex {
    /// Index `name` over the primaries, looked up by the name of each object of `kind` that
    /// changes (among the primaries of its namespace), in the primary watch's namespace (or
    /// every namespace), whatever its labels. `name`: 1-63 lowercase letters, digits and `-`.
    #[must_use]
    pub fn new(name: impl Into<String>, kind: Gvk) -> Self {
        ComputedIndex {
            name: name.into(),
            kind,
            lookup: Lookup::Name,
            namespace: None,
            label_selector: None,
        }
    }

    /// Look up by the watched object's namespace, or its `namespace/name`, instead of its name
    /// ([`Lookup`]).
    #[must_use]
    pub fn by(mut self, lookup: Lookup) -> Self {
        self.lookup = lookup;
        self
    }

    /// Watch this namespace only, as [`Watch::in_namespace`].
    #[must_use]
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Take only events of objects matching this label selector, as [`Watch::selecting`].
    #[must_use]
    pub fn selecting(mut self, label_selector: impl Into<String>) -> Self {
        self.label_selector = Some(label_selector.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gvk;

    #[test]
    fn a_computed_index_looks_up_names_everywhere_unless_told_otherwise() {
        let i = ComputedIndex::new("configmaps", gvk!("", "v1", "ConfigMap"));
        assert_eq!(
            (i.name.as_str(), &i.kind, i.lookup),
            ("configmaps", &gvk!("", "v1", "ConfigMap"), Lookup::Name)
        );
        assert_eq!((&i.namespace, &i.label_selector), (&None, &None));
        let i = i
            .by(Lookup::NamespacedName)
            .in_namespace("apps")
            .selecting("app=web");
        assert_eq!(i.lookup, Lookup::NamespacedName);
        assert_eq!(i.namespace.as_deref(), Some("apps"));
        assert_eq!(i.label_selector.as_deref(), Some("app=web"));
    }

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

    #[test]
    fn a_watch_maps_through_owner_references_everywhere_unless_told_otherwise() {
        let w = Watch::new(gvk!("", "v1", "ConfigMap"));
        assert_eq!(w.kind, gvk!("", "v1", "ConfigMap"));
        assert_eq!(w.mapping, WatchMapping::Owner);
        assert_eq!((&w.namespace, &w.label_selector), (&None, &None));
    }

    #[test]
    fn each_mapping_builder_sets_its_case_and_the_last_one_wins() {
        let kind = gvk!("", "v1", "ConfigMap");
        let field = Watch::new(kind.clone()).by_field("spec.targetNamespaces[*]", IndexValue::Name);
        assert_eq!(
            field.mapping,
            WatchMapping::Field(FieldIndex {
                field: "spec.targetNamespaces[*]".into(),
                value: IndexValue::Name,
            })
        );
        let owner_labels = Watch::new(kind.clone()).by_owner_labels("o/ns", "o/name");
        assert_eq!(
            owner_labels.mapping,
            WatchMapping::OwnerLabels(OwnerLabels {
                namespace: Some("o/ns".into()),
                name: "o/name".into(),
            })
        );
        let cluster = Watch::new(kind.clone()).by_owner_name_label("o/name");
        assert_eq!(
            cluster.mapping,
            WatchMapping::OwnerLabels(OwnerLabels {
                namespace: None,
                name: "o/name".into(),
            })
        );
        assert_eq!(
            Watch::new(kind.clone()).by_label("app").mapping,
            WatchMapping::Label("app".into())
        );
        assert_eq!(
            Watch::new(kind.clone()).by_function().mapping,
            WatchMapping::Function
        );
        assert_eq!(
            Watch::new(kind).by_function().by_owner().mapping,
            WatchMapping::Owner
        );
    }

    #[test]
    fn a_watch_keeps_its_namespace_and_selector_whatever_the_mapping() {
        let w = Watch::new(gvk!("", "v1", "Secret"))
            .in_namespace("infra")
            .selecting("example.com/owner-name")
            .by_field("spec.secretRef", IndexValue::NamespacedName);
        assert_eq!(w.namespace.as_deref(), Some("infra"));
        assert_eq!(w.label_selector.as_deref(), Some("example.com/owner-name"));
        assert!(matches!(
            w.mapping,
            WatchMapping::Field(FieldIndex {
                value: IndexValue::NamespacedName,
                ..
            })
        ));
    }
}
