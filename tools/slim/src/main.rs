//! `reconciler-slim <in.wasm> <out.wasm>`: writes `in.wasm` slimmed (see the library docs) to
//! `out.wasm`, or unchanged with the reason when it cannot be. Exits non-zero only when the
//! input is not a component it can read or the output cannot be written.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: reconciler-slim <in.wasm> <out.wasm>");
        return ExitCode::from(2);
    };
    match run(input, output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reconciler-slim: {input}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(input: &str, output: &str) -> anyhow::Result<()> {
    let bytes = std::fs::read(input)?;
    let slimmed = reconciler_slim::slim(&bytes)?;
    std::fs::write(output, &slimmed.component)?;
    match slimmed.kept {
        Some(reason) => eprintln!("reconciler-slim: {input}: left as it is: {reason}"),
        None => eprintln!(
            "reconciler-slim: {input}: {} WASI stdio imports answered inside the guest ({} -> {} bytes)",
            slimmed.removed.len(),
            bytes.len(),
            slimmed.component.len()
        ),
    }
    Ok(())
}
