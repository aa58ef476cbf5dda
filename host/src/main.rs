//! The `reconciler-host` binary: `run`, `check`, `push`, `reconcile`, `test`, `rbac`, `drain`,
//! `new` and `componentize` (see `cli`).

fn main() -> std::process::ExitCode {
    reconciler_host::cli::main()
}
