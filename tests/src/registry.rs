//! Local OCI registries (Debian's `docker-registry`, CNCF distribution 2.8) started by
//! `tools/registry/registry`, for tests that push and pull guests as OCI artifacts. Plain HTTP
//! on a loopback address, htpasswd basic auth as user `reconciler` with a generated password
//! (docs/registry.md).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use reconciler_host_tests::{PrivateRegistry, Registry};
//! let shared = Registry::shared().await?; // one per run, left running
//! let own = PrivateRegistry::start("pull-faults").await?;
//! own.stop().await?; // the registry is down: connections are refused
//! own.start_again().await?; // same address, credentials and storage
//! # let _ = (shared.address(), own.password()); Ok(()) }
//! ```
//!
//! [`Registry::shared`] runs `registry up --reuse --dir <target>/registry/shared` (directory
//! overridable with `RECONCILER_TEST_REGISTRY_DIR`) once per test binary: the script's lock and
//! `--reuse` let every binary of a run, and later runs, share one registry. Like the shared
//! control plane, a plain `cargo test` leaves it running; stop it with
//! `tools/registry/registry down --dir target/registry/shared`. `./dev test` gives it a
//! directory of its own run and stops it at the end, as it does the control plane.
//!
//! [`PrivateRegistry::start`] gives a test its own registry in its own directory, tied to the
//! test process (`up --exit-with <pid>`): removed with its storage on drop, or by a watchdog if
//! the process dies without dropping it. Only this type can stop and restart a registry, so a
//! test of an unreachable registry never disturbs the tests sharing the common one.
//!
//! [`PrivateRegistry::start_at`] listens on a given address instead, such as the local
//! cluster's node address that Pods reach.
//!
//! Cost: installing the two Debian packages once per machine (when `./dev setup` has not);
//! then starting a registry takes well under a second and about 20 MB of memory.

use std::ffi::OsStr;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use tokio::sync::OnceCell;

use crate::paths::{repo_root, target_dir};

/// Where the shared registry started by the tests lives.
pub const REGISTRY_DIR_ENV: &str = "RECONCILER_TEST_REGISTRY_DIR";

/// `tools/registry/registry`, the script that starts and stops registries.
pub fn registry_script() -> PathBuf {
    repo_root().join("tools/registry/registry")
}

/// A running registry: where it listens and who may use it.
#[derive(Debug, Clone)]
pub struct Registry {
    address: String,
    username: String,
    password: String,
    dir: PathBuf,
}

// The error is kept as text so every test in the binary reports the same cause, instead of
// each one trying (and waiting) again.
static SHARED: OnceCell<Result<Registry, String>> = OnceCell::const_new();

impl Registry {
    /// The registry shared by every test of this run (see the module docs). The first call may
    /// install the Debian packages and starts or reuses the registry; later calls return at once.
    pub async fn shared() -> Result<&'static Registry> {
        SHARED
            .get_or_init(|| async { start_shared().await.map_err(|e| format!("{e:#}")) })
            .await
            .as_ref()
            .map_err(|e| anyhow!("no registry for the tests: {e}"))
    }

    /// `host:port`, as image references name a registry (`127.0.0.1:17272/guests/network:1`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The one user the htpasswd file knows (`reconciler`).
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The password generated for the registry's directory; it stays until `down --purge`.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The registry's directory (storage in `data/`, log in `logs/registry.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads what `registry env --dir DIR` prints.
    async fn from_env_of(dir: &Path) -> Result<Self> {
        let printed = run_registry(["env".as_ref(), "--dir".as_ref(), dir.as_os_str()]).await?;
        let value = |name: &str| -> Result<String> {
            let prefix = format!("export {name}=");
            let value = printed
                .lines()
                .find_map(|line| line.strip_prefix(&prefix))
                .with_context(|| format!("`registry env` printed no {name}:\n{printed}"))?;
            // `printf %q` quotes only what needs it; none of these values does.
            if value.contains(['\\', '\'', '"', '$']) {
                bail!(
                    "`registry env` printed a quoted {name} ({value}), which these helpers do not parse"
                );
            }
            Ok(value.to_owned())
        };
        Ok(Self {
            address: value("REGISTRY")?,
            username: value("REGISTRY_USER")?,
            password: value("REGISTRY_PASSWORD")?,
            dir: dir.to_path_buf(),
        })
    }
}

async fn start_shared() -> Result<Registry> {
    let dir = std::env::var_os(REGISTRY_DIR_ENV)
        .map_or_else(|| target_dir().join("registry/shared"), PathBuf::from);
    run_registry([
        "up".as_ref(),
        "--reuse".as_ref(),
        "--dir".as_ref(),
        dir.as_os_str(),
    ])
    .await?;
    Registry::from_env_of(&dir).await
}

/// A registry of one's own, in its own directory; removed with its storage on drop.
/// Dereferences to [`Registry`] for its address and credentials.
#[derive(Debug)]
pub struct PrivateRegistry {
    registry: Registry,
}

impl PrivateRegistry {
    /// Starts a fresh registry in `<target>/registry/private-<name>-<pid>-<n>` on a free
    /// loopback port.
    pub async fn start(name: &str) -> Result<Self> {
        Self::start_with(name, &[]).await
    }

    /// As [`Self::start`], listening on `address` (`HOST:PORT`) instead: the local cluster's
    /// node address, which Pods reach, on the port a configuration names
    /// (`tests/tests/deploy.rs`). Fails if something else listens there.
    pub async fn start_at(name: &str, address: &str) -> Result<Self> {
        Self::start_with(name, &["--addr", address]).await
    }

    async fn start_with(name: &str, extra: &[&str]) -> Result<Self> {
        let dir = crate::paths::private_dir("registry", name);
        let pid = std::process::id().to_string();
        let mut args: Vec<&OsStr> = vec![
            "up".as_ref(),
            "--dir".as_ref(),
            dir.as_os_str(),
            "--exit-with".as_ref(),
            pid.as_ref(),
        ];
        args.extend(extra.iter().map(OsStr::new));
        run_registry(args).await?;
        Ok(Self {
            registry: Registry::from_env_of(&dir).await?,
        })
    }

    /// Stops the registry (`down`, SIGTERM): connections to its address are refused until
    /// [`Self::start_again`]. Its storage and credentials stay.
    pub async fn stop(&self) -> Result<()> {
        run_registry(["down".as_ref(), "--dir".as_ref(), self.dir.as_os_str()]).await?;
        Ok(())
    }

    /// Starts the stopped registry again on the same address, with the same credentials and
    /// storage, and waits until it answers. Fails if another process took the port meanwhile.
    pub async fn start_again(&self) -> Result<()> {
        let pid = std::process::id().to_string();
        run_registry([
            "up".as_ref(),
            "--dir".as_ref(),
            self.dir.as_os_str(),
            "--addr".as_ref(),
            self.address.as_ref(),
            "--exit-with".as_ref(),
            pid.as_ref(),
        ])
        .await?;
        Ok(())
    }
}

impl Deref for PrivateRegistry {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.registry
    }
}

impl Drop for PrivateRegistry {
    fn drop(&mut self) {
        // Blocking is fine here: it is a test process, and the watchdog would do it anyway if
        // this failed, one second after the process exits.
        let result = std::process::Command::new(registry_script())
            .args(["down".as_ref(), "--dir".as_ref(), self.dir.as_os_str()])
            .arg("--purge")
            .output();
        match result {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "registry down --purge --dir {} failed: {}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!(
                "could not run registry down --purge --dir {}: {e}",
                self.dir.display()
            ),
        }
    }
}

/// Runs the script with `args` ([`crate::paths::run_script`]).
async fn run_registry<I, S>(args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    crate::paths::run_script(&registry_script(), args).await
}

/// Runs `command` (a `reconciler-host` command with `--password-stdin`) with `password` on its
/// standard input, and collects its output.
pub fn with_password(
    mut command: std::process::Command,
    password: &str,
) -> Result<std::process::Output> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("start reconciler-host")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(format!("{password}\n").as_bytes())?;
    Ok(child.wait_with_output()?)
}
