//! Every shell script of the repository passes `shellcheck`: the build recipes, the control
//! plane's scripts, `./dev`, CI's entry point and the scaffold's templates (which are checked as
//! written, placeholders and all). The settings are the repository's `.shellcheckrc`.
//! `./dev setup` installs shellcheck (Debian's package).

use std::path::Path;
use std::process::Command;

use reconciler_host_tests::repo_root;

/// The tracked files that are shell: `*.sh`, and those whose `#!` line runs a shell.
fn shell_scripts(repo: &Path) -> Vec<String> {
    let listed = Command::new("git")
        .arg("ls-files")
        .current_dir(repo)
        .output()
        .expect("run git ls-files (the test lists the repository's scripts with git)");
    assert!(
        listed.status.success(),
        "git ls-files failed in {}: {}",
        repo.display(),
        String::from_utf8_lossy(&listed.stderr)
    );
    let is_shell = |path: &str| {
        if Path::new(path).extension().is_some_and(|ext| ext == "sh") {
            return true;
        }
        let Ok(text) = std::fs::read(repo.join(path)) else {
            return false; // listed but deleted in the work tree
        };
        let first = text.split(|&b| b == b'\n').next().unwrap_or_default();
        first.starts_with(b"#!")
            && String::from_utf8_lossy(first)
                .split(['/', ' '])
                .any(|word| matches!(word.trim(), "sh" | "bash"))
    };
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter(|path| is_shell(path))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_shell_script_passes_shellcheck() {
    let repo = repo_root();
    let scripts = shell_scripts(&repo);
    for expected in [
        "dev",
        ".ci/run",
        "guests/lib.sh",
        "host/templates/build.sh",
        "tools/control-plane/cp",
    ] {
        assert!(
            scripts.iter().any(|s| s == expected),
            "{expected} is not among the scripts found: {scripts:?}"
        );
    }
    let output = Command::new("shellcheck")
        .args(&scripts)
        .current_dir(&repo)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run shellcheck ({e}): `./dev setup` installs it (apt-get install shellcheck)")
        });
    assert!(
        output.status.success(),
        "shellcheck found problems in the repository's scripts (settings: .shellcheckrc):\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
