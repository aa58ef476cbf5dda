//! Finding, starting, sharing and restarting local control planes (etcd + kube-apiserver).
//!
//! # Which control plane a test gets
//!
//! [`ControlPlane::shared`] decides once per test binary, in this order:
//! 1. `RECONCILER_TEST_KUBECONFIG` is set: use that kubeconfig. It must answer `/readyz`;
//!    if it does not, every test fails with that message (no silent fallback).
//! 2. `KUBECONFIG` names one file whose server is on a loopback address and answers `/readyz`
//!    (e.g. after `eval "$(tools/control-plane/cp env)"`): use it. A non-loopback server is never
//!    used, so a developer's real cluster cannot receive test namespaces and CRDs by accident.
//! 3. Otherwise `tools/control-plane/cp up --reuse --dir <target>/control-plane/shared`
//!    (directory overridable with `RECONCILER_TEST_CONTROL_PLANE_DIR`). `cp` serialises
//!    concurrent callers with a file lock and `--reuse` keeps a healthy one, so every test binary
//!    of a `cargo test` run, and later runs, share one control plane.
//!
//! A plain `cargo test` leaves the shared control plane running when the tests end, so the next
//! run starts in a second instead of ten. Stop it with
//! `tools/control-plane/cp down --dir target/control-plane/shared`. `./dev test` instead points
//! [`DIR_ENV`] at a directory of its own run and stops it at the end (`KEEP_CONTROL_PLANE=1`
//! keeps the usual one running; see `dev`).
//!
//! [`PrivateControlPlane::start`] gives a test its own control plane in its own directory,
//! tied to the test process (`cp up --exit-with <pid>`): it is stopped on drop, and a watchdog
//! stops it if the process dies without dropping it. Only this type can restart kube-apiserver
//! or etcd, so fault tests never disturb tests sharing the common control plane.

use std::ffi::OsStr;
use std::net::IpAddr;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::sync::OnceCell;

use crate::paths::{cp_script, target_dir};

/// Use this kubeconfig instead of starting a control plane.
pub const KUBECONFIG_ENV: &str = "RECONCILER_TEST_KUBECONFIG";
/// Where the shared control plane started by the tests lives.
pub const DIR_ENV: &str = "RECONCILER_TEST_CONTROL_PLANE_DIR";

/// How long one `/readyz` probe may take before the server counts as not ready.
const READYZ_TIMEOUT: Duration = Duration::from_secs(10);

/// A running control plane: where its kubeconfig is and, if `cp` manages it, its state dir.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    kubeconfig: PathBuf,
    dir: Option<PathBuf>,
}

// The error is kept as text so every test in the binary reports the same cause, instead of
// each one trying (and waiting) again.
static SHARED: OnceCell<Result<ControlPlane, String>> = OnceCell::const_new();

impl ControlPlane {
    /// The control plane shared by every test of this run (see the module docs for how it is
    /// found). The first call may build the binaries (minutes, once per machine) and start the
    /// servers (seconds); later calls return at once.
    ///
    /// Clients are not shared: `#[tokio::test]` gives every test its own runtime, and a client
    /// made on one runtime stops working when that runtime ends. Call [`Self::client`] per test.
    pub async fn shared() -> Result<&'static ControlPlane> {
        SHARED
            .get_or_init(|| async { find_or_start_shared().await.map_err(|e| format!("{e:#}")) })
            .await
            .as_ref()
            .map_err(|e| anyhow!("no control plane for the tests: {e}"))
    }

    /// The control plane `cp` keeps in `dir`, started if none is running there
    /// (`cp up --reuse`), and left running. [`Self::shared`] is this in the tests' directory;
    /// the live benches call it with a directory of their own, so a bench's tens of thousands
    /// of objects never land in the tests' API server. Costs as the module docs say.
    pub async fn reuse_or_start(dir: &Path) -> Result<ControlPlane> {
        eprintln!(
            "starting (or reusing) the control plane in {} \
             (the first run on a machine builds kube-apiserver: about 10 minutes)",
            dir.display()
        );
        run_cp([
            "up".as_ref(),
            "--reuse".as_ref(),
            "--dir".as_ref(),
            dir.as_os_str(),
        ])
        .await?;
        let plane = ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            dir: Some(dir.to_owned()),
        };
        plane
            .check_ready()
            .await
            .context("cp up succeeded but the Rust client cannot reach the API server")?;
        Ok(plane)
    }

    /// A control plane reached through an existing kubeconfig (not managed by these helpers).
    pub fn from_kubeconfig(path: impl Into<PathBuf>) -> Self {
        Self {
            kubeconfig: path.into(),
            dir: None,
        }
    }

    /// The kubeconfig file (admin identity, `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The `cp` state directory, when `cp` started this control plane.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// A new client for this control plane, bound to the calling test's runtime.
    pub async fn client(&self) -> Result<Client> {
        client_for_kubeconfig(&self.kubeconfig).await
    }

    /// The built kubectl, pointed at this control plane, ready for `.args(..).output()`.
    pub fn kubectl(&self) -> Result<std::process::Command> {
        let mut cmd = std::process::Command::new(crate::paths::kubectl()?);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        Ok(cmd)
    }

    /// Fails unless `/readyz` answers `ok` within 10 s.
    pub async fn check_ready(&self) -> Result<()> {
        let client = self.client().await?;
        let request = http::Request::get("/readyz").body(Vec::new())?;
        let answer = tokio::time::timeout(READYZ_TIMEOUT, client.request_text(request))
            .await
            .map_err(|_| anyhow!("/readyz did not answer within {READYZ_TIMEOUT:?}"))?
            .context("GET /readyz")?;
        if answer.trim() != "ok" {
            bail!("/readyz answered {answer:?}");
        }
        Ok(())
    }
}

async fn find_or_start_shared() -> Result<ControlPlane> {
    if let Some(path) = std::env::var_os(KUBECONFIG_ENV) {
        let plane = ControlPlane::from_kubeconfig(&path);
        plane.check_ready().await.with_context(|| {
            format!(
                "{KUBECONFIG_ENV}={} does not point at a ready API server; unset it to let the \
                 tests start their own",
                Path::new(&path).display()
            )
        })?;
        return Ok(plane);
    }
    if let Some(plane) = loopback_kubeconfig_from_env().await {
        return Ok(plane);
    }
    let dir = std::env::var_os(DIR_ENV)
        .map_or_else(|| target_dir().join("control-plane/shared"), PathBuf::from);
    ControlPlane::reuse_or_start(&dir).await
}

/// `KUBECONFIG`, if it names a single file whose current context points at a loopback server
/// that is ready. Anything else is ignored, with a note on stderr saying why.
async fn loopback_kubeconfig_from_env() -> Option<ControlPlane> {
    let raw = std::env::var_os("KUBECONFIG")?;
    let mut paths = std::env::split_paths(&raw).filter(|p| !p.as_os_str().is_empty());
    let path = paths.next()?;
    if paths.next().is_some() {
        eprintln!(
            "KUBECONFIG lists several files; the tests only reuse a single one, so ignoring it"
        );
        return None;
    }
    let kubeconfig = Kubeconfig::read_from(&path).ok()?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .ok()?;
    let host = config
        .cluster_url
        .host()?
        .trim_start_matches('[')
        .trim_end_matches(']');
    let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        eprintln!(
            "KUBECONFIG points at {host}, which is not a loopback address; the tests never use a \
             remote cluster, so ignoring it"
        );
        return None;
    }
    let plane = ControlPlane::from_kubeconfig(path);
    match plane.check_ready().await {
        Ok(()) => Some(plane),
        Err(e) => {
            eprintln!("KUBECONFIG's server is not ready ({e:#}); ignoring it");
            None
        }
    }
}

/// The Kubernetes releases `tools/control-plane/version.env` supports (`K8S_SUPPORTED_VERSIONS`),
/// the default first: the ones [`PrivateControlPlane::start_version`] can start.
pub fn supported_kubernetes_versions() -> Result<Vec<String>> {
    let file = crate::paths::repo_root().join("tools/control-plane/version.env");
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let list = text
        .lines()
        .find_map(|l| l.strip_prefix("K8S_SUPPORTED_VERSIONS="))
        .with_context(|| format!("no K8S_SUPPORTED_VERSIONS= line in {}", file.display()))?;
    Ok(list
        .trim_matches('"')
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

/// How to restart a server of a [`PrivateControlPlane`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Restart {
    /// SIGKILL instead of SIGTERM: a crash rather than a graceful shutdown.
    pub hard: bool,
    /// How long the server stays down before it is started again.
    pub pause: Duration,
    /// kube-apiserver only: while it is down, one write to etcd and a compaction at its
    /// revision (`cp restart-apiserver --compact`), so every watch must relist after 410 Gone.
    pub compact: bool,
}

/// A control plane of one's own, in its own directory; stopped (and its state removed) on drop.
/// Dereferences to [`ControlPlane`] for clients and kubectl.
#[derive(Debug)]
pub struct PrivateControlPlane {
    plane: ControlPlane,
    dir: PathBuf,
    stopped: bool,
}

impl PrivateControlPlane {
    /// Starts a fresh control plane in `<target>/control-plane/private-<name>-<pid>-<n>`.
    /// Costs a few seconds and about 0.5 GB of memory while it runs.
    pub async fn start(name: &str) -> Result<Self> {
        Self::start_with(name, &[]).await
    }

    /// As [`Self::start`], with kube-apiserver writing an audit log by `policy` to
    /// [`Self::audit_log`] (`cp`'s `CP_AUDIT_POLICY`); restarts keep it.
    pub async fn start_audited(name: &str, policy: &Path) -> Result<Self> {
        Self::start_with(name, &[("CP_AUDIT_POLICY", policy.as_os_str())]).await
    }

    /// As [`Self::start`], with kube-apiserver's `--feature-gates` set to `gates` (`cp`'s
    /// `CP_FEATURE_GATES`; its default is `ShardedListAndWatch=true`, which `gates` replaces).
    pub async fn start_with_feature_gates(name: &str, gates: &str) -> Result<Self> {
        Self::start_with(name, &[("CP_FEATURE_GATES", OsStr::new(gates))]).await
    }

    /// As [`Self::start`], at Kubernetes `version` (`cp`'s `K8S_VERSION`, one of
    /// [`supported_kubernetes_versions`]). A version not built yet is built first: about
    /// 10 minutes on 2 cores, once per machine.
    pub async fn start_version(name: &str, version: &str) -> Result<Self> {
        Self::start_with(name, &[("K8S_VERSION", OsStr::new(version))]).await
    }

    async fn start_with(name: &str, env: &[(&str, &OsStr)]) -> Result<Self> {
        let dir = crate::paths::private_dir("control-plane", name);
        let pid = std::process::id().to_string();
        crate::paths::run_script_with_env(
            &cp_script(),
            [
                "up".as_ref(),
                "--dir".as_ref(),
                dir.as_os_str(),
                "--exit-with".as_ref(),
                <str as AsRef<OsStr>>::as_ref(&pid),
            ],
            env,
        )
        .await?;
        let plane = Self {
            plane: ControlPlane {
                kubeconfig: dir.join("kubeconfig"),
                dir: Some(dir.clone()),
            },
            dir,
            stopped: false,
        };
        plane.check_ready().await?;
        Ok(plane)
    }

    /// Stops kube-apiserver and starts it again on the same port with the same data, and waits
    /// for `/readyz`. Clients and watches see their connections drop.
    pub async fn restart_apiserver(&self, how: Restart) -> Result<()> {
        self.restart("restart-apiserver", how).await
    }

    /// Stops etcd and starts it again with the same data and ports, and waits until etcd is
    /// healthy and kube-apiserver is ready again.
    pub async fn restart_etcd(&self, how: Restart) -> Result<()> {
        self.restart("restart-etcd", how).await
    }

    async fn restart(&self, command: &str, how: Restart) -> Result<()> {
        let pause = format!("{:.3}", how.pause.as_secs_f64());
        let mut args: Vec<&OsStr> = vec![
            command.as_ref(),
            "--dir".as_ref(),
            self.dir.as_os_str(),
            "--pause".as_ref(),
            pause.as_ref(),
        ];
        if how.hard {
            args.push("--hard".as_ref());
        }
        if how.compact {
            args.push("--compact".as_ref());
        }
        run_cp(args).await
    }

    /// Stops the control plane now and reports failure (dropping does the same, silently).
    pub async fn stop(mut self) -> Result<()> {
        self.stopped = true;
        run_cp(["down".as_ref(), "--dir".as_ref(), self.dir.as_os_str()]).await
    }

    /// The state directory (logs are in `logs/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where kube-apiserver writes its audit log, when started with [`Self::start_audited`].
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("logs/audit.log")
    }

    /// etcd's client URL (plain HTTP on loopback), from the control plane's state file: the
    /// robustness harness compacts etcd's history through its JSON gateway.
    pub fn etcd_url(&self) -> Result<String> {
        Ok(format!("http://127.0.0.1:{}", self.state("ETCD_PORT")?))
    }

    /// kube-apiserver's address (`127.0.0.1:PORT`), for relays put in front of it.
    pub fn apiserver_addr(&self) -> Result<std::net::SocketAddr> {
        Ok(format!("127.0.0.1:{}", self.state("API_PORT")?).parse()?)
    }

    /// One `KEY=value` of the state file `cp` keeps in the directory.
    fn state(&self, key: &str) -> Result<String> {
        let file = self.dir.join("state.env");
        let state = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        state
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(|v| v.trim().to_owned())
            .with_context(|| format!("no {key} in {}", file.display()))
    }
}

impl Deref for PrivateControlPlane {
    type Target = ControlPlane;
    fn deref(&self) -> &ControlPlane {
        &self.plane
    }
}

impl Drop for PrivateControlPlane {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        // Blocking is fine here: it is a test process, and the watchdog would do it anyway if
        // this failed, one second after the process exits.
        let result = std::process::Command::new(cp_script())
            .args(["down".as_ref(), "--dir".as_ref(), self.dir.as_os_str()])
            .output();
        match result {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "cp down --dir {} failed: {}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("could not run cp down --dir {}: {e}", self.dir.display()),
        }
    }
}

/// Runs the script with `args` ([`crate::paths::run_script`]).
async fn run_cp<I, S>(args: I) -> Result<()>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    crate::paths::run_script(&cp_script(), args).await.map(drop)
}

/// A client for the kubeconfig at `path` (its current context).
pub async fn client_for_kubeconfig(path: &Path) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    Client::try_from(config)
        .with_context(|| format!("building a client from kubeconfig {}", path.display()))
}

/// How many `verb` requests on `resource` (`widgets`, or `widgets/status` for a subresource)
/// the API server has served since it started, by every client: its own
/// `apiserver_request_total`, summed over response codes, groups and scopes.
///
/// # Errors
///
/// When `/metrics` cannot be read.
pub async fn apiserver_requests(client: &Client, verb: &str, resource: &str) -> Result<u64> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building the /metrics request")?;
    let text = client
        .request_text(request)
        .await
        .context("reading the API server's /metrics")?;
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let wanted = [
        format!("verb=\"{verb}\""),
        format!("resource=\"{resource}\""),
        format!("subresource=\"{subresource}\""),
    ];
    let mut total = 0.0;
    for line in text.lines() {
        let Some((labels, value)) = line
            .strip_prefix("apiserver_request_total{")
            .and_then(|rest| rest.rsplit_once("} "))
        else {
            continue;
        };
        let labels: Vec<&str> = labels.split(',').collect();
        if wanted.iter().all(|w| labels.contains(&w.as_str())) {
            total += value.trim().parse::<f64>().unwrap_or(0.0);
        }
    }
    // Counters are whole numbers, exact in an f64 far beyond what a test sends.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(total as u64)
}
