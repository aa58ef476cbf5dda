//! Running `reconciler-host run` as a real process against a control plane: its configuration,
//! its guest directory, its HTTP endpoints, and killing or stopping it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use reconciler_host::sandbox::runtime::{Runtime, RuntimeOptions};

use crate::paths::{repo_root, target_dir};
use crate::wait::wait_until;

/// Which build of the host a process runs: the tests run the debug build (`./dev build` shares
/// its artefacts with `cargo test`); the benches the release build, whose figures are the ones
/// users get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Debug,
    Release,
}

impl Profile {
    /// The `reconciler-host` binary of this build.
    pub fn host_binary(self) -> PathBuf {
        let dir = match self {
            Profile::Debug => "debug",
            Profile::Release => "release",
        };
        target_dir().join(dir).join("reconciler-host")
    }
}

/// Builds the debug host binary and the guests once per test process (both are incremental).
pub fn build_host_and_guests() -> Result<()> {
    build_host_and_guests_as(Profile::Debug)
}

/// Builds the `profile` host binary and the guests once per process (`./dev build`, with
/// `--release` for [`Profile::Release`]).
pub fn build_host_and_guests_as(profile: Profile) -> Result<()> {
    static DEBUG: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    static RELEASE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let (built, args): (_, &[&str]) = match profile {
        Profile::Debug => (&DEBUG, &["build"]),
        Profile::Release => (&RELEASE, &["build", "--release"]),
    };
    built
        .get_or_init(|| {
            // `dev build` runs cargo without the variables cargo set for this process, so the
            // nested build reuses the outer build's artefacts.
            let what = format!("./dev {} (guests and host binary)", args.join(" "));
            let status = Command::new(repo_root().join("dev"))
                .args(args)
                .stdout(Stdio::null())
                .status()
                .map_err(|e| format!("{what}: {e}"))?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("{what} failed: {status}"))
            }
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// `reconciler-host run` from the `profile` build with the host configuration `config` and the
/// guest directory `guests`, serving on `127.0.0.1:port`, against `kubeconfig`. The caller adds
/// its own flags, environment and output, then spawns it.
pub fn run_command(
    profile: Profile,
    config: &Path,
    guests: &Path,
    port: u16,
    kubeconfig: &Path,
) -> Command {
    let mut command = Command::new(profile.host_binary());
    command
        .arg("run")
        .arg("--config")
        .arg(config)
        .arg("--guests")
        .arg(guests)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("KUBECONFIG", kubeconfig);
    command
}

/// A built guest component.
pub fn guest_component(name: &str) -> Result<PathBuf> {
    build_host_and_guests()?;
    let path = target_dir().join("guests").join(format!("{name}.wasm"));
    anyhow::ensure!(path.exists(), "{} was not built", path.display());
    Ok(path)
}

/// The file a built guest runs from in a guest directory: `<the name it declares>.wasm`, as it
/// is deployed. A grant belongs to the file's name, never to the name a guest declares
/// (`host/src/supply/guest_set/source.rs`), so a port or variant (`network-go`, `greeter-c`, `naming-altered`)
/// runs as the guest it stands in for, under that guest's grant, metrics and field manager.
/// A component that does not load has no name of its own and keeps its build's.
pub async fn deployed_file_name(component: &str) -> Result<String> {
    static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    let path = guest_component(component)?;
    let fallback = format!("{component}.wasm");
    // Loading blocks (and drives its own reactor): off the test's async runtime.
    tokio::task::spawn_blocking(move || {
        let runtime = RUNTIME
            .get_or_init(|| {
                // The hosts' compile cache: their load of the same bytes is then a hit.
                Runtime::new(&RuntimeOptions {
                    cache_dir: Some(target_dir().join("test-compile-cache")),
                    ..RuntimeOptions::default()
                })
                .map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("a runtime to read guest manifests: {e}"))?;
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        Ok(runtime
            .load(&bytes, &path)
            .map_or(fallback, |guest| format!("{}.wasm", guest.manifest.name)))
    })
    .await?
}

/// What a host process is started with.
pub struct HostOptions<'a> {
    pub kubeconfig: &'a Path,
    /// The host configuration (YAML text).
    pub config: String,
    /// Built guests (`target/guests/<name>.wasm`) copied into its directory before it starts,
    /// each as [`deployed_file_name`].
    pub guests: Vec<&'a str>,
    /// Only this namespace is watched (`--watch-namespace`), so concurrent tests don't meet.
    pub namespace: Option<&'a str>,
    pub extra_args: Vec<String>,
}

/// A running `reconciler-host run`. Killed when dropped.
pub struct HostProcess {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub port: u16,
}

impl HostProcess {
    pub async fn start(options: HostOptions<'_>) -> Result<Self> {
        Self::start_with_env(options, &[]).await
    }

    /// As [`Self::start`], with more environment variables for the process, e.g.
    /// `("RECONCILER_LOG_FORMAT", "json")` for a log [`Self::json_log`] can read.
    pub async fn start_with_env(options: HostOptions<'_>, env: &[(&str, &str)]) -> Result<Self> {
        build_host_and_guests()?;
        let dir = tempfile::Builder::new().prefix("host-").tempdir()?;
        let guests = dir.path().join("guests");
        std::fs::create_dir(&guests)?;
        for guest in &options.guests {
            std::fs::copy(
                guest_component(guest)?,
                guests.join(deployed_file_name(guest).await?),
            )?;
        }
        let config = dir.path().join("host.yaml");
        std::fs::write(&config, &options.config)?;
        let port = free_port()?;
        let log = std::fs::File::create(dir.path().join("host.log"))?;
        let mut command = run_command(Profile::Debug, &config, &guests, port, options.kubeconfig);
        command
            .args(&options.extra_args)
            .env("RUST_LOG", "info,reconciler_host=debug")
            .envs(env.iter().copied())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(ns) = options.namespace {
            command.args(["--watch-namespace", ns]);
        }
        // The shared compile cache, unless the test gives the host a cache of its own.
        if !options.extra_args.iter().any(|a| a == "--cache-dir") {
            command
                .arg("--cache-dir")
                .arg(target_dir().join("test-compile-cache"));
        }
        let child = command.spawn().context("start reconciler-host")?;
        let host = Self {
            child: Some(child),
            dir,
            port,
        };
        wait_until(
            "the host to serve /healthz",
            Duration::from_secs(60),
            || host.get("/healthz"),
        )
        .await
        .map_err(|e| e.context(host.log_tail()))?;
        Ok(host)
    }

    /// Replaces (or adds) a guest file in the host's directory, by rename as deployments do.
    pub fn put_guest(&self, file_name: &str, component: &str) -> Result<()> {
        let guests = self.dir.path().join("guests");
        let tmp = guests.join(format!(".{file_name}.tmp"));
        std::fs::copy(guest_component(component)?, &tmp)?;
        std::fs::rename(&tmp, guests.join(file_name))?;
        Ok(())
    }

    pub async fn get(&self, path: &str) -> Result<String> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let output = tokio::process::Command::new("curl")
            .args(["-sf", "--max-time", "5", &url])
            .output()
            .await?;
        if !output.status.success() {
            bail!("GET {url} failed ({})", output.status);
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `GET path` whatever its status (`/readyz` answers 503 with its reason): the status
    /// code and the body.
    pub async fn get_any(&self, path: &str) -> Result<(u16, String)> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let output = tokio::process::Command::new("curl")
            .args(["-s", "--max-time", "5", "-w", "\n%{http_code}", &url])
            .output()
            .await?;
        if !output.status.success() {
            bail!("GET {url} failed ({})", output.status);
        }
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        Ok((code.trim().parse()?, body.to_owned()))
    }

    /// The value of one metric sample (`name{labels}` exactly as exposed), or 0 when absent.
    pub async fn metric(&self, series: &str) -> Result<f64> {
        let text = self.get("/metrics").await?;
        Ok(text
            .lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.trim().split(' ').next()?.parse().ok())
            })
            .unwrap_or(0.0))
    }

    /// `GET /shards` (sharded mode: identity, members, slots, keys per guest), parsed.
    pub async fn shards(&self) -> Result<serde_json::Value> {
        let text = self.get("/shards").await?;
        serde_json::from_str(&text).with_context(|| format!("/shards is not JSON: {text}"))
    }

    /// The process id, while it runs: for reading `/proc/<pid>/status`.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: the process dies mid-work, as on a node failure.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// SIGTERM and wait: the graceful path.
    pub async fn terminate(&mut self) -> Result<std::process::ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("already stopped")
        };
        let pid = child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        let status = tokio::task::spawn_blocking(move || child.wait()).await??;
        Ok(status)
    }

    /// SIGTERM, then waits at most `limit` for the process to exit. Returns its exit status
    /// (none if it was still running at `limit`, when it is killed instead) and how long it took.
    pub async fn terminate_within(
        &mut self,
        limit: Duration,
    ) -> Result<(Option<std::process::ExitStatus>, Duration)> {
        let Some(child) = self.child.as_mut() else {
            bail!("already stopped")
        };
        let pid = child.id().to_string();
        let started = std::time::Instant::now();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        loop {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok((Some(status), started.elapsed()));
            }
            if started.elapsed() >= limit {
                self.kill()?;
                return Ok((None, started.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("host.log")).unwrap_or_default()
    }

    /// The log's lines that are JSON objects (a host started with
    /// `RECONCILER_LOG_FORMAT=json`), in the order written, each with its `timestamp` parsed.
    pub fn json_log(&self) -> Vec<(SystemTime, serde_json::Value)> {
        self.log()
            .lines()
            .filter_map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).ok()?;
                let at = humantime::parse_rfc3339(value.get("timestamp")?.as_str()?).ok()?;
                Some((at, value))
            })
            .collect()
    }

    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "host log (last 40 lines):\n{}",
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// A loopback port free at the time of the call, for a host's `--listen`.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A log line without terminal colour sequences (CSI: `ESC [ parameters final-byte`), as the
/// host's text logs carry them around field names.
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
