//! The local single-node cluster (`tools/control-plane/cluster`: kubelet, containerd,
//! kube-scheduler and kube-controller-manager around the control plane), for tests that deploy
//! the host as Pods. One per machine; it needs root.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use reconciler_host_tests::LocalCluster;
//! let cluster = LocalCluster::up()?;               // reuses a healthy one
//! let client = cluster.client().await?;
//! LocalCluster::kubectl(&["get", "nodes"])?;
//! let clean = cluster.down()?;                     // "clean" when the machine is as it was
//! # let _ = (client, clean); Ok(()) }
//! ```

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::paths::repo_root;

/// A running local cluster. Dropping it runs `down`; [`LocalCluster::down`] also checks that
/// nothing was left on the machine.
pub struct LocalCluster;

fn script() -> PathBuf {
    repo_root().join("tools/control-plane/cluster")
}

/// Runs a command; its stdout, or an error with its output.
pub fn run(command: &mut Command) -> Result<String> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

impl LocalCluster {
    /// Starts the cluster, or keeps a healthy one. Fails at once without root.
    pub fn up() -> Result<Self> {
        ensure!(
            is_root(),
            "the local cluster runs a kubelet and containerd: it needs root"
        );
        run(Command::new(script()).args(["up", "--reuse"]))?;
        Ok(Self)
    }

    pub fn kubeconfig(&self) -> PathBuf {
        repo_root().join(".cache/cluster/control-plane/kubeconfig")
    }

    pub async fn client(&self) -> Result<kube::Client> {
        crate::client_for_kubeconfig(&self.kubeconfig()).await
    }

    /// The cluster's kubectl with `args`.
    pub fn kubectl(args: &[&str]) -> Result<String> {
        run(Command::new(script()).arg("kubectl").args(args))
    }

    /// `kubectl <args> -f -` with `input` on stdin.
    pub fn kubectl_stdin(args: &[&str], input: &str) -> Result<String> {
        use std::io::Write as _;
        let mut child = Command::new(script())
            .arg("kubectl")
            .args(args)
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(input.as_bytes())?;
        let output = child.wait_with_output()?;
        ensure!(
            output.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Loads an OCI archive into the node's containerd (pods use `imagePullPolicy: Never`).
    pub fn import(archive: &std::path::Path) -> Result<()> {
        run(Command::new(script()).arg("import").arg(archive)).map(drop)
    }

    /// Stops the cluster; returns what `check-clean` printed (`clean`, or what was left).
    pub fn down(self) -> Result<String> {
        std::mem::forget(self);
        run(Command::new(script()).arg("down"))?;
        run(Command::new(script()).arg("check-clean"))
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("down").status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
    })
}
