//! Test guest: the right export name, `reconciler:api/reconciler@0.1.0`, and the host's
//! manifest record, but a `reconcile` signature that is not the host's, as a guest built
//! against another revision of `wit/` would have. The host must refuse it at load, before any
//! of its code runs, saying the export does not match: reconciles rely on that check (the host
//! does not repeat it for every instance).

// Generated code: not ours to lint.
#[allow(clippy::all, clippy::pedantic)]
mod bindings {
    wit_bindgen::generate!({
        inline: "
        package reconciler:api@0.1.0;

        interface types {
            record gvk {
                group: string,
                version: string,
                kind: string,
            }
        }

        interface reconciler {
            use types.{gvk};

            variant mapping {
                owner,
                label(string),
            }

            record secondary-watch {
                kind: gvk,
                mapping: mapping,
            }

            record controller-manifest {
                name: string,
                primary: gvk,
                namespace: option<string>,
                label-selector: option<string>,
                secondary: list<secondary-watch>,
                finalizer: option<string>,
                concurrency: u32,
                resync-seconds: u32,
                generation-changed-only: bool,
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
use bindings::reconciler::api::types::Gvk;

struct OldContract;

impl Guest for OldContract {
    fn manifest() -> ControllerManifest {
        ControllerManifest {
            name: "old-contract".to_owned(),
            primary: Gvk {
                group: "test.reconciler.dev".to_owned(),
                version: "v1".to_owned(),
                kind: "Widget".to_owned(),
            },
            namespace: None,
            label_selector: None,
            secondary: Vec::new(),
            finalizer: None,
            concurrency: 1,
            resync_seconds: 0,
            generation_changed_only: false,
        }
    }

    fn reconcile(_key: String) -> bool {
        true
    }
}

bindings::export!(OldContract with_types_in bindings);
