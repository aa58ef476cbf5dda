//! The SDKs' side of the optional `watches` export, as the host reads it (`reconciler-host
//! check`): a guest that declares watches with the SDK is a `watching-controller` whose watches
//! join its manifest's secondaries, mapping for mapping; a guest built the usual way stays a
//! `controller` with none. Rust: `export_watching!` (`guests/testing/watcher`) against `export!`
//! (`guests/testing/widget`); Python: `export_watches` (`guests/python/mirror`) against `export`
//! alone (`guests/python/greeter`); Go, JavaScript and C: their ports of the watcher
//! (`guests/{go,js,c}/watcher`) against their greeters.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use reconciler_host_tests::{Profile, guest_component};
use serde_json::{Value, json};

/// Grants every kind the guests below read, so `check` loads each under its own name.
const GRANTS: &str = r"
guests:
  watcher:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap, v1/Secret, v1/Namespace, v1/ServiceAccount]
    write: [test.reconciler.dev/v1/Widget/status]
  widget:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
  mirror:
    read: [mirror.reconciler.dev/v1alpha1/Mirror, v1/ConfigMap, v1/Namespace]
    write: [mirror.reconciler.dev/v1alpha1/Mirror, mirror.reconciler.dev/v1alpha1/Mirror/status, v1/ConfigMap]
  greeter:
    read: [test.reconciler.dev/v1/Widget]
    write: [test.reconciler.dev/v1/Widget/status]
";

/// `reconciler-host check` of the build `component`, deployed as `<name>.wasm`: its report.
fn check(component: &str, name: &str) -> Result<Value> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join(format!("{name}.wasm"));
    std::fs::copy(guest_component(component)?, &file)?;
    let config = dir.path().join("host.yaml");
    std::fs::write(&config, GRANTS)?;
    let output = Command::new(Profile::Debug.host_binary())
        .arg("check")
        .arg(&file)
        .arg("--config")
        .arg(&config)
        .output()
        .context("running reconciler-host check")?;
    ensure!(
        output.status.success(),
        "check {component}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn kind(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

#[test]
fn a_rust_guest_exported_with_export_watching_declares_each_mapping_and_export_does_not()
-> Result<()> {
    let watcher = check("watcher", "watcher")?;
    assert_eq!(watcher["world"], "watching-controller");
    assert_eq!(
        watcher["manifest"]["secondary"],
        json!([
            {"kind": kind("", "v1", "ConfigMap"), "mapping": "function"},
            {"kind": kind("", "v1", "Secret"),
             "mapping": {"field": {"path": "spec.secretName", "value": "name"}}},
            {"kind": kind("", "v1", "Namespace"),
             "mapping": {"field": {"path": "spec.namespaces[*]", "value": "name"}}},
            {"kind": kind("", "v1", "ServiceAccount"),
             "labelSelector": "test.reconciler.dev/owner-name",
             "mapping": {"ownerLabels": {"name": "test.reconciler.dev/owner-name",
                                         "namespace": "test.reconciler.dev/owner-namespace"}}},
        ])
    );
    let widget = check("widget", "widget")?;
    assert_eq!(widget["world"], "controller", "{widget}");
    Ok(())
}

#[test]
fn a_python_guest_exported_with_export_watches_declares_them_and_export_alone_does_not()
-> Result<()> {
    let mirror = check("mirror-python", "mirror")?;
    assert_eq!(mirror["world"], "watching-controller");
    assert_eq!(
        mirror["manifest"]["secondary"],
        json!([
            {"kind": kind("", "v1", "ConfigMap"),
             "mapping": {"field": {"path": "spec.source", "value": "name"}}},
            {"kind": kind("", "v1", "ConfigMap"),
             "labelSelector": "mirror.reconciler.dev/owner-name",
             "mapping": {"ownerLabels": {"name": "mirror.reconciler.dev/owner-name",
                                         "namespace": "mirror.reconciler.dev/owner-namespace"}}},
            {"kind": kind("", "v1", "Namespace"),
             "mapping": {"field": {"path": "spec.targetNamespaces[*]", "value": "name"}}},
        ])
    );
    let greeter = check("greeter-python", "greeter")?;
    assert_eq!(greeter["world"], "controller", "{greeter}");
    Ok(())
}

#[test]
fn the_go_js_and_c_watchers_declare_what_the_rust_one_does_and_their_greeters_none() -> Result<()> {
    let rust = check("watcher", "watcher")?;
    for (port, greeter) in [
        ("watcher-go", "greeter-go"),
        ("watcher-js", "greeter-js"),
        ("watcher-c", "greeter-c"),
    ] {
        let watcher = check(port, "watcher")?;
        assert_eq!(watcher["world"], "watching-controller", "{port}: {watcher}");
        assert_eq!(
            watcher["manifest"]["secondary"], rust["manifest"]["secondary"],
            "{port} declares other watches than the Rust watcher"
        );
        let greeter = check(greeter, "greeter")?;
        assert_eq!(greeter["world"], "controller", "{greeter}");
        assert_eq!(greeter["manifest"]["secondary"], json!([]), "{greeter}");
    }
    Ok(())
}
