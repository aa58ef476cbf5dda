//! The `reconciler-host` binary: `run`, `check` and `reconcile` (see `cli`).

fn main() -> std::process::ExitCode {
    reconciler_host::cli::main()
}
