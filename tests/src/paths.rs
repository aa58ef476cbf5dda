//! Where things are: the repository, the `cp` script, the built binaries, cargo's target dir.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The repository root (the directory holding the workspace `Cargo.toml`).
pub fn repo_root() -> PathBuf {
    // This crate lives at <repo>/tests; the path is fixed at compile time.
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        Path::to_path_buf,
    )
}

/// `tools/control-plane/cp`, the script that starts, stops and restarts control planes.
pub fn cp_script() -> PathBuf {
    repo_root().join("tools/control-plane/cp")
}

/// The directory holding the built `kube-apiserver`, `etcd` and `kubectl`
/// (`tools/control-plane/build.sh --print`). They exist once any `cp up` has run.
pub fn control_plane_bin_dir() -> Result<PathBuf> {
    let script = repo_root().join("tools/control-plane/build.sh");
    let out = Command::new(&script)
        .arg("--print")
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} --print failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The built `kubectl` (matching the control plane's version).
pub fn kubectl() -> Result<PathBuf> {
    let path = control_plane_bin_dir()?.join("kubectl");
    if !path.is_file() {
        bail!(
            "{} is not built yet; run `tools/control-plane/cp up` (or tools/control-plane/build.sh) once",
            path.display()
        );
    }
    Ok(path)
}

/// Cargo's target directory for the running test binary (`<target>/<profile>/deps/<bin>`), so
/// control-plane state lands beside the build (and `cargo clean` removes it), wherever
/// `CARGO_TARGET_DIR` points. Falls back to `<repo>/target`.
pub fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .find(|dir| dir.file_name().is_some_and(|name| name == "deps"))
                .and_then(Path::parent)
                .and_then(Path::parent)
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| repo_root().join("target"))
}

/// `<target>/<kind>/private-<name>-<pid>-<n>`: a state directory of its own for one private
/// server (a control plane, a registry), unique across processes and calls, `name` made safe
/// for a path and a command line.
pub fn private_dir(kind: &str, name: &str) -> PathBuf {
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    target_dir().join(format!(
        "{kind}/private-{clean}-{}-{}",
        std::process::id(),
        STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ))
}

/// Runs a project script (`cp`, `registry`) with `args` and returns its stdout; on failure the
/// error carries its whole stderr (which already includes the tail of its servers' logs).
pub async fn run_script<I, S>(script: &Path, args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    run_script_with_env(script, args, &[]).await
}

/// As [`run_script`], with more environment variables for the script.
pub async fn run_script_with_env<I, S>(
    script: &Path,
    args: I,
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let out = tokio::process::Command::new(script)
        .args(&args)
        .envs(env.iter().copied())
        .kill_on_drop(false)
        .output()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "`{} {shown}` failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
