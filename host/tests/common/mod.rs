//! Shared by the host's tests: the guest components, built from `guests/` by the project's own
//! build (never checked in).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub mod objects;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

/// Path of a built guest (`widget`, `widget-v2`, `network`, `wrong-world`), building all guests
/// once per test process (`guests/build.sh` is incremental and quick when nothing changed).
pub fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = std::process::Command::new(repo_root().join("guests/build.sh"))
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run guests/build.sh");
        assert!(status.success(), "guests/build.sh failed");
    });
    let path = repo_root()
        .join("target/guests")
        .join(format!("{name}.wasm"));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// A compile cache shared by the test processes, so each guest compiles once per run.
pub fn cache_dir() -> PathBuf {
    repo_root().join("target/test-compile-cache")
}
