//! Test guest: the right export name, `reconciler:api/reconciler@0.1.0`, with a manifest record
//! and a `reconcile` signature that are not the host's. The host must refuse it at load, before
//! any of its code runs, saying the export does not match.

// Generated code: not ours to lint.
#[allow(clippy::all, clippy::pedantic)]
mod bindings {
    wit_bindgen::generate!({
        inline: "
        package reconciler:api@0.1.0;

        interface reconciler {
            record controller-manifest {
                name: string,
            }
            manifest: func() -> controller-manifest;
            reconcile: func(key: string) -> bool;
        }

        world old-contract {
            export reconciler;
        }
    ",
    });
}

use bindings::exports::reconciler::api::reconciler::{ControllerManifest, Guest};

struct OldContract;

impl Guest for OldContract {
    fn manifest() -> ControllerManifest {
        ControllerManifest {
            name: "old-contract".to_owned(),
        }
    }

    fn reconcile(_key: String) -> bool {
        true
    }
}

bindings::export!(OldContract with_types_in bindings);
