//! `reconciler-host new` for the languages whose build has component steps (C and Go: bindings,
//! `component`, Go's `preinit`): the project, written outside this repository, builds with
//! `reconciler-host` as the one binary of this project on `PATH` (its `componentize` takes those
//! steps), and what it builds passes `check` against the project's grant and reproduces the
//! project's fixture, alone and through `reconciler-host test`. The languages' toolchains are the
//! machine's, as for `guests/build.sh`.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// The binaries a guest author might have installed from this project: none but the host under
/// test may be found, or a build that still needed one would pass here.
const OTHER_BINARIES: [&str; 2] = ["reconciler-host", "reconciler-componentize"];

/// `PATH` with `bin` (holding the host under test) first and every directory that holds one of
/// [`OTHER_BINARIES`] (a cargo target directory, `~/.cargo/bin`) left out.
fn path_with_the_host_alone(bin: &Path) -> OsString {
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let kept = std::env::split_paths(&inherited)
        .filter(|dir| !OTHER_BINARIES.iter().any(|name| dir.join(name).exists()));
    std::env::join_paths(std::iter::once(bin.to_owned()).chain(kept))
        .expect("PATH entries without ':'")
}

fn run(command: &mut Command, what: &str) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Scaffolds `lang` as guest `hello` in a new temporary directory, builds it (pre-initialised
/// when `preinit`) with only the host under test on `PATH`, and checks and runs what it built.
fn builds_with_the_host_alone(lang: &str, preinit: bool) {
    let temp = tempfile::tempdir().expect("a temporary directory");
    let bin = temp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_reconciler-host"),
        bin.join("reconciler-host"),
    )
    .unwrap();
    let path = path_with_the_host_alone(&bin);
    let host = || {
        let mut command = Command::new("reconciler-host");
        command.env("PATH", &path).env_remove("RECONCILER_HOST");
        command
    };
    let project = temp.path().join("hello");
    run(
        host()
            .args(["new", "--lang", lang, "hello"])
            .current_dir(temp.path()),
        "reconciler-host new",
    );
    if preinit {
        std::fs::write(project.join("preinit"), "").unwrap();
    }

    let built = run(
        Command::new(project.join("build.sh"))
            .current_dir(&project)
            .env("PATH", &path)
            .env_remove("RECONCILER_HOST"),
        &format!("the {lang} project's build.sh"),
    );
    assert!(
        String::from_utf8_lossy(&built.stdout).contains("hello.wasm"),
        "{}",
        String::from_utf8_lossy(&built.stdout)
    );

    let checked = run(
        host()
            .args(["check", "hello.wasm", "--config", "host.yaml"])
            .current_dir(&project),
        "reconciler-host check",
    );
    let report: Value = serde_json::from_slice(&checked.stdout).expect("check prints JSON");
    assert_eq!(report["manifest"]["name"], "hello", "{report}");
    assert_eq!(report["grant"]["granted"], true, "{report}");

    let reconciled = run(
        host()
            .args([
                "reconcile",
                "--guest",
                "hello.wasm",
                "--objects",
                "fixtures/hello/objects.yaml",
                "--kind",
                "test.reconciler.dev/v1/Widget",
                "--key",
                "demo/w1",
                "--now",
                "2026-01-02T03:04:05Z",
            ])
            .current_dir(&project),
        "reconciler-host reconcile",
    );
    let actual: Value = serde_json::from_slice(&reconciled.stdout).expect("reconcile prints JSON");
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("fixtures/hello/expected.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(actual, expected, "the {lang} project's fixture");

    // Every case of the project, as its README runs them.
    let tested = run(
        host()
            .args(["test", "--config", "host.yaml"])
            .current_dir(&project),
        "reconciler-host test",
    );
    let report = String::from_utf8_lossy(&tested.stdout);
    assert!(
        report.contains("fixtures/hello ... ok")
            && report.ends_with("test result: ok. 1 passed; 0 failed; 0 blessed\n"),
        "{report}"
    );
}

#[test]
fn a_scaffolded_c_project_builds_with_reconciler_host_alone() {
    builds_with_the_host_alone("c", false);
}

#[test]
fn a_scaffolded_go_project_builds_with_reconciler_host_alone() {
    builds_with_the_host_alone("go", false);
}

#[test]
fn a_scaffolded_go_project_builds_pre_initialised_with_reconciler_host_alone() {
    builds_with_the_host_alone("go", true);
}
