//! `reconciler-host test`: every offline case under some folders run, each compared with the
//! output pinned beside it, a line per case and a summary, as `cargo test` reports; `--bless`
//! (or `BLESS=1`) writes the output as the expected one instead. A case is a folder laid out as
//! the repository's own pinned cases (`host/tests/fixtures/*/`) and a scaffold's
//! `fixtures/hello/` are:
//!
//! - `case.yaml`: `key` (none: the case only maps its events) and `kind` (default: the guest's
//!   primary); optionally `guest` (the guest's file is `NAME.wasm` in `--guests DIR`),
//!   `attempt` and `now` (the guest's clock; else `--now`, else the real one);
//! - `objects.yaml`: the objects loaded;
//! - `events.yaml` (optional): events mapped through the guest's watches (`reconcile --events`);
//! - `host.yaml` (optional): the configuration whose grant applies (else `--config`; without
//!   either, every call is allowed);
//! - `http.yaml` (optional): the exchanges answering outbound HTTP;
//! - `backend-state.json` (optional): the in-memory network backend before the run;
//! - `expected.json`: what `reconcile` prints for the case; `expected-backend-state.json`: the
//!   backend after a run that left one.
//!
//! Each case runs as `reconcile` would run it from inside its folder, so its output is the one
//! a single `reconcile` prints there.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde_json::Value;

use super::{Given, GuestRef, Inputs, PullOptions, load, local_runtime};
use crate::config::HostConfig;
use crate::oci::Auth;
use crate::sandbox::runtime::{LoadedGuest, Runtime};
use crate::supply::guest_set::Origin;

/// A case's `case.yaml`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    /// With `--guests DIR`, the guest is `DIR/<guest>.wasm`.
    guest: Option<String>,
    /// group/version/Kind (version/Kind for the core group); default: the guest's primary.
    kind: Option<String>,
    /// `[namespace/]name`; none in a case that only maps `events.yaml`.
    key: Option<String>,
    #[serde(default)]
    attempt: u32,
    /// RFC 3339.
    now: Option<String>,
}

impl CaseFile {
    /// What `reconcile` is given for the case in `dir` (its `case.yaml` is `case_file`).
    fn inputs(
        &self,
        dir: &Path,
        case_file: &Path,
        config: Option<HostConfig>,
        now: Option<std::time::SystemTime>,
        state: &Path,
    ) -> anyhow::Result<Inputs> {
        let http = dir.join("http.yaml");
        let events = dir.join("events.yaml");
        if self.key.is_none() && !events.exists() {
            anyhow::bail!(
                "{}: no key, and no events.yaml beside it: a case reconciles a key, maps events, or both",
                case_file.display()
            );
        }
        let given = Given {
            objects: vec![dir.join("objects.yaml")],
            http: http.exists().then_some(http),
            events: events.exists().then_some(events),
            kind: self
                .kind
                .as_deref()
                .map(str::parse)
                .transpose()
                .with_context(|| format!("{}: kind", case_file.display()))?,
            key: self
                .key
                .as_deref()
                .map(str::parse)
                .transpose()
                .with_context(|| format!("{}: key", case_file.display()))?,
            backend_state: Some(state.to_owned()),
            attempt: self.attempt,
            now,
        };
        Ok(Inputs {
            given,
            http_name: Some(PathBuf::from("http.yaml")),
            config,
        })
    }
}

/// Which guest runs a case.
pub(crate) enum Guests {
    /// `--guest`: this one for every case.
    One(GuestRef),
    /// `--guests DIR`: the file `DIR/NAME.wasm` for a case naming guest `NAME`.
    Dir(PathBuf),
}

/// `reconciler-host test`, as the command line asks for it.
pub(crate) struct FixtureRun {
    pub guests: Guests,
    pub auth: Auth,
    pub pull: PullOptions,
    /// Case folders, or folders holding them (searched all the way down).
    pub fixtures: Vec<PathBuf>,
    /// The configuration of a case without a `host.yaml`.
    pub config: Option<HostConfig>,
    /// The clock of a case whose `case.yaml` sets no `now`.
    pub now: Option<std::time::SystemTime>,
    /// Write each output as the expected one instead of comparing.
    pub bless: bool,
}

/// How one case went.
enum Verdict {
    Passed,
    /// Its output differs, or it could not run: why.
    Failed(String),
    /// `--bless` wrote these files.
    Blessed(Vec<&'static str>),
}

/// What the run of every case found: each case's folder and verdict, in order.
pub(crate) struct Report {
    cases: Vec<(PathBuf, Verdict)>,
}

impl Report {
    /// How many cases failed, of how many.
    pub(crate) fn failed(&self) -> (usize, usize) {
        let failed = self
            .cases
            .iter()
            .filter(|(_, v)| matches!(v, Verdict::Failed(_)))
            .count();
        (failed, self.cases.len())
    }

    /// A line per case, each failure's reasons, and the counts.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        let mut failures = String::new();
        let (mut passed, mut failed, mut blessed) = (0, 0, 0);
        for (dir, verdict) in &self.cases {
            let dir = dir.display();
            match verdict {
                Verdict::Passed => {
                    passed += 1;
                    let _ = writeln!(out, "{dir} ... ok");
                }
                Verdict::Blessed(files) if files.is_empty() => {
                    passed += 1;
                    let _ = writeln!(out, "{dir} ... ok (nothing to bless)");
                }
                Verdict::Blessed(files) => {
                    blessed += 1;
                    let _ = writeln!(out, "{dir} ... blessed: wrote {}", files.join(", "));
                }
                Verdict::Failed(why) => {
                    failed += 1;
                    let _ = writeln!(out, "{dir} ... FAILED");
                    let _ = write!(failures, "\n---- {dir} ----\n{why}");
                }
            }
        }
        if !failures.is_empty() {
            let _ = write!(
                out,
                "\nfailures:\n{failures}\nAfter a change you meant, `--bless` (or BLESS=1) writes each output as the expected one: review that diff like code.\n"
            );
        }
        let result = if failed == 0 { "ok" } else { "FAILED" };
        let _ = writeln!(
            out,
            "\ntest result: {result}. {passed} passed; {failed} failed; {blessed} blessed"
        );
        out
    }
}

impl FixtureRun {
    /// Runs every case; an error only when none can run (no case found, the one guest does
    /// not load). A case that cannot run (a bad `case.yaml`, a guest missing from `--guests`)
    /// fails alone.
    pub(crate) async fn run(self) -> anyhow::Result<Report> {
        let cases = find_cases(&self.fixtures)?;
        let runtime = local_runtime()?;
        let mut guests = Loaded::new(runtime, &self);
        if let Guests::One(guest) = &self.guests {
            let loaded = load(
                guests.runtime.clone(),
                guest.clone(),
                self.config.as_ref(),
                &self.auth,
                &self.pull,
            )
            .await?;
            guests.one = Some(loaded);
        }
        let mut report = Report { cases: Vec::new() };
        for dir in cases {
            let verdict = match self.case(&dir, &mut guests).await {
                Ok(verdict) => verdict,
                Err(e) => Verdict::Failed(format!("cannot run: {}\n", one_line(&e))),
            };
            report.cases.push((dir, verdict));
        }
        Ok(report)
    }

    /// Runs the case in `dir` and compares (or blesses) what it printed and left.
    async fn case(&self, dir: &Path, guests: &mut Loaded<'_>) -> anyhow::Result<Verdict> {
        let case_file = dir.join("case.yaml");
        let text = std::fs::read_to_string(&case_file)
            .with_context(|| format!("cannot read {}", case_file.display()))?;
        let case: CaseFile = serde_yaml::from_str(&text).with_context(|| {
            format!(
                "{}: not a case (key, kind; optionally guest, attempt, now)",
                case_file.display()
            )
        })?;
        let (loaded, origin) = guests.get(case.guest.as_deref(), &case_file).await?;
        let config = match dir.join("host.yaml") {
            file if file.exists() => Some(HostConfig::load(&file)?),
            _ => self.config.clone(),
        };
        let now = match &case.now {
            Some(now) => Some(
                humantime::parse_rfc3339(now)
                    .with_context(|| format!("{}: now: {now}", case_file.display()))?,
            ),
            None => self.now,
        };
        let work = tempfile::tempdir().context("a temporary directory for the backend state")?;
        let state = work.path().join("backend-state.json");
        if dir.join("backend-state.json").exists() {
            std::fs::copy(dir.join("backend-state.json"), &state)
                .with_context(|| format!("cannot copy {}/backend-state.json", dir.display()))?;
        }
        let inputs = case.inputs(dir, &case_file, config, now, &state)?;
        let output = inputs
            .reconcile(guests.runtime.clone(), loaded, &origin)
            .await?;
        let mut outcomes = vec![("expected.json", output)];
        if state.exists() {
            let text = std::fs::read(&state).context("reading the backend state back")?;
            outcomes.push((
                "expected-backend-state.json",
                serde_json::from_slice(&text)?,
            ));
        }
        let mut differences = String::new();
        let mut written = Vec::new();
        for (name, actual) in outcomes {
            let file = dir.join(name);
            let expected = read_expected(&file)?;
            if expected.as_ref() == Some(&actual) {
                continue;
            }
            if self.bless {
                let text = serde_json::to_string_pretty(&actual)? + "\n";
                std::fs::write(&file, text)
                    .with_context(|| format!("cannot write {}", file.display()))?;
                written.push(name);
                continue;
            }
            match expected {
                None => {
                    let _ = writeln!(
                        differences,
                        "{name} is missing: `--bless` writes the output as the expected one"
                    );
                }
                Some(expected) => {
                    let _ = writeln!(differences, "{name} differs from the output:");
                    differences.push_str(&describe_differences(&expected, &actual));
                }
            }
        }
        Ok(match (self.bless, differences.is_empty()) {
            (true, _) => Verdict::Blessed(written),
            (false, true) => Verdict::Passed,
            (false, false) => Verdict::Failed(differences),
        })
    }
}

/// The expected output in `file`; none when there is no such file.
fn read_expected(file: &Path) -> anyhow::Result<Option<Value>> {
    match std::fs::read(file) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is not JSON", file.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", file.display())),
    }
}

/// The guests the cases run, each loaded (compiled through the cache) once.
struct Loaded<'a> {
    runtime: Arc<Runtime>,
    run: &'a FixtureRun,
    /// `--guest`'s.
    one: Option<(LoadedGuest, Origin)>,
    /// `--guests DIR`'s, by name: loaded, or why not.
    named: BTreeMap<String, Result<(LoadedGuest, Origin), Arc<anyhow::Error>>>,
}

impl<'a> Loaded<'a> {
    fn new(runtime: Arc<Runtime>, run: &'a FixtureRun) -> Self {
        Self {
            runtime,
            run,
            one: None,
            named: BTreeMap::new(),
        }
    }

    /// The guest of a case whose `case.yaml` (`case_file`) names `guest`.
    async fn get(
        &mut self,
        guest: Option<&str>,
        case_file: &Path,
    ) -> anyhow::Result<(LoadedGuest, Origin)> {
        let dir = match (&self.run.guests, &self.one) {
            (Guests::One(_), Some(one)) => return Ok(one.clone()),
            (Guests::One(_), None) => unreachable!("--guest is loaded before the first case"),
            (Guests::Dir(dir), _) => dir,
        };
        let Some(name) = guest else {
            anyhow::bail!(
                "{} names no guest: add `guest: NAME` (run as {}/NAME.wasm), or give --guest FILE",
                case_file.display(),
                dir.display()
            );
        };
        if !self.named.contains_key(name) {
            let file = dir.join(format!("{name}.wasm"));
            let loaded = if file.exists() {
                let guest = GuestRef::File(file);
                let config = self.run.config.as_ref();
                load(
                    self.runtime.clone(),
                    guest,
                    config,
                    &self.run.auth,
                    &self.run.pull,
                )
                .await
                .map_err(|e| Arc::new(anyhow::anyhow!(one_line(&e))))
            } else {
                Err(Arc::new(anyhow::anyhow!(
                    "guest `{name}` has no build in {}: no {} (build it, or point --guests at its folder)",
                    dir.display(),
                    file.display()
                )))
            };
            self.named.insert(name.to_owned(), loaded);
        }
        match &self.named[name] {
            Ok(loaded) => Ok(loaded.clone()),
            Err(why) => Err(anyhow::anyhow!("{why}")),
        }
    }
}

/// An error and its causes on one line, each cause once (many errors quote their source), as
/// the command line prints an error: a case's reason is one line of the report.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !text.is_empty() && !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

/// The case folders under `roots`, sorted: a folder with a `case.yaml` is a case; any other is
/// searched for them.
fn find_cases(roots: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut cases = Vec::new();
    for root in roots {
        let before = cases.len();
        collect_cases(root, &mut cases)
            .with_context(|| format!("cannot read the fixtures in {}", root.display()))?;
        if cases.len() == before {
            anyhow::bail!(
                "no fixtures in {}: a case is a folder with case.yaml (kind, key), objects.yaml and expected.json",
                root.display()
            );
        }
    }
    Ok(cases)
}

fn collect_cases(dir: &Path, cases: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if dir.join("case.yaml").is_file() {
        cases.push(dir.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for entry in entries.into_iter().filter(|e| e.is_dir()) {
        collect_cases(&entry, cases)?;
    }
    Ok(())
}

/// At most this many differences are listed per file.
const SHOWN_DIFFERENCES: usize = 20;

/// Where `actual` differs from `expected`, a line per JSON pointer: `expected X, got Y`,
/// `missing X` or `unexpected Y`. Lists are aligned on their equal elements first, so a call
/// added or dropped is one line, not a shift of every call after it; a pointer into a list
/// names the actual output's index, and the expected one's for an element missing.
fn describe_differences(expected: &Value, actual: &Value) -> String {
    let mut lines = Vec::new();
    differences("", expected, actual, &mut lines);
    let mut out = String::new();
    for line in lines.iter().take(SHOWN_DIFFERENCES) {
        let _ = writeln!(out, "  {line}");
    }
    if lines.len() > SHOWN_DIFFERENCES {
        let _ = writeln!(out, "  ... and {} more", lines.len() - SHOWN_DIFFERENCES);
    }
    out
}

fn differences(path: &str, expected: &Value, actual: &Value, out: &mut Vec<String>) {
    let at = |key: &dyn std::fmt::Display| format!("{path}/{key}");
    match (expected, actual) {
        (Value::Object(was), Value::Object(now)) => {
            let keys: std::collections::BTreeSet<&String> = was.keys().chain(now.keys()).collect();
            for key in keys {
                // RFC 6901 escapes.
                let key_path = at(&key.replace('~', "~0").replace('/', "~1"));
                match (was.get(key), now.get(key)) {
                    (Some(was), Some(now)) => differences(&key_path, was, now, out),
                    (Some(was), None) => out.push(format!("{key_path}: missing {}", short(was))),
                    (None, Some(now)) => out.push(format!("{key_path}: unexpected {}", short(now))),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(was), Value::Array(now)) => {
            // Between two equal elements, the ones left on each side pair up in order and are
            // compared; the rest are missing or unexpected.
            let mut gap = |was_gap: &[(usize, &Value)], now_gap: &[(usize, &Value)]| {
                for pair in 0..was_gap.len().max(now_gap.len()) {
                    match (was_gap.get(pair), now_gap.get(pair)) {
                        (Some((_, w)), Some((j, n))) => differences(&at(j), w, n, out),
                        (Some((i, w)), None) => {
                            out.push(format!("{}: missing {}", at(i), short(w)));
                        }
                        (None, Some((j, n))) => {
                            out.push(format!("{}: unexpected {}", at(j), short(n)));
                        }
                        (None, None) => {}
                    }
                }
            };
            let (mut i, mut j) = (0, 0);
            for (next_i, next_j) in common_elements(was, now)
                .into_iter()
                .chain([(was.len(), now.len())])
            {
                let was_gap: Vec<_> = (i..next_i).map(|k| (k, &was[k])).collect();
                let now_gap: Vec<_> = (j..next_j).map(|k| (k, &now[k])).collect();
                gap(&was_gap, &now_gap);
                (i, j) = (next_i + 1, next_j + 1);
            }
        }
        _ if expected != actual => {
            let line = format!("expected {}, got {}", short(expected), short(actual));
            out.push(if path.is_empty() {
                format!("(the whole output): {line}")
            } else {
                format!("{path}: {line}")
            });
        }
        _ => {}
    }
}

/// The index pairs of a longest common subsequence of `a` and `b` (whole elements equal).
/// Quadratic: lists in an offline run's output are short; past a million pairs, none.
fn common_elements(a: &[Value], b: &[Value]) -> Vec<(usize, usize)> {
    if a.len().saturating_mul(b.len()) > 1_000_000 {
        return Vec::new();
    }
    // lengths[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lengths = vec![vec![0_usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lengths[i][j] = if a[i] == b[j] {
                lengths[i + 1][j + 1] + 1
            } else {
                lengths[i + 1][j].max(lengths[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut pairs) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            pairs.push((i, j));
            (i, j) = (i + 1, j + 1);
        } else if lengths[i + 1][j] >= lengths[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

/// A value on one line, cut to a readable length; a recorded call led by what it calls.
fn short(value: &Value) -> String {
    const MAX: usize = 160;
    let text = match (value["interface"].as_str(), value["function"].as_str()) {
        (Some(interface), Some(function)) => format!("call {interface} {function} {value}"),
        _ => value.to_string(),
    };
    match text.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn differences_name_each_path_with_what_was_expected_and_what_came() {
        let expected = json!({"result": {"ok": {"requeueAfterMs": null}},
            "calls": [{"function": "patch-status", "args": {"greeting": "hello, a"}}]});
        let actual = json!({"result": {"transient": "boom"},
            "calls": [{"function": "patch-status", "args": {"greeting": "hello, b"}},
                      {"function": "record-event"}]});
        let text = describe_differences(&expected, &actual);
        assert_eq!(
            text,
            r#"  /calls/0/args/greeting: expected "hello, a", got "hello, b"
  /calls/1: unexpected {"function":"record-event"}
  /result/ok: missing {"requeueAfterMs":null}
  /result/transient: unexpected "boom"
"#
        );
        assert_eq!(describe_differences(&expected, &expected), "");
        assert_eq!(
            describe_differences(&json!(1), &json!("1")),
            "  (the whole output): expected 1, got \"1\"\n"
        );

        let many: Vec<Value> = (0..30).map(|i| json!(i)).collect();
        let text = describe_differences(&json!([]), &Value::Array(many));
        assert_eq!(text.lines().count(), SHOWN_DIFFERENCES + 1, "{text}");
        assert!(text.ends_with("  ... and 10 more\n"), "{text}");
    }

    /// A call the host added before the guest's is one line, not a difference in every call.
    #[test]
    fn a_call_added_or_dropped_is_one_difference() {
        let call = |n: u32| json!({"function": "get", "n": n});
        let expected = json!([call(1), call(2), call(3)]);
        let actual =
            json!([{"function": "add-finalizer"}, call(1), call(2), {"function": "get", "n": 30}]);
        assert_eq!(
            describe_differences(&expected, &actual),
            r#"  /0: unexpected {"function":"add-finalizer"}
  /3/n: expected 3, got 30
"#
        );
        assert_eq!(
            describe_differences(&json!([call(1), call(2)]), &json!([call(2)])),
            "  /0: missing {\"function\":\"get\",\"n\":1}\n"
        );
    }

    #[test]
    fn cases_are_the_folders_with_a_case_file_found_all_the_way_down() {
        let root = tempfile::tempdir().unwrap();
        for case in ["b", "a", "group/c", "group/c/inner"] {
            std::fs::create_dir_all(root.path().join(case)).unwrap();
            std::fs::write(root.path().join(case).join("case.yaml"), "").unwrap();
        }
        std::fs::create_dir_all(root.path().join("empty")).unwrap();
        let found = find_cases(&[root.path().to_owned()]).unwrap();
        let names: Vec<_> = found
            .iter()
            .map(|p| p.strip_prefix(root.path()).unwrap().to_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "group/c"], "a case's own folders are its");

        let err = find_cases(&[root.path().join("empty")]).unwrap_err();
        assert!(err.to_string().starts_with("no fixtures in "), "{err}");
        let err = find_cases(&[root.path().join("nothing")]).unwrap_err();
        assert!(
            err.to_string().contains("cannot read the fixtures in"),
            "{err}"
        );
    }

    #[test]
    fn the_report_counts_and_explains_each_failure() {
        let report = Report {
            cases: vec![
                ("f/a".into(), Verdict::Passed),
                (
                    "f/b".into(),
                    Verdict::Failed("  /x: expected 1, got 2\n".into()),
                ),
                ("f/c".into(), Verdict::Blessed(vec!["expected.json"])),
                ("f/d".into(), Verdict::Blessed(vec![])),
            ],
        };
        assert_eq!(report.failed(), (1, 4));
        let text = report.text();
        for line in [
            "f/a ... ok",
            "f/b ... FAILED",
            "f/c ... blessed: wrote expected.json",
            "f/d ... ok (nothing to bless)",
            "---- f/b ----",
            "  /x: expected 1, got 2",
            "test result: FAILED. 2 passed; 1 failed; 1 blessed",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in:\n{text}");
        }
        let fine = Report {
            cases: vec![("f/a".into(), Verdict::Passed)],
        };
        assert_eq!(fine.failed(), (0, 1));
        assert!(
            fine.text()
                .ends_with("test result: ok. 1 passed; 0 failed; 0 blessed\n")
        );
    }
}
