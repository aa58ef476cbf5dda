//! `./dev robustness`: runs the robustness suite (seeded faults under load, a recorded history,
//! the offline checker) and prints each run's figures; exits non-zero, naming the seed, when a
//! run shows a violation. `--check DIR` runs the checker again on a saved run.
//!
//! A campaign (`--seeds A-B`, or `--campaign N` from `--first-seed`) runs unattended: a run the
//! harness could not complete (a control plane that would not start, say) is reported and the
//! campaign goes on; at the end a table and the totals are printed and written to
//! `target/robustness/campaign-<mode>-<first>-<last>.md`, and every run's files stay in its own
//! directory. `--cpu-hog` keeps one core busy for the whole run (a host left one core).

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
    #[arg(long, conflicts_with = "campaign")]
    seeds: Option<String>,
    /// A campaign of this many seeds, from `--first-seed` on.
    #[arg(long)]
    campaign: Option<u64>,
    /// The first seed of `--campaign`.
    #[arg(long, default_value_t = 1000)]
    first_seed: u64,
    /// Keep one core busy (a spinning thread) during every run: the replicas, the control
    /// plane and the harness share what is left.
    #[arg(long)]
    cpu_hog: bool,
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
    let seeds: Vec<u64> = match (&args.seed, &args.seeds, args.campaign) {
        (Some(s), _, _) => vec![*s],
        (None, Some(range), _) => {
            let (a, b) = range
                .split_once('-')
                .context("--seeds takes FIRST-LAST, e.g. 1-20")?;
            (a.parse()?..=b.parse()?).collect()
        }
        (None, None, Some(n)) => (args.first_seed..args.first_seed + n).collect(),
        (None, None, None) => vec![1],
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
    let mut incomplete: Vec<String> = Vec::new();
    let _hog = args.cpu_hog.then(CpuHog::start);
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
            match run(&profile).await {
                Ok((_, report)) => {
                    print_report(&report, &profile.out);
                    reports.push(report);
                }
                // One seed alone: its error is the answer. In a campaign, the others still run.
                Err(e) if seeds.len() == 1 && modes.len() == 1 => {
                    return Err(e.context(format!("seed {seed} ({} mode)", mode_name(*mode))));
                }
                Err(e) => {
                    let line = format!(
                        "seed {seed} ({} mode) did not complete: {e:#}; files in {}",
                        mode_name(*mode),
                        profile.out.display()
                    );
                    eprintln!("{line}");
                    incomplete.push(line);
                }
            }
        }
    }
    if reports.is_empty() && incomplete.is_empty() {
        return Ok(());
    }
    let table = table(&reports, &incomplete, args.cpu_hog);
    println!("\n{table}");
    if seeds.len() > 1 {
        let name = format!(
            "campaign-{}-{}-{}.md",
            args.mode,
            seeds.first().unwrap_or(&0),
            seeds.last().unwrap_or(&0)
        );
        let file = reconciler_host_tests::paths::target_dir()
            .join("robustness")
            .join(name);
        std::fs::write(&file, &table).with_context(|| format!("writing {}", file.display()))?;
        println!("(written to {})", file.display());
    }
    let failed: Vec<&Report> = reports
        .iter()
        .filter(|r| !r.violations.is_empty())
        .collect();
    for line in &incomplete {
        eprintln!("INCOMPLETE: {line}");
    }
    if !failed.is_empty() || !incomplete.is_empty() {
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
            "{} of {} runs showed violations, {} did not complete",
            failed.len(),
            reports.len(),
            incomplete.len()
        );
        std::process::exit(1);
    }
    Ok(())
}

/// The campaign's table (one row a run, as `docs/reliability.md` publishes it) and its totals.
fn table(reports: &[Report], incomplete: &[String], cpu_hog: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| mode | seed | faults | reconciles | traps | 409s | relists | longest convergence after a fault | longest wait of a change | final convergence | violations |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for r in reports {
        let _ = writeln!(
            out,
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
    let mut by_kind: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for r in reports {
        for (kind, n) in &r.faults_by_kind {
            *by_kind.entry(kind.as_str()).or_default() += n;
        }
    }
    let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let sum = |f: fn(&Report) -> usize| reports.iter().map(f).sum::<usize>();
    let longest = reports
        .iter()
        .max_by_key(|r| r.longest_convergence_ms)
        .map_or_else(String::new, |r| {
            format!(
                "{:.1} s (seed {}, {})",
                ms(r.longest_convergence_ms),
                r.seed,
                r.longest_convergence_after.as_deref().unwrap_or("-")
            )
        });
    let _ = writeln!(
        out,
        "\n{} runs{}: {} faults ({}), {} reconciles ({} trapped on purpose), {} relists after 410, longest convergence after a fault {longest}; {} runs with violations ({} violations), {} converged within the bound, {} did not complete.",
        reports.len(),
        if cpu_hog { " under a CPU hog" } else { "" },
        sum(|r| r.faults),
        kinds.join(", "),
        sum(|r| r.reconciles),
        sum(|r| r.traps),
        reports.iter().map(|r| u64::from(r.relists)).sum::<u64>(),
        reports.iter().filter(|r| !r.violations.is_empty()).count(),
        sum(|r| r.violations.len()),
        reports
            .iter()
            .filter(|r| r.final_convergence_ms.is_some())
            .count(),
        incomplete.len()
    );
    out
}

/// One core kept busy until dropped: a host under CPU pressure, left one core of two.
struct CpuHog {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CpuHog {
    fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        eprintln!("CPU hog: one core kept busy for the whole campaign");
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
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
