//! The Go controllers the live benches race the host against, each labelled with the release it
//! was built from: the client-go sample-controller (`tools/bench-client-go`) and the
//! controller-runtime reconciler (`tools/bench-controller-runtime`) against each
//! controller-runtime release compared. Every build is its tool's `build.sh`, one binary per
//! release under `~/.cache/reconciler-host`, Go's caches making a second build a link.

use std::path::{Path, PathBuf};
use std::process::Command;

use reconciler_host_tests::repo_root;

use super::sh;

/// The client-go release `tools/bench-client-go/go.mod` pins, as the tables name it.
pub const CLIENT_GO: &str = "client-go v0.37";
/// [`CLIENT_GO`] with `cache.TransformStripManagedFields()`, as the host drops them too.
pub const CLIENT_GO_STRIPPED: &str = "client-go v0.37, managedFields stripped";

/// controller-runtime as a Go team would run it: a release and its settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControllerRuntime {
    /// v0.23.3 with its defaults (the priority queue).
    V023,
    /// v0.25.3 with its defaults (the priority queue).
    V025,
    /// v0.25.3 with its experimental read-your-writes mode
    /// (`client.CacheOptions.EnableReadYourWritesConsistency`).
    V025ReadYourWrites,
}

impl ControllerRuntime {
    /// Every one compared, oldest first.
    pub const ALL: [Self; 3] = [Self::V023, Self::V025, Self::V025ReadYourWrites];

    /// As the tables name it (no comma: `BENCH_CONTESTANTS` is comma-separated).
    pub fn label(self) -> &'static str {
        match self {
            Self::V023 => "controller-runtime v0.23",
            Self::V025 => "controller-runtime v0.25",
            Self::V025ReadYourWrites => "controller-runtime v0.25 read-your-writes",
        }
    }

    /// A part of a namespace name.
    pub fn slug(self) -> &'static str {
        match self {
            Self::V023 => "controller-runtime-v023",
            Self::V025 => "controller-runtime-v025",
            Self::V025ReadYourWrites => "controller-runtime-v025-ryw",
        }
    }
}

/// The built baselines.
pub struct Baselines {
    pub client_go: PathBuf,
    controller_runtime_v023: PathBuf,
    controller_runtime_v025: PathBuf,
}

impl Baselines {
    /// Builds (or finds built) every baseline.
    pub fn build() -> anyhow::Result<Self> {
        let built = |tool: &str, args: &[&str]| -> anyhow::Result<PathBuf> {
            let script = repo_root().join(format!("tools/{tool}/build.sh"));
            Ok(PathBuf::from(sh(Command::new(script).args(args))?.trim()))
        };
        let client_go = built("bench-client-go", &[])?;
        // build.sh keeps one binary per client-go version (`…/v0.37.2/bench-client-go`).
        let version = client_go
            .parent()
            .and_then(Path::file_name)
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default();
        anyhow::ensure!(
            version
                .rsplit_once('.')
                .is_some_and(|(release, _)| CLIENT_GO.ends_with(&format!(" {release}"))),
            "tools/bench-client-go builds client-go {version} but the tables say {CLIENT_GO}: \
             update CLIENT_GO in host/benches/live/baselines.rs"
        );
        Ok(Self {
            client_go,
            controller_runtime_v023: built("bench-controller-runtime", &["v0.23"])?,
            controller_runtime_v025: built("bench-controller-runtime", &["v0.25"])?,
        })
    }

    /// A command starting `which` with the bench's usual flags (`-namespace`, `-workers`) left
    /// to the caller.
    pub fn controller_runtime(&self, which: ControllerRuntime) -> Command {
        let mut command = Command::new(match which {
            ControllerRuntime::V023 => &self.controller_runtime_v023,
            ControllerRuntime::V025 | ControllerRuntime::V025ReadYourWrites => {
                &self.controller_runtime_v025
            }
        });
        if which == ControllerRuntime::V025ReadYourWrites {
            command.arg("-read-your-writes");
        }
        command
    }
}
