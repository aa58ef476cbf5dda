//! Command line: `run` (the controller host), `check` (validate a guest, print its manifest),
//! `push` (a guest to a registry as a Wasm OCI artifact, [`crate::oci`]),
//! `reconcile` (one offline reconcile against objects from files, [`crate::cli::offline`];
//! prints every host call), `test` (folders of such cases against their pinned outputs),
//! `rbac` (the RBAC a configuration needs), `drain` (every guest unloaded and its finalizer
//! released, before an uninstall: [`drain`]), `new` (scaffold a guest in one of the supported
//! languages), `componentize` (the steps of a C or Go guest's build,
//! [`reconciler_componentize`]).
//! Logs go to stderr so that stdout carries only the commands' JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::json;

use crate::cli::offline::{OfflineRun, load_bytes, load_guest, local_runtime};
use crate::config::HostConfig;
use crate::supply::guest_set::{ActiveGuest, GrantError, Origin};

mod drain;
pub(crate) mod offline;
pub(crate) mod rbac;
mod rollout;
mod run;
pub mod scaffold;

#[derive(Parser)]
#[command(
    name = "reconciler-host",
    version,
    about = "Kubernetes controllers whose reconcile logic is a WebAssembly component"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How to reach a registry from the command line.
#[derive(clap::Args, Debug)]
struct RegistryArgs {
    /// Speak plain HTTP to the registry (a local test registry); HTTPS otherwise.
    #[arg(long)]
    plain_http: bool,
    /// Basic auth user; the password is read from standard input (`--password-stdin`).
    #[arg(long, requires = "password_stdin")]
    username: Option<String>,
    #[arg(long, requires = "username")]
    password_stdin: bool,
    /// Credentials from a dockerconfigjson file (`~/.docker/config.json`, an imagePullSecret's
    /// `.dockerconfigjson`), for the reference's registry.
    #[arg(long, conflicts_with = "username")]
    auth_file: Option<PathBuf>,
    /// Run a module only if this key (a `cosign generate-key-pair` public key) signed its
    /// digest; repeat for several. Without it, signatures are not checked.
    #[arg(long = "verify-key", value_name = "FILE")]
    verify_keys: Vec<PathBuf>,
    /// Also run a module signed keyless (cosign's flags): its certificate must chain to this
    /// Sigstore `trusted_root.json` and name `--certificate-oidc-issuer` and
    /// `--certificate-identity` (or `--certificate-identity-regexp`).
    #[arg(long, value_name = "FILE", requires = "certificate_oidc_issuer")]
    trusted_root: Option<PathBuf>,
    #[arg(long, value_name = "SUBJECT", requires = "trusted_root")]
    certificate_identity: Option<String>,
    #[arg(
        long,
        value_name = "REGEX",
        requires = "trusted_root",
        conflicts_with = "certificate_identity"
    )]
    certificate_identity_regexp: Option<String>,
    #[arg(long, value_name = "ISSUER", requires = "trusted_root")]
    certificate_oidc_issuer: Option<String>,
}

impl RegistryArgs {
    fn pull_options(&self) -> anyhow::Result<crate::cli::offline::PullOptions> {
        let keyless = match (&self.trusted_root, &self.certificate_oidc_issuer) {
            (Some(root), Some(issuer)) => {
                let identity = crate::oci::CertificateIdentity {
                    issuer: issuer.clone(),
                    subject: self.certificate_identity.clone(),
                    subject_reg_exp: self.certificate_identity_regexp.clone(),
                };
                let keyless = crate::oci::Keyless::load(root, &[identity])
                    .map_err(|e| anyhow::anyhow!("--trusted-root: {e}"))?;
                Some(keyless)
            }
            _ => None,
        };
        let trusted = if self.verify_keys.is_empty() && keyless.is_none() {
            None
        } else {
            let policy = crate::oci::TrustPolicy::load(&self.verify_keys, Path::new("."), keyless)
                .map_err(|e| anyhow::anyhow!("--verify-key: {e}"))?;
            Some(policy.named("--verify-key/--trusted-root"))
        };
        Ok(crate::cli::offline::PullOptions {
            plain_http: self.plain_http,
            trusted,
        })
    }

    fn auth(&self, registry: &str) -> anyhow::Result<crate::oci::Auth> {
        if let Some(username) = &self.username {
            let mut password = String::new();
            std::io::stdin()
                .read_line(&mut password)
                .context("--password-stdin: cannot read the password from standard input")?;
            return Ok(crate::oci::Auth::Basic {
                username: username.clone(),
                password: password.trim_end_matches(['\r', '\n']).to_owned(),
            });
        }
        match &self.auth_file {
            None => Ok(crate::oci::Auth::Anonymous),
            Some(path) => {
                let bytes = std::fs::read(path)
                    .with_context(|| format!("--auth-file: cannot read {}", path.display()))?;
                let config = crate::oci::DockerConfig::parse(&bytes)
                    .with_context(|| format!("--auth-file {}", path.display()))?;
                config
                    .auth_for(registry)
                    .with_context(|| format!("--auth-file {}", path.display()))
            }
        }
    }
}

/// `reconciler-host test`'s arguments.
#[derive(clap::Args)]
struct TestArgs {
    /// Case folders, or folders holding them.
    #[arg(default_value = "fixtures")]
    fixtures: Vec<PathBuf>,
    /// The guest of every case: a file, or `oci://…` as for `reconcile`.
    #[arg(long)]
    guest: Option<crate::cli::offline::GuestRef>,
    /// Without --guest, a case whose case.yaml says `guest: NAME` runs DIR/NAME.wasm.
    #[arg(
        long,
        value_name = "DIR",
        default_value = ".",
        conflicts_with = "guest"
    )]
    guests: PathBuf,
    #[command(flatten)]
    registry: RegistryArgs,
    /// The host configuration of a case without a host.yaml of its own.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The guest's clock in a case whose case.yaml sets no `now` (RFC 3339).
    #[arg(long, value_parser = humantime::parse_rfc3339)]
    now: Option<std::time::SystemTime>,
    /// Write each output as the expected one instead of comparing (also BLESS=1).
    #[arg(long, env = "BLESS", value_parser = clap::builder::FalseyValueParser::new())]
    bless: bool,
}

// Parsed once per process: the size of its largest variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the controller host: load every guest in the directory and reconcile.
    Run(run::RunArgs),
    /// Validate a guest against the WIT world (and a host configuration) and print its manifest.
    Check {
        /// The guest component.
        file: PathBuf,
        /// Also check the manifest against the grants of this host configuration.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run one reconcile offline and print `{"result": ..., "calls": [...]}` as JSON; with
    /// --events, also which keys each event wakes through the guest's watches.
    ///
    /// Objects are loaded into an in-memory cache; cluster writes are recorded (and applied to
    /// that cache, as the API server would), never sent; the network backend is in memory;
    /// outbound HTTP is answered from the --http exchanges, never sent.
    /// Without --config every call is allowed; with it, the guest's grant applies as in `run`.
    Reconcile {
        /// The guest: a file, or `oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]` (pulled into
        /// the host's cache, verified, loaded by digest from there when pinned).
        /// With --replay: another build to replay the record with.
        #[arg(long, required_unless_present = "replay")]
        guest: Option<crate::cli::offline::GuestRef>,
        #[command(flatten)]
        registry: RegistryArgs,
        /// Replay a reconcile `run` recorded (a grant's `record`): every host call answered
        /// from the record, with the recorded clock and random seed. Prints the result, the
        /// calls and `replay` (identical or where the build diverged); exits 1 when it
        /// diverged. Takes the recorded build unless --guest names another.
        #[arg(long, conflicts_with_all = ["objects", "http", "events", "kind", "key", "backend_state", "attempt", "now"])]
        replay: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        given: crate::cli::offline::Given,
    },
    /// Run every offline case in folders of fixtures, compare each output with the one pinned
    /// beside it and print a line per case; exits 1 when any differs.
    ///
    /// A case is a folder with case.yaml (key, kind; optionally guest, attempt, now),
    /// objects.yaml and expected.json, optionally events.yaml (then the key is optional),
    /// host.yaml, http.yaml and backend-state.json;
    /// each runs as `reconcile` runs it from inside that folder.
    Test(TestArgs),
    /// Validate a guest (as `check` does) and push it to a registry as a Wasm OCI artifact
    /// (CNCF layout: a `application/vnd.wasm.config.v0+json` config and one `application/wasm`
    /// layer). Prints the manifest digest (`sha256:…`) as its last line.
    Push {
        /// The guest component.
        file: PathBuf,
        /// Where: `oci://HOST[:PORT]/REPO[:TAG]`.
        reference: crate::oci::ModuleRef,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Print the RBAC the host configuration's grants need (YAML): one cluster role and binding
    /// per guest, the host's own (events) and the leader-election role, for a service account.
    Rbac {
        #[arg(long)]
        config: PathBuf,
        /// Only the grants of the guests in this directory (their manifest names); a guest
        /// there without a grant is reported on stderr.
        #[arg(long)]
        guests: Option<PathBuf>,
        /// The service account's namespace, where the lease lives too.
        #[arg(long, default_value = "reconciler-host")]
        namespace: String,
        #[arg(long, default_value = "reconciler-host")]
        service_account: String,
        /// Name prefix of every generated ClusterRole, Role and binding (several hosts in one
        /// cluster each need their own).
        #[arg(long, default_value = "reconciler-host")]
        prefix: String,
        /// Resolve resource names through the API server (KUBECONFIG) instead of guessing
        /// plurals from kinds.
        #[arg(long)]
        discover: bool,
        /// How the host may impersonate guests' ServiceAccounts: `constrained` (KEP-5284,
        /// Kubernetes 1.36 and later: only the verbs each grant needs) or `legacy` (servers
        /// without it: any verb, as those accounts only).
        #[arg(long, value_enum, default_value = "constrained")]
        impersonation: crate::cli::rbac::Impersonation,
    },
    /// Withdraw every grant of the hosts' configuration ConfigMap, wait until their Pods run no
    /// guest, then remove the finalizers the guests left from every object (the Helm chart's
    /// pre-delete hook: nothing stays stuck deleting after an uninstall).
    Drain(drain::DrainArgs),
    /// A Reconciler's rollout of a new module version (spec.rollout): `status` shows the
    /// phase, step, share and each gate with both versions' values; `promote`, `pause` and
    /// `abort` ask it of the hosts through the object (KUBECONFIG).
    Rollout(rollout::RolloutArgs),
    /// Write a new guest that builds and works: source, build.sh, the contract, its grant and
    /// one offline fixture (see its README.md and docs/guests/<lang>.md).
    New {
        #[arg(long, value_enum)]
        lang: crate::cli::scaffold::Language,
        /// The guest's name: its manifest name, grant key and file name (a DNS-1123 label).
        name: String,
        /// Where to write it (must not exist or be empty); default ./NAME.
        dir: Option<PathBuf>,
    },
    /// The component steps of a C or Go guest's build, which its `lib.sh` runs: bindings from
    /// the WIT, a wasip1 core module made a component, a Go guest's init run at build time.
    #[command(subcommand)]
    Componentize(reconciler_componentize::Command),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let command = match cli.command {
        // Off the async runtime: `preinit` runs Wizer on a runtime of its own.
        Command::Componentize(step) => return exit_code(reconciler_componentize::run(step)),
        command => command,
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match command {
            Command::Run(args) => crate::manager::run(args.resolve().await?).await,
            Command::Check { file, config } => check(file, config).await,
            Command::Push {
                file,
                reference,
                registry,
            } => push(file, &reference, &registry).await,
            Command::Reconcile {
                guest,
                registry,
                replay,
                config,
                given,
            } => reconcile(guest, &registry, replay, config.as_ref(), given).await,
            Command::Test(args) => test_fixtures(args).await,
            Command::New { lang, name, dir } => new_guest(lang, &name, dir),
            Command::Rbac {
                config,
                guests,
                namespace,
                service_account,
                prefix,
                discover,
                impersonation,
            } => {
                let options = crate::cli::rbac::Options {
                    service_account,
                    namespace,
                    prefix,
                    impersonation,
                };
                rbac(&config, guests, &options, discover).await
            }
            Command::Drain(args) => drain::drain(args).await,
            Command::Rollout(args) => rollout::rollout(args).await,
            Command::Componentize(_) => unreachable!("run before the async runtime starts"),
        }
    });
    exit_code(result)
}

/// `reconcile`: one offline reconcile of `guest` with what is `given`, or the replay of a
/// record.
async fn reconcile(
    guest: Option<crate::cli::offline::GuestRef>,
    registry: &RegistryArgs,
    replay: Option<PathBuf>,
    config: Option<&PathBuf>,
    given: crate::cli::offline::Given,
) -> anyhow::Result<()> {
    let config = load_config(config)?;
    let auth = match &guest {
        Some(crate::cli::offline::GuestRef::Module(m)) => registry.auth(m.registry())?,
        _ => crate::oci::Auth::Anonymous,
    };
    if let Some(record) = replay {
        return replay_record(crate::cli::offline::OfflineReplay {
            record,
            guest,
            auth,
            pull: registry.pull_options()?,
            config,
        })
        .await;
    }
    let Some(guest) = guest else {
        unreachable!("clap requires --guest without --replay");
    };
    let run = OfflineRun {
        guest,
        auth,
        pull: registry.pull_options()?,
        inputs: crate::cli::offline::Inputs {
            given,
            http_name: None,
            config,
        },
    };
    let output = run.reconcile().await?;
    out(&format!("{}\n", serde_json::to_string_pretty(&output)?))?;
    Ok(())
}

fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`| head`): end quietly, with the status a tool killed by
        // SIGPIPE has, as Unix tools do.
        Err(e) if closed_pipe(&e) => ExitCode::from(141),
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// Whether `e` is a write to a standard output whose reader has gone.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|cause| cause.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Writes `text` to standard output. Unlike `print!`, which panics when the reader has gone,
/// a closed pipe is an error the caller returns (and `main` ends on quietly).
fn out(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

fn new_guest(
    lang: crate::cli::scaffold::Language,
    name: &str,
    dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let written = crate::cli::scaffold::write(lang, name, &dir)?;
    out(&format!(
        "wrote {} files into {}; next: {}/build.sh (see its README.md)\n",
        written.len(),
        dir.display(),
        dir.display()
    ))?;
    Ok(())
}

/// An error and its causes on one line, each cause once: many error types already quote their
/// source in their own message, and `{:#}` would print it again.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.lines().next().unwrap_or_default().trim();
        if text.is_empty() || out.contains(text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(text);
    }
    out
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    // netlink-packet-route warns about every kernel attribute newer than itself: not actionable.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,netlink_packet_route=error"));
    let json = std::env::var("RECONCILER_LOG_FORMAT").is_ok_and(|f| f == "json");
    // Colours only for a person at a terminal: a redirected log stays plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn rbac(
    config: &std::path::Path,
    guests: Option<PathBuf>,
    options: &crate::cli::rbac::Options,
    discover: bool,
) -> anyhow::Result<()> {
    let config_file = HostConfig::load(config)?;
    let only = match guests {
        Some(dir) => Some(guest_names(&dir, &config_file).await?),
        None => None,
    };
    let resources: Box<dyn crate::cli::rbac::Resources> = if discover {
        Box::new(discovered_resources(&config_file).await?)
    } else {
        Box::new(crate::cli::rbac::Guess)
    };
    let objects =
        crate::cli::rbac::objects(&config_file, only.as_ref(), resources.as_ref(), options);
    out(&format!(
        "# The RBAC the grants in {} need, printed by `reconciler-host rbac`: regenerate, do not edit.\n{}",
        config.display(),
        crate::cli::rbac::to_yaml(&objects)?
    ))?;
    Ok(())
}

/// The manifest names of the guests in `dir`; those without a grant are reported.
async fn guest_names(
    dir: &std::path::Path,
    config: &HostConfig,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let runtime = local_runtime()?;
    let mut names = std::collections::BTreeSet::new();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for entry in entries {
        let file = entry?.path();
        if file.extension().is_none_or(|e| e != "wasm") {
            continue;
        }
        let loaded = load_guest(runtime.clone(), file.clone()).await?;
        // As in `run`: named by its grant key; only the RBAC of its grant matters here.
        let name = match ActiveGuest::admit(&Origin::file(&file), loaded, config) {
            Ok(admitted) => admitted.name().to_owned(),
            Err(GrantError::BeyondGrant { guest, .. }) => guest,
            Err(GrantError::NoGrant { guest, .. }) => {
                eprintln!(
                    "warning: {}: guest `{guest}` has no grant in the configuration; it would be refused",
                    file.display()
                );
                guest
            }
            Err(GrantError::NotItsGrant(impostor)) => {
                eprintln!("warning: {impostor}; it would be refused");
                continue;
            }
            // Only `Reconciler` objects carry their own grant; a file never does.
            Err(other) => {
                eprintln!("warning: {other}");
                continue;
            }
        };
        names.insert(name);
    }
    Ok(names)
}

/// Each granted kind's resource name, as the API server serves it.
async fn discovered_resources(config: &HostConfig) -> anyhow::Result<crate::cli::rbac::Discovered> {
    let client = kube::Client::try_default()
        .await
        .context("--discover needs a Kubernetes client configuration (KUBECONFIG)")?;
    let discovery = crate::cluster::discovery::Resolver::default();
    let mut found = std::collections::BTreeMap::new();
    let kinds = config
        .guests
        .values()
        .flat_map(|g| g.read.iter().chain(g.write.iter().map(|t| &t.kind)));
    for kind in kinds {
        if found.contains_key(kind) {
            continue;
        }
        let gvk = kube::core::GroupVersionKind::from(kind);
        let resolved = discovery
            .resolve(&client, &gvk)
            .await
            .with_context(|| format!("discovery of {kind}"))?;
        found.insert(kind.clone(), resolved.resource.plural);
    }
    Ok(crate::cli::rbac::Discovered(found))
}

fn load_config(path: Option<&PathBuf>) -> anyhow::Result<Option<HostConfig>> {
    path.map(|p| HostConfig::load(p))
        .transpose()
        .map_err(Into::into)
}

/// `push`: validated as `check` validates (a component of the contract's world whose
/// `manifest()` answers), then written to the registry.
async fn push(
    file: PathBuf,
    reference: &crate::oci::ModuleRef,
    registry: &RegistryArgs,
) -> anyhow::Result<()> {
    let auth = registry.auth(reference.registry())?;
    let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
    let loaded = load_bytes(local_runtime()?, bytes.clone(), file.clone()).await?;
    let interfaces = crate::oci::component_interfaces(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let digest =
        crate::oci::push(reference, &bytes, &interfaces, &auth, registry.plain_http).await?;
    eprintln!(
        "pushed {} (guest `{}`, {} bytes) to {reference}",
        file.display(),
        loaded.manifest.name,
        bytes.len()
    );
    out(&format!("{digest}\n"))?;
    Ok(())
}

async fn check(file: PathBuf, config: Option<PathBuf>) -> anyhow::Result<()> {
    let config = load_config(config.as_ref())?;
    let runtime = local_runtime()?;
    let loaded = load_guest(runtime, file.clone()).await?;
    let manifest = &loaded.manifest;
    let world = loaded.world();
    let grant = match &config {
        None => json!(null),
        // Judged as `run` judges it; the manifest is printed as the guest declares it.
        Some(config) => match ActiveGuest::admit(&Origin::file(&file), loaded.clone(), config) {
            Ok(admitted) => json!({ "granted": true, "key": admitted.name() }),
            Err(GrantError::NotItsGrant(impostor)) => {
                json!({ "granted": false, "reason": impostor.to_string() })
            }
            Err(GrantError::NoGrant { guest, .. }) => {
                json!({ "granted": false, "reason": format!("no grant for guest `{guest}`") })
            }
            Err(GrantError::BeyondGrant { missing, .. }) => {
                json!({ "granted": false, "reason": missing.to_string() })
            }
            Err(other) => json!({ "granted": false, "reason": other.to_string() }),
        },
    };
    let refused = grant.get("granted") == Some(&json!(false));
    let report = json!({ "file": loaded.file, "sha256": loaded.hash, "world": world, "manifest": manifest, "grant": grant });
    out(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    if refused {
        bail!(
            "{} would be refused: {}",
            loaded.file.display(),
            grant["reason"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// `test`: prints the report; an error (exit 1) when a case failed.
async fn test_fixtures(args: TestArgs) -> anyhow::Result<()> {
    let auth = match &args.guest {
        Some(crate::cli::offline::GuestRef::Module(m)) => args.registry.auth(m.registry())?,
        _ => crate::oci::Auth::Anonymous,
    };
    let run = crate::cli::offline::FixtureRun {
        guests: args.guest.map_or(
            crate::cli::offline::Guests::Dir(args.guests),
            crate::cli::offline::Guests::One,
        ),
        auth,
        pull: args.registry.pull_options()?,
        fixtures: args.fixtures,
        config: load_config(args.config.as_ref())?,
        now: args.now,
        bless: args.bless,
    };
    let report = run.run().await?;
    out(&report.text())?;
    match report.failed() {
        (0, _) => Ok(()),
        (failed, of) => bail!("{failed} of {of} fixtures failed"),
    }
}

/// `reconcile --replay`: prints the replay; an error (exit 1) when it diverged.
async fn replay_record(replay: crate::cli::offline::OfflineReplay) -> anyhow::Result<()> {
    let output = replay.replay().await?;
    out(&format!("{}\n", serde_json::to_string_pretty(&output)?))?;
    if output["replay"]["identical"] != true {
        anyhow::bail!(
            "the replay diverged from the record: {}",
            divergence(&output)
        );
    }
    Ok(())
}

/// A replay's divergence in one line: where, why, and the result if it differs.
fn divergence(output: &serde_json::Value) -> String {
    let replay = &output["replay"];
    let mut parts = Vec::new();
    if let Some(first) = replay["firstDivergence"].as_object() {
        let recorded = &first["recorded"];
        let reason = first["reason"].as_str().unwrap_or_default();
        // An HTTP exchange that differed is told as text: both requests, no recorded call.
        let what = match (recorded.as_object(), first["replayed"].as_str()) {
            (None, Some(text)) => text
                .strip_prefix(&format!("{reason}: "))
                .unwrap_or(text)
                .to_owned(),
            _ => format!(
                "recorded {}.{}",
                recorded["interface"].as_str().unwrap_or("-"),
                recorded["function"].as_str().unwrap_or("-"),
            ),
        };
        parts.push(format!("call {} ({reason}; {what})", first["call"]));
    }
    if replay["sameResult"] != true {
        parts.push(format!(
            "result {} (recorded {})",
            output["result"], replay["recorded"]["result"]
        ));
    }
    parts.join("; ")
}
