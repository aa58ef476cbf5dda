//! Benchmark guest: see `Cargo.toml`. Manifest name `bench`, primary `test.reconciler.dev/v1
//! Widget`; each reconcile computes a status patch with [`logic::status_patch`] and writes it.

use reconciler_guest::{Action, Guest, Manifest, ReconcileError, Request, cluster, gvk, permanent};

pub mod logic;

struct Bench;

impl Guest for Bench {
    fn manifest() -> Manifest {
        // Concurrency left at 0: the host's adaptive limit (its default), as in the controller
        // bench's "default settings" row; a grant's `concurrency` caps it.
        Manifest::new("bench", gvk!("test.reconciler.dev", "v1", "Widget"))
    }

    fn reconcile(req: Request) -> Result<Action, ReconcileError> {
        let Some(object) = &req.object else {
            return Ok(Action::await_change());
        };
        let patch = logic::status_patch(object).map_err(permanent)?;
        cluster::patch_status_raw(&req.ref_, &patch)?;
        Ok(Action::await_change())
    }
}

reconciler_guest::export!(Bench);
