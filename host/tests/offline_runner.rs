//! `reconciler-host reconcile`, the offline runner: its JSON output for the reference guests is
//! pinned here, case by case. A guest written in several languages runs every case of its own
//! against each build (`greeter-python`, `greeter-js`, `greeter-c`, `greeter-go`,
//! `greeter-go-preinit`; `network` in Rust and `network-go`): one fixture set, the same expected output for all of them. A case is
//! a folder
//! under `tests/fixtures/` with `case.yaml` (guest, kind, key, attempt), `objects.yaml`,
//! optionally `events.yaml` (events mapped through the guest's watches; a case with them may
//! have no key), `host.yaml` (grants), `http.yaml` (the exchanges answering outbound HTTP) and
//! `backend-state.json` (the in-memory network backend before the run), and the pinned `expected.json` (stdout) and, where a backend is involved,
//! `expected-backend-state.json` (the backend after the run).
//!
//! After an intended change of behaviour, regenerate with `BLESS=1 cargo test --test
//! offline_runner` and review the diff like code.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const NOW: &str = "2026-01-02T03:04:05Z";

/// A fixture's `case.yaml`: which guest runs on which key.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    guest: String,
    kind: Option<String>,
    /// None in a case that only maps `events.yaml`.
    key: Option<String>,
    #[serde(default)]
    attempt: u32,
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The Rust build of a guest, if it has one: a crate in `guests/NAME/` or `guests/testing/NAME/`,
/// which `guests/build.sh` builds as `NAME`.
fn rust_build(guest: &str) -> Option<String> {
    let guests = common::repo_root().join("guests");
    [guests.join(guest), guests.join("testing").join(guest)]
        .iter()
        .any(|crate_dir| crate_dir.join("Cargo.toml").exists())
        .then(|| guest.to_owned())
}

/// Other languages' builds of a guest, as `guests/build.sh` names them: a guest `NAME` with
/// sources under `guests/python/NAME/`, `guests/js/NAME/`, `guests/c/NAME/` or
/// `guests/go/NAME/` is built as `NAME-python`, `NAME-js`, `NAME-c`, `NAME-go`, and a Go guest in
/// [`GO_PREINIT`] also pre-initialised as `NAME-go-preinit`. Found from the sources, so a build
/// that went missing fails.
/// The Go guests `guests/go/build.sh` builds a second time pre-initialised (`docs/guests/go.md`).
const GO_PREINIT: &[&str] = &["greeter"];

fn language_builds(guest: &str) -> Vec<String> {
    let guests = common::repo_root().join("guests");
    let has =
        |language: &str, marker: &str| guests.join(language).join(guest).join(marker).exists();
    [
        ("python", has("python", "app.py")),
        ("js", has("js", "app.js")),
        ("c", has("c", "app.c")),
        ("go", has("go", "go.mod")),
        (
            "go-preinit",
            has("go", "go.mod") && GO_PREINIT.contains(&guest),
        ),
    ]
    .into_iter()
    .filter(|(_, present)| *present)
    .map(|(language, _)| format!("{guest}-{language}"))
    .collect()
}

/// Runs a case against every build of the guest it names, Rust's first; all must print the
/// same output (only the first build's is written when blessing).
fn run_case(name: &str, case: &Case) {
    let builds: Vec<String> = rust_build(&case.guest)
        .into_iter()
        .chain(language_builds(&case.guest))
        .collect();
    assert!(
        !builds.is_empty(),
        "{name}: guest {:?} has no sources (a crate in guests/ or guests/testing/, or guests/<lang>/{0}/)",
        case.guest
    );
    let bless = std::env::var_os("BLESS").is_some();
    for (i, build) in builds.iter().enumerate() {
        run_build(name, case, build, bless && i == 0);
    }
}

fn run_build(name: &str, case: &Case, guest: &str, bless: bool) {
    let dir = fixture(name);
    let label = format!("{name} ({guest}.wasm)");
    let name = label.as_str();
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("backend-state.json");
    if dir.join("backend-state.json").exists() {
        std::fs::copy(dir.join("backend-state.json"), &state).unwrap();
    }
    // Every build runs from a file named after the guest it ports, as it would be deployed: a
    // grant belongs to the file's name (`host/src/supply/guest_set/source.rs`), and a case's host.yaml grants
    // the guest.
    let file = work.path().join(format!("{}.wasm", case.guest));
    std::fs::copy(common::guest(guest), &file).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_reconciler-host"));
    command
        .args(["reconcile", "--guest"])
        .arg(&file)
        .arg("--objects")
        .arg(dir.join("objects.yaml"))
        .args(["--now", NOW])
        .args(["--attempt", &case.attempt.to_string()])
        .arg("--backend-state")
        .arg(&state)
        .env("XDG_CACHE_HOME", common::cache_dir());
    if let Some(kind) = &case.kind {
        command.args(["--kind", kind]);
    }
    if let Some(key) = &case.key {
        command.args(["--key", key]);
    }
    if dir.join("events.yaml").exists() {
        command.arg("--events").arg(dir.join("events.yaml"));
    }
    if dir.join("host.yaml").exists() {
        command.arg("--config").arg(dir.join("host.yaml"));
    }
    // Named relative to the case, as answers to requests it lacks name it in the output.
    if dir.join("http.yaml").exists() {
        command.current_dir(&dir).args(["--http", "http.yaml"]);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}: exit {:?}\n{}",
        name,
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let actual: Value =
        serde_json::from_slice(&output.stdout).expect("stdout is one JSON document");
    compare(&dir.join("expected.json"), &actual, name, bless);
    if state.exists() {
        let after: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        compare(
            &dir.join("expected-backend-state.json"),
            &after,
            name,
            bless,
        );
    }
}

fn compare(expected_file: &Path, actual: &Value, case: &str, bless: bool) {
    if bless {
        std::fs::write(
            expected_file,
            serde_json::to_string_pretty(actual).unwrap() + "\n",
        )
        .unwrap();
        return;
    }
    let expected: Value =
        serde_json::from_slice(&std::fs::read(expected_file).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with BLESS=1 to create it)",
                expected_file.display()
            )
        }))
        .unwrap();
    assert!(
        expected == *actual,
        "{case}: output differs from {}\nactual:\n{}",
        expected_file.display(),
        serde_json::to_string_pretty(actual).unwrap()
    );
}

const WIDGET: &str = "test.reconciler.dev/v1/Widget";

/// Every folder under `tests/fixtures/` is a case: adding one needs no change here.
#[test]
fn every_fixture_reproduces_its_pinned_output() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixture(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("case.yaml").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 12, "fixtures found: {dirs:?}");
    let failures: Vec<String> = dirs
        .iter()
        .filter_map(|dir| {
            let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
            let case: Case =
                serde_yaml::from_str(&std::fs::read_to_string(dir.join("case.yaml")).unwrap())
                    .unwrap_or_else(|e| panic!("{name}/case.yaml: {e}"));
            std::panic::catch_unwind(|| run_case(&name, &case))
                .err()
                .map(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .unwrap_or_else(|| format!("{name} failed"))
                })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The cases above cover the other languages only where their sources exist; this pins that the
/// greeter (in Python, JavaScript, C and Go) and the Network guest (in Go) are among them.
#[test]
fn guests_in_other_languages_run_the_same_cases() {
    assert_eq!(
        language_builds("greeter"),
        [
            "greeter-python",
            "greeter-js",
            "greeter-c",
            "greeter-go",
            "greeter-go-preinit"
        ]
    );
    assert_eq!(language_builds("network"), ["network-go"]);
}

/// Go's garbage collector may run inside `cabi_realloc` while the host copies a large value into
/// the guest, and it then calls WASI, which the component model forbids mid-copy: the reconcile
/// trapped with `cannot leave component instance` (a 6 MiB Widget did, without
/// `guests/go/gc.go`, which turns the collector off in every Go guest). Each size must reconcile:
/// the object goes in as the request and comes back from `patch-status`.
#[test]
fn a_go_guest_reconciles_objects_of_several_megabytes() {
    let work = tempfile::tempdir().unwrap();
    for mib in [4, 6, 8] {
        let objects = work.path().join(format!("widget-{mib}mib.json"));
        let widget = serde_json::json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": "big", "namespace": "demo", "generation": 1, "resourceVersion": "1"},
            "spec": {"message": "big", "padding": "x".repeat(mib << 20)},
        });
        std::fs::write(&objects, serde_json::to_vec(&widget).unwrap()).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
            .args(["reconcile", "--guest"])
            .arg(common::guest("greeter-go"))
            .arg("--objects")
            .arg(&objects)
            .args(["--kind", WIDGET, "--key", "demo/big", "--now", NOW])
            .env("XDG_CACHE_HOME", common::cache_dir())
            .output()
            .unwrap();
        assert!(output.status.success(), "{mib} MiB: {output:?}");
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            report["result"],
            serde_json::json!({"ok": {"requeueAfterMs": null}}),
            "{mib} MiB"
        );
        assert_eq!(
            report["calls"][0]["args"]["patch"]["status"]["greeting"], "hello, big",
            "{mib} MiB"
        );
    }
}

/// The `fetcher-http` case's credential, as its Secret holds it (base64) and as sent.
const FIXTURE_KEY: &str = "fixture-key-0123456789";
const FIXTURE_KEY_BASE64: &str = "Zml4dHVyZS1rZXktMDEyMzQ1Njc4OQ==";

/// Offline, a grant's credential is read from the loaded Secret and added to the request (the
/// fixture's answer reflects it, and the host masks it there), but it never reaches the
/// output; without the Secret, the request fails naming it.
#[test]
fn offline_http_adds_the_secrets_credential_and_never_prints_it() {
    let dir = fixture("fetcher-http");
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("fetcher.wasm");
    std::fs::copy(common::guest("fetcher"), &file).unwrap();
    let reconcile = |objects: &Path| {
        let output = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
            .args(["reconcile", "--guest"])
            .arg(&file)
            .arg("--objects")
            .arg(objects)
            .args(["--kind", WIDGET, "--key", "demo/w1", "--now", NOW])
            .arg("--config")
            .arg(dir.join("host.yaml"))
            .arg("--http")
            .arg(dir.join("http.yaml"))
            .env("XDG_CACHE_HOME", common::cache_dir())
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };

    let out = reconcile(&dir.join("objects.yaml"));
    assert!(
        !out.contains(FIXTURE_KEY) && !out.contains(FIXTURE_KEY_BASE64),
        "{out}"
    );
    let masked = format!(r#"\"seenKey\": \"{}\""#, "*".repeat(FIXTURE_KEY.len()));
    assert!(out.contains(&masked), "the key was not added: {out}");

    let widget_only = work.path().join("widget.yaml");
    let objects = std::fs::read_to_string(dir.join("objects.yaml")).unwrap();
    std::fs::write(&widget_only, objects.split("\n---\n").next().unwrap()).unwrap();
    let report: Value = serde_json::from_str(&reconcile(&widget_only)).unwrap();
    let error = &report["calls"][0]["args"]["patch"]["status"]["http"][0]["error"];
    assert!(
        error.as_str().is_some_and(|e| e.contains(
            "the value of header X-API-Key for https://api.example.com:443/v1: Secret example-api is not among the loaded objects: add it, with key in its data, to them"
        )),
        "{report:#}"
    );
}

#[test]
fn bad_input_exits_non_zero_with_a_clear_message() {
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
            .args(args)
            .env("XDG_CACHE_HOME", common::cache_dir())
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let guest = common::guest("widget");
    let guest = guest.to_str().unwrap();
    let objects = fixture("widget-full").join("objects.yaml");
    let objects = objects.to_str().unwrap();
    let err = run(&[
        "reconcile",
        "--guest",
        guest,
        "--objects",
        "/nonexistent.yaml",
        "--kind",
        WIDGET,
        "--key",
        "a",
    ]);
    assert!(
        err.contains("cannot read objects from /nonexistent.yaml"),
        "{err}"
    );
    let err = run(&[
        "reconcile",
        "--guest",
        guest,
        "--objects",
        objects,
        "--kind",
        "Widget",
        "--key",
        "a",
    ]);
    assert!(err.contains("group/version/Kind"), "{err}");
    let err = run(&[
        "reconcile",
        "--guest",
        guest,
        "--objects",
        objects,
        "--kind",
        WIDGET,
        "--key",
        "a/b/c",
    ]);
    assert!(
        err.contains(r#"invalid object key "a/b/c": expected "namespace/name" or "name""#),
        "{err}"
    );
    let bogus = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bogus.path(), "not a component").unwrap();
    let err = run(&[
        "reconcile",
        "--guest",
        bogus.path().to_str().unwrap(),
        "--objects",
        objects,
        "--kind",
        WIDGET,
        "--key",
        "a",
    ]);
    assert!(err.contains("not a WebAssembly component"), "{err}");
    // One line per cause, no byte dumps.
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!err.contains("expected=["), "{err}");

    // Events: neither a key nor events is a usage error; an event that is no event says where.
    let err = run(&["reconcile", "--guest", guest, "--objects", objects]);
    assert!(err.contains("--key <KEY>"), "{err}");
    let events = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        events.path(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\ntype: CHANGED\nobject: {}\n",
    )
    .unwrap();
    let events = events.path().to_str().unwrap();
    let err = run(&[
        "reconcile",
        "--guest",
        guest,
        "--objects",
        objects,
        "--events",
        events,
    ]);
    assert!(
        err.contains(&format!(
            "{events}: document 2: event type \"CHANGED\": ADDED, MODIFIED or DELETED"
        )),
        "{err}"
    );

    // Each cause once.
    let err = run(&["check", guest, "--config", "/nonexistent-host.yaml"]);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn check_prints_the_manifest_and_refuses_beyond_the_grant() {
    let guest = common::guest("network");
    let output = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .arg("check")
        .arg(&guest)
        .env("XDG_CACHE_HOME", common::cache_dir())
        .output()
        .unwrap();
    assert!(output.status.success());
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["world"], "network-controller");
    assert_eq!(report["manifest"]["name"], "network");
    assert_eq!(
        report["manifest"]["finalizer"],
        "samplecrd.k8s.io/network-backend"
    );

    let output = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .arg("check")
        .arg(&guest)
        .arg("--config")
        .arg(fixture("widget-denied").join("host.yaml"))
        .env("XDG_CACHE_HOME", common::cache_dir())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("would be refused: no grant for guest `network`"),
        "{err}"
    );
}

/// As in `run`, a configuration's grant is the one of the guest's file: a file declaring
/// another guest's name is refused by `reconcile` and `check`, and a grant for that file
/// (`name@stem`) is the one its calls are checked against.
#[test]
fn offline_a_file_gets_the_grant_of_its_own_name_not_of_the_name_it_declares() {
    let work = tempfile::tempdir().unwrap();
    let impostor = work.path().join("evil.wasm");
    std::fs::copy(common::guest("widget"), &impostor).unwrap();
    let grants = std::fs::read_to_string(fixture("widget-denied").join("host.yaml")).unwrap();
    let config = work.path().join("host.yaml");
    std::fs::write(&config, &grants).unwrap();
    let objects = fixture("widget-denied").join("objects.yaml");
    let reconcile = |config: &Path| {
        Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
            .args(["reconcile", "--guest"])
            .arg(&impostor)
            .arg("--objects")
            .arg(&objects)
            .args(["--kind", WIDGET, "--key", "demo/w1", "--now", NOW])
            .arg("--config")
            .arg(config)
            .env("XDG_CACHE_HOME", common::cache_dir())
            .output()
            .unwrap()
    };
    let refusal = format!(
        "{}: declares guest `widget`, but a grant goes with the file a guest is loaded from",
        impostor.display()
    );

    let output = reconcile(&config);
    assert!(!output.status.success(), "{output:?}");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains(&refusal), "{err}");
    assert!(
        err.contains("rename the file to widget.wasm, or grant it as guests.widget@evil"),
        "{err}"
    );
    assert!(output.stdout.is_empty(), "nothing ran: {output:?}");

    let output = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .arg("check")
        .arg(&impostor)
        .arg("--config")
        .arg(&config)
        .env("XDG_CACHE_HOME", common::cache_dir())
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains(&refusal), "{err}");

    // Granted for this file: it runs as `widget@evil`, checked against that grant.
    std::fs::write(&config, grants.replace("  widget:", "  widget@evil:")).unwrap();
    let output = reconcile(&config);
    assert!(output.status.success(), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    // The first call after the host's own (its finalizer) is the guest's read.
    let guests = |call: &&Value| call["interface"] != "host";
    let first = report["calls"].as_array().unwrap().iter().find(guests);
    assert_eq!(
        first.unwrap()["returned"]["error"]["denied"],
        "guest `widget@evil` may not read v1/Secret: add it to guests.widget@evil.read in the host configuration"
    );
}

/// `reconciler-host check guest.wasm | head` with the reader gone before the output is written
/// (its read end closed at once): the command ends quietly with a closed pipe's status, as
/// Unix tools do, never a panic and a backtrace.
#[test]
fn a_reader_gone_away_ends_the_command_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .arg("check")
        .arg(common::guest("widget"))
        .env("XDG_CACHE_HOME", common::cache_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(141), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("error"),
        "{stderr}"
    );
}

/// `reconciler-host test DIR --guests GUESTS`, as an author runs it.
fn test_command(fixtures: &[&Path], guests: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_reconciler-host"));
    command
        .arg("test")
        .args(fixtures)
        .arg("--guests")
        .arg(guests)
        .args(["--now", NOW])
        .env("XDG_CACHE_HOME", common::cache_dir())
        .env_remove("BLESS");
    command
}

/// `reconciler-host test` keeps to the layout of these cases: pointed at this folder, with a
/// build of each guest the cases name, it finds every case and reproduces every pinned output
/// (and backend state), as the harness above does case by case.
#[test]
fn the_test_command_passes_every_pinned_case() {
    let guests = tempfile::tempdir().unwrap();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixture(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("case.yaml").exists())
        .collect();
    dirs.sort();
    // One build of each guest the cases name: its Rust one, else its quickest to load.
    for dir in &dirs {
        let case: Case =
            serde_yaml::from_str(&std::fs::read_to_string(dir.join("case.yaml")).unwrap()).unwrap();
        let file = guests.path().join(format!("{}.wasm", case.guest));
        if file.exists() {
            continue;
        }
        let others = language_builds(&case.guest);
        let build = rust_build(&case.guest)
            .or_else(|| {
                ["-c", "-go", "-js", "-python"]
                    .iter()
                    .find_map(|suffix| others.iter().find(|b| b.ends_with(suffix)).cloned())
            })
            .unwrap_or_else(|| panic!("{}: guest {} has no build", dir.display(), case.guest));
        std::fs::copy(common::guest(&build), file).unwrap();
    }
    let output = test_command(&[&fixture("")], guests.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let cases = dirs.len();
    assert!(
        stdout.ends_with(&format!(
            "test result: ok. {cases} passed; 0 failed; 0 blessed\n"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("/greeter-hello ... ok\n") && stdout.contains("/network-delete ... ok\n"),
        "{stdout}"
    );
}

/// A case whose output differs fails, naming where, and the command exits 1; `--bless` (or
/// `BLESS=1`) writes the output as expected, and the case passes from then on. A case without
/// its expected output fails until blessed. A guest the cases name that is not built fails
/// those cases alone.
#[test]
fn the_test_command_fails_on_a_difference_until_blessed() {
    let work = tempfile::tempdir().unwrap();
    let guests = work.path().join("guests");
    std::fs::create_dir(&guests).unwrap();
    std::fs::copy(common::guest("greeter-c"), guests.join("greeter.wasm")).unwrap();
    let cases = work.path().join("fixtures");
    let pinned = std::fs::read_to_string(fixture("greeter-hello").join("expected.json")).unwrap();
    for case in ["changed", "new"] {
        let dir = cases.join(case);
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["case.yaml", "objects.yaml"] {
            std::fs::copy(fixture("greeter-hello").join(file), dir.join(file)).unwrap();
        }
    }
    let changed = cases.join("changed/expected.json");
    std::fs::write(&changed, pinned.replace("hello, world", "hello, there")).unwrap();

    let output = test_command(&[&cases], &guests).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    for line in [
        "/changed ... FAILED",
        "/new ... FAILED",
        r#"  /calls/0/args/patch/status/greeting: expected "hello, there", got "hello, world""#,
        "expected.json is missing: `--bless` writes the output as the expected one",
        "test result: FAILED. 0 passed; 2 failed; 0 blessed",
    ] {
        assert!(
            stdout.lines().any(|l| l.ends_with(line)),
            "{line:?} not in:\n{stdout}"
        );
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("error: 2 of 2 fixtures failed"), "{stderr}");

    let output = test_command(&[&cases], &guests)
        .env("BLESS", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("test result: ok. 0 passed; 0 failed; 2 blessed"),
        "{stdout}"
    );
    for case in ["changed", "new"] {
        let written = std::fs::read_to_string(cases.join(case).join("expected.json")).unwrap();
        assert_eq!(written, pinned, "{case}");
    }
    let output = test_command(&[&cases], &guests).output().unwrap();
    assert!(output.status.success(), "{output:?}");

    let unbuilt = cases.join("unbuilt");
    std::fs::create_dir(&unbuilt).unwrap();
    std::fs::write(
        unbuilt.join("case.yaml"),
        "guest: absent\nkind: test.reconciler.dev/v1/Widget\nkey: demo/w1\n",
    )
    .unwrap();
    let output = test_command(&[&cases], &guests).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("cannot run: guest `absent` has no build in ")
            && stdout.contains("test result: FAILED. 2 passed; 1 failed; 0 blessed"),
        "{stdout}"
    );
}

/// The offline runner's log on stderr (the guest's lines, the host's warnings) is plain text
/// when stderr is not a terminal: no ANSI colour codes in a file or a pipe.
#[test]
fn a_redirected_log_carries_no_colour_codes() {
    let dir = fixture("greeter-invalid");
    let output = Command::new(env!("CARGO_BIN_EXE_reconciler-host"))
        .args(["reconcile", "--guest"])
        .arg(common::guest("greeter-c"))
        .arg("--objects")
        .arg(dir.join("objects.yaml"))
        .args(["--kind", WIDGET, "--key", "demo/w1", "--now", NOW])
        .env("XDG_CACHE_HOME", common::cache_dir())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("reconcile failed permanently"),
        "the log said nothing to check: {stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "colour codes: {stderr:?}");
}
