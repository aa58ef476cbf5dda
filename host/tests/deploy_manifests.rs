//! The RBAC committed with the manifests under `deploy/` is exactly what `reconciler-host rbac`
//! prints for the configuration beside it: regenerated, never edited by hand.

mod common;

use std::process::Command;

#[test]
fn the_committed_rbac_is_what_rbac_prints_for_its_configuration() {
    let repo = common::repo_root();
    for overlay in ["deploy/local", "deploy/linux"] {
        let output = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
            .current_dir(&repo)
            .args(["rbac", "--config", &format!("{overlay}/host.yaml")])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let committed = std::fs::read_to_string(repo.join(overlay).join("rbac.yaml")).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            committed,
            "{overlay}/rbac.yaml is stale: reconciler-host rbac --config {overlay}/host.yaml > {overlay}/rbac.yaml"
        );
    }
}
