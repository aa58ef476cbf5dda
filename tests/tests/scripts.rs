//! Every shell script of the repository passes `shellcheck`: the build recipes, the control
//! plane's scripts, `./dev`, CI's entry point and the scaffold's templates (which are checked as
//! written, placeholders and all). The settings are the repository's `.shellcheckrc`, plus the
//! optional check `require-double-brackets`: `[[ ]]` is the one test syntax of the scripts
//! (it alone does patterns and `=~`, and it does not split words). They are also laid out as
//! `shfmt` lays them out (flags: [`SHFMT_FLAGS`]). `./dev setup` installs both (Debian's
//! packages).
//!
//! The scripts share one library, `tools/lib.sh`; the one copy of part of it, in the recipes a
//! scaffolded project carries alone (`guests/lib.sh`), is held to the original here.

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
        "tools/lib.sh",
    ] {
        assert!(
            scripts.iter().any(|s| s == expected),
            "{expected} is not among the scripts found: {scripts:?}"
        );
    }
    let output = Command::new("shellcheck")
        .arg("--enable=require-double-brackets")
        .args(&scripts)
        .current_dir(&repo)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run shellcheck ({e}): `./dev setup` installs it (apt-get install shellcheck)")
        });
    assert!(
        output.status.success(),
        "shellcheck found problems in the repository's scripts (settings: .shellcheckrc and \
         --enable=require-double-brackets):\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// How the scripts are laid out: bash (every script is, `.sh` or not), two-space indents (what
/// most of them used before shfmt), and `case` arms indented under their `case`.
/// `shfmt -w` with the same flags reformats a script.
const SHFMT_FLAGS: [&str; 3] = ["-ln=bash", "-i=2", "-ci"];

#[test]
fn every_shell_script_is_shfmt_formatted() {
    let repo = repo_root();
    let scripts = shell_scripts(&repo);
    let output = Command::new("shfmt")
        .args(SHFMT_FLAGS)
        .arg("--diff")
        .args(&scripts)
        .current_dir(&repo)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run shfmt ({e}): `./dev setup` installs it (apt-get install shfmt)")
        });
    assert!(
        output.status.success(),
        "shfmt would lay out these scripts differently; `shfmt {} -w FILE` rewrites them:\n{}{}",
        SHFMT_FLAGS.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The functions `name`s as bash defines them once `source` has run in `dir` (`declare -f`
/// prints them normalised, so indentation and comments do not count).
fn defined_by(dir: &Path, source: &str, names: &[&str]) -> String {
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!("source {source} && declare -f {}", names.join(" ")))
        .current_dir(dir)
        .output()
        .expect("run bash");
    assert!(
        output.status.success(),
        "sourcing {source} in {} did not define {names:?}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A project `reconciler-host new` writes holds `guests/lib.sh` alone (as `lib.sh`), so that
/// file carries a copy of the helpers of `tools/lib.sh` its recipes use; the copy must be the
/// same, or a project's build would say and install things differently from the repository's.
#[test]
fn a_projects_recipes_carry_the_shared_helpers_unchanged() {
    let repo = repo_root();
    let project = tempfile::tempdir().expect("a temporary directory");
    std::fs::copy(repo.join("guests/lib.sh"), project.path().join("lib.sh"))
        .expect("copy guests/lib.sh into the project");
    let helpers = ["say", "die", "need_debian_packages"];
    let shared = defined_by(&repo, "tools/lib.sh", &helpers);
    let copied = defined_by(project.path(), "./lib.sh", &helpers);
    assert_eq!(
        copied, shared,
        "guests/lib.sh's copy of say, die and need_debian_packages (for projects) differs from \
         tools/lib.sh's: make them the same"
    );
    let in_repository = defined_by(&repo, "guests/lib.sh", &["take_lock"]);
    assert!(
        in_repository.contains("flock"),
        "guests/lib.sh in the repository no longer sources tools/lib.sh"
    );
}
