//! The Helm chart (`deploy/helm/reconciler-host`) through the real `helm` (v3, built from the Go
//! module proxy by `tools/clients/build.sh helm`): rendering it to documents for tests that read
//! what it would install, and running `helm` against a cluster.
//!
//! ```no_run
//! # fn demo() -> anyhow::Result<()> {
//! use reconciler_host_tests::helm::{Chart, Rendered};
//! let values = serde_json::json!({"mode": "sharded"});
//! let rendered: Rendered = Chart::render("reconciler-host", "ops", &values, &[])?;
//! let deployment = rendered.one("Deployment")?;
//! # let _ = deployment; Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::paths::repo_root;

/// The `helm` binary, built first if the cache lacks it.
pub fn helm() -> Result<PathBuf> {
    crate::clients::client("helm")
}

/// A `helm` command with its state (repositories, registry logins, cache) in `home`, so tests
/// never read or write the user's.
pub fn command(home: &Path) -> Result<Command> {
    let mut command = Command::new(helm()?);
    command
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("HELM_REGISTRY_CONFIG", home.join("registry.json"));
    Ok(command)
}

/// Runs `command`; its output, or an error with both streams when it fails.
pub fn run(command: &mut Command) -> Result<Output> {
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
    Ok(output)
}

pub struct Chart;

impl Chart {
    pub fn dir() -> PathBuf {
        repo_root().join("deploy/helm/reconciler-host")
    }

    /// `helm template RELEASE chart -n NAMESPACE` with `values` (a JSON object) and `args`.
    pub fn render(
        release: &str,
        namespace: &str,
        values: &Value,
        args: &[&str],
    ) -> Result<Rendered> {
        let output = Self::template(release, namespace, values, args)?;
        ensure!(
            output.status.success(),
            "helm template failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Rendered::parse(&String::from_utf8(output.stdout)?)
    }

    /// `helm template` as [`Self::render`] runs it, whatever its outcome.
    pub fn template(
        release: &str,
        namespace: &str,
        values: &Value,
        args: &[&str],
    ) -> Result<Output> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("values.json");
        std::fs::write(&file, serde_json::to_vec(values)?)?;
        let output = command(dir.path())?
            .args(["template", release])
            .arg(Self::dir())
            .args(["--namespace", namespace, "--values"])
            .arg(&file)
            .args(args)
            .output()?;
        Ok(output)
    }
}

/// The documents of a rendered chart, each with the template it came from.
pub struct Rendered {
    pub documents: Vec<(String, Value)>,
}

impl Rendered {
    pub fn parse(text: &str) -> Result<Self> {
        let mut documents = Vec::new();
        for document in text.split("\n---") {
            let source = document
                .lines()
                .find_map(|l| l.strip_prefix("# Source: "))
                .unwrap_or_default()
                .to_owned();
            let value: Value = serde_yaml::from_str(document)
                .with_context(|| format!("a rendered document of {source}"))?;
            if !value.is_null() {
                documents.push((source, value));
            }
        }
        Ok(Self { documents })
    }

    /// The documents of one kind.
    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.documents
            .iter()
            .filter(|(_, d)| d["kind"] == kind)
            .map(|(_, d)| d)
            .collect()
    }

    /// The documents rendered from one template file (`templates/rbac.yaml`).
    pub fn from_template(&self, file: &str) -> Vec<&Value> {
        self.documents
            .iter()
            .filter(|(source, _)| source.ends_with(file))
            .map(|(_, d)| d)
            .collect()
    }

    /// The one document of `kind`.
    pub fn one(&self, kind: &str) -> Result<&Value> {
        match self.of_kind(kind).as_slice() {
            [one] => Ok(one),
            other => bail!("{} documents of kind {kind}, not one", other.len()),
        }
    }
}
