//! Test guest: describes itself only after a ten-minute WASI sleep. The host gives up on
//! `manifest()` at its load deadline and refuses the file; the directory keeps serving.

use reconciler_guest::{Action, Guest, Manifest, ReconcileError, Request, gvk};

struct SlowManifest;

impl Guest for SlowManifest {
    fn manifest() -> Manifest {
        std::thread::sleep(std::time::Duration::from_mins(10));
        Manifest::new("slow-manifest", gvk!("", "v1", "ConfigMap"))
    }

    fn reconcile(_: Request) -> Result<Action, ReconcileError> {
        Ok(Action::await_change())
    }
}

reconciler_guest::export!(SlowManifest);
