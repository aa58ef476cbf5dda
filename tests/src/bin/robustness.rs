//! `./dev robustness`: runs the robustness suite (seeded faults under load, a recorded history,
//! the offline checker) and prints each run's figures; exits non-zero, naming the seed, when a
//! run shows a violation. `--check DIR` runs the checker again on a saved run.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use reconciler_host_tests::robustness::check::{Report, check};
use reconciler_host_tests::robustness::harness::{Profile, mode_name, run};
use reconciler_host_tests::robustness::history::{History, Mode};
use reconciler_host_tests::robustness::schedule::{FaultKind, schedule};

#[derive(Parser)]
#[command(
    about = "Seeded faults under load against real host replicas; the history checked offline"
)]
struct Args {
    /// One seed; the schedule is the seed's alone.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// A range of seeds, `FIRST-LAST` (a campaign).
    #[arg(long)]
    seeds: Option<String>,
    /// How long faults are injected, per run (`90s`, `5m`).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// `leader` (two replicas, one leader), `sharded` (three on the ring) or `both`.
    #[arg(long, default_value = "both")]
    mode: String,
    /// Widgets created before the faults.
    #[arg(long, default_value_t = 200)]
    objects: usize,
    /// Workload changes per second.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Only these fault kinds (comma-separated), e.g. `replica-pause,blackhole`.
    #[arg(long)]
    kinds: Option<String>,
    /// Print the schedule and stop.
    #[arg(long)]
    schedule_only: bool,
    /// The deliberately broken build: the write fence never closes.
    #[arg(long)]
    break_fence: bool,
    /// Run the checker on a saved run directory instead.
    #[arg(long)]
    check: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(dir) = &args.check {
        let file = dir.join("history.json");
        let history: History = serde_json::from_slice(
            &std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?,
        )?;
        let report = check(&history);
        print_report(&report, dir);
        if !report.violations.is_empty() {
            std::process::exit(1);
        }
        return Ok(());
    }
    let seeds: Vec<u64> = match (&args.seed, &args.seeds) {
        (Some(s), _) => vec![*s],
        (None, Some(range)) => {
            let (a, b) = range
                .split_once('-')
                .context("--seeds takes FIRST-LAST, e.g. 1-20")?;
            (a.parse()?..=b.parse()?).collect()
        }
        (None, None) => vec![1],
    };
    let modes = match args.mode.as_str() {
        "both" => vec![Mode::Leader, Mode::Sharded],
        other => vec![Mode::parse(other)?],
    };
    let kinds = match &args.kinds {
        None => FaultKind::ALL.to_vec(),
        Some(list) => list
            .split(',')
            .map(|k| FaultKind::parse(k.trim()).with_context(|| format!("no fault kind {k:?}")))
            .collect::<Result<_>>()?,
    };
    let mut reports = Vec::new();
    for mode in &modes {
        for seed in &seeds {
            let profile = Profile {
                objects: args.objects,
                rate: args.rate,
                kinds: kinds.clone(),
                break_fence: args.break_fence,
                ..Profile::new(*seed, *mode, args.duration)
            };
            if args.schedule_only {
                println!("seed {seed}, {} mode:", mode_name(*mode));
                for f in schedule(&profile.plan()) {
                    println!("    {f}");
                }
                continue;
            }
            let (_, report) = run(&profile)
                .await
                .with_context(|| format!("seed {seed} ({} mode)", mode_name(*mode)))?;
            print_report(&report, &profile.out);
            reports.push(report);
        }
    }
    if reports.is_empty() {
        return Ok(());
    }
    println!(
        "\n| mode | seed | faults | reconciles | traps | 409s | relists | longest convergence after a fault | longest wait of a change | final convergence | violations |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &reports {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} s ({}) | {:.1} s | {} | {} |",
            mode_name(r.mode),
            r.seed,
            r.faults,
            r.reconciles,
            r.traps,
            r.conflicts,
            r.relists,
            ms(r.longest_convergence_ms),
            r.longest_convergence_after.as_deref().unwrap_or("-"),
            ms(r.longest_wait_ms),
            r.final_convergence_ms
                .map_or_else(|| "not within bound".into(), |m| format!("{:.1} s", ms(m))),
            r.violations.len()
        );
    }
    let failed: Vec<&Report> = reports
        .iter()
        .filter(|r| !r.violations.is_empty())
        .collect();
    if !failed.is_empty() {
        for r in &failed {
            eprintln!(
                "FAILED: seed {} ({} mode): {} violations; rerun with ./dev robustness --seed {} --mode {} --duration {}",
                r.seed,
                mode_name(r.mode),
                r.violations.len(),
                r.seed,
                mode_name(r.mode),
                humantime::format_duration(args.duration)
            );
        }
        eprintln!(
            "{} of {} runs showed violations",
            failed.len(),
            reports.len()
        );
        std::process::exit(1);
    }
    Ok(())
}

#[allow(clippy::cast_precision_loss)]
fn ms(m: u64) -> f64 {
    m as f64 / 1000.0
}

fn print_report(report: &Report, dir: &std::path::Path) {
    println!(
        "seed {} ({} mode): {} faults {:?}, {} reconciles ({} trapped), {} replica writes, {} conflicts, {} relists after 410; longest convergence after a fault {:.1} s; longest wait of a change {:.1} s; {} violations; files in {}",
        report.seed,
        mode_name(report.mode),
        report.faults,
        report.faults_by_kind,
        report.reconciles,
        report.traps,
        report.writes_by_replicas,
        report.conflicts,
        report.relists,
        ms(report.longest_convergence_ms),
        ms(report.longest_wait_ms),
        report.violations.len(),
        dir.display()
    );
    for v in &report.violations {
        println!("    {v}");
    }
}
