//! Host-side bindings generated from `wit/` (the one source of truth), and conversions between
//! the generated types and the host's own.
//!
//! The bindings are generated for the `network-controller` world, a superset of `controller`:
//! a guest built for `controller` simply does not import `network-backend`, and linking it
//! against the larger set of host functions is fine.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "network-controller",
    // Async on the host side: an import that waits (the API server, a rate limiter) yields,
    // so the runtime's deadline can cancel it (see `runtime`).
    imports: { default: async },
    exports: { default: async },
});

pub(crate) use exports::reconciler::api::reconciler as guest;
pub(crate) use reconciler::api::types;

use crate::cluster::objects::{Gvk, ObjectRef};

impl From<types::Gvk> for Gvk {
    fn from(g: types::Gvk) -> Self {
        Gvk {
            group: g.group,
            version: g.version,
            kind: g.kind,
        }
    }
}

impl From<Gvk> for types::Gvk {
    fn from(g: Gvk) -> Self {
        types::Gvk {
            group: g.group,
            version: g.version,
            kind: g.kind,
        }
    }
}

impl From<types::ObjectRef> for ObjectRef {
    fn from(r: types::ObjectRef) -> Self {
        ObjectRef {
            kind: r.kind.into(),
            namespace: r.namespace,
            name: r.name,
        }
    }
}

impl From<ObjectRef> for types::ObjectRef {
    fn from(r: ObjectRef) -> Self {
        types::ObjectRef {
            kind: r.kind.into(),
            namespace: r.namespace,
            name: r.name,
        }
    }
}

/// Bindings of the `watching-controller` world, for its one addition: the optional `watches`
/// export. Everything the two worlds share maps to the bindings above, so a guest's types are
/// one set of Rust types whichever world it was built for.
pub(crate) mod watching {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "watching-controller",
        imports: { default: async },
        exports: { default: async },
        with: {
            "reconciler:api/types": super::reconciler::api::types,
            "reconciler:api/lister": super::reconciler::api::lister,
            "reconciler:api/cluster": super::reconciler::api::cluster,
            "reconciler:api/queue": super::reconciler::api::queue,
            "reconciler:api/log": super::reconciler::api::log,
        },
    });

    pub(crate) use exports::reconciler::api::watches;
}

/// Bindings of the `indexing-controller` world, for its one addition over `watching-controller`:
/// the optional `indexes` export (computed indexes). Types shared with the worlds above map to
/// their bindings, as in [`watching`].
pub(crate) mod indexing {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "indexing-controller",
        imports: { default: async },
        exports: { default: async },
        with: {
            "reconciler:api/types": super::reconciler::api::types,
            "reconciler:api/lister": super::reconciler::api::lister,
            "reconciler:api/cluster": super::reconciler::api::cluster,
            "reconciler:api/queue": super::reconciler::api::queue,
            "reconciler:api/log": super::reconciler::api::log,
            "reconciler:api/watches": super::watching::exports::reconciler::api::watches,
        },
    });

    pub(crate) use exports::reconciler::api::indexes;
}
