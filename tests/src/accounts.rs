//! Who the tests act as, when who acts is what is tested: the host and the tenants run as
//! ServiceAccounts of the control plane, each bound to exactly the RBAC the project documents,
//! never as the control plane's administrator (`system:masters`), so a rule the RBAC lacks fails
//! the test instead of passing unseen.
//!
//! - [`HostAccount`]: the host's account in its namespace, bound to what
//!   `reconciler-host rbac --config host.yaml --namespace NS --prefix P` prints (the chart
//!   renders the same: `tests/tests/chart.rs`); [`HostAccount::grant`] again before a reload
//!   that changes what the host needs. Start the host with its [`Account::kubeconfig`].
//! - [`team`]: an application team's client in its namespace, bound to the team Role of
//!   `examples/team-role.yaml` (quoted by `docs/reconcilers.md`).
//!
//! Tokens come from the TokenRequest API (`serviceaccounts/token`), which the API server serves
//! alone: `tools/control-plane/cp` gives it the signing key, and no controller-manager is needed.
//! Cost: one request per token, one `kubectl apply` (and a few lists) per [`HostAccount::grant`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, PostParams,
};
use serde_json::{Value, json};

use crate::control_plane::{ControlPlane, client_for_kubeconfig};
use crate::host::build_host_and_guests;
use crate::paths::{repo_root, target_dir};

/// How long a minted token lasts: longer than any test file runs.
const TOKEN_SECONDS: i64 = 4 * 3600;

/// The label `reconciler-host rbac` puts on everything it prints.
const PART_OF: &str = "app.kubernetes.io/part-of=reconciler-host";

/// The file that holds the team Role (`docs/reconcilers.md` includes it).
pub const TEAM_ROLE: &str = "examples/team-role.yaml";

/// A ServiceAccount with a kubeconfig that authenticates as it (a bound token).
pub struct Account {
    pub namespace: String,
    pub name: String,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Account {
    /// ServiceAccount `namespace/name`, created unless it exists, and a token for it.
    pub async fn create(cp: &ControlPlane, namespace: &str, name: &str) -> Result<Self> {
        let admin = cp.client().await?;
        let accounts = Api::<ServiceAccount>::namespaced(admin, namespace);
        if accounts.get_opt(name).await?.is_none() {
            let account = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                ..ServiceAccount::default()
            };
            accounts.create(&PostParams::default(), &account).await?;
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(TOKEN_SECONDS),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("a token for ServiceAccount {namespace}/{name}"))?
            .status
            .and_then(|status| status.token)
            .context("a TokenRequest answered without a token")?;
        let dir = tempfile::Builder::new().prefix("account-").tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            with_token(cp.kubeconfig(), &token, namespace, name)?,
        )?;
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            _dir: dir,
            kubeconfig,
        })
    }

    /// A kubeconfig file for this account (the control plane's server and CA, its token).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A client acting as this account, bound to the calling test's runtime.
    pub async fn client(&self) -> Result<kube::Client> {
        client_for_kubeconfig(&self.kubeconfig).await
    }
}

/// The admin kubeconfig at `admin` with its user replaced by `token`.
fn with_token(admin: &Path, token: &str, namespace: &str, name: &str) -> Result<String> {
    let text = std::fs::read_to_string(admin)
        .with_context(|| format!("reading kubeconfig {}", admin.display()))?;
    let mut config: Value = serde_yaml::from_str(&text)?;
    let user = format!("{namespace}-{name}");
    config["users"] = json!([{"name": user, "user": {"token": token}}]);
    for context in config["contexts"].as_array_mut().into_iter().flatten() {
        context["context"]["user"] = json!(user);
        context["context"]["namespace"] = json!(namespace);
    }
    Ok(serde_yaml::to_string(&config)?)
}

/// The host's ServiceAccount (`reconciler-host` in its namespace) and the RBAC it is bound to:
/// what `reconciler-host rbac` prints for its configuration, with the host's namespace as the
/// prefix of every object, so hosts of concurrent tests never share one.
pub struct HostAccount {
    pub account: Account,
    pub prefix: String,
}

impl HostAccount {
    /// The account in `namespace`, bound to nothing yet: [`Self::grant`] before the host starts.
    pub async fn create(cp: &ControlPlane, namespace: &str) -> Result<Self> {
        Ok(Self {
            account: Account::create(cp, namespace, "reconciler-host").await?,
            prefix: namespace.to_owned(),
        })
    }

    pub fn kubeconfig(&self) -> &Path {
        self.account.kubeconfig()
    }

    /// Binds the account to exactly what `reconciler-host rbac` prints for `config` (the
    /// host's `host.yaml`): applied, and what an earlier grant printed and this one does not
    /// deleted. The printed YAML.
    pub async fn grant(&self, cp: &ControlPlane, config: &str) -> Result<String> {
        let printed = self.printed(config)?;
        apply(cp, &printed)?;
        self.prune(cp, &names(&printed)?).await?;
        Ok(printed)
    }

    /// `reconciler-host rbac` for `config`, for this account.
    fn printed(&self, config: &str) -> Result<String> {
        build_host_and_guests()?;
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("host.yaml");
        std::fs::write(&file, config)?;
        let output = Command::new(target_dir().join("debug/reconciler-host"))
            .arg("rbac")
            .args(["--namespace", &self.account.namespace])
            .args(["--service-account", &self.account.name])
            .args(["--prefix", &self.prefix])
            .arg("--config")
            .arg(&file)
            .output()?;
        ensure!(
            output.status.success(),
            "reconciler-host rbac: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8(output.stdout)?)
    }

    /// Deletes the roles and bindings carrying this prefix that `keep` does not name.
    async fn prune(&self, cp: &ControlPlane, keep: &BTreeSet<Named>) -> Result<()> {
        let client = cp.client().await?;
        let ours =
            |name: &str| name == self.prefix || name.starts_with(&format!("{}-", self.prefix));
        let labelled = ListParams::default().labels(PART_OF);
        for (kind, resource) in [
            ("ClusterRole", ApiResource::erase::<ClusterRole>(&())),
            (
                "ClusterRoleBinding",
                ApiResource::erase::<ClusterRoleBinding>(&()),
            ),
            ("Role", ApiResource::erase::<Role>(&())),
            ("RoleBinding", ApiResource::erase::<RoleBinding>(&())),
        ] {
            let all = Api::<DynamicObject>::all_with(client.clone(), &resource);
            for object in all.list(&labelled).await? {
                let namespace = object.metadata.namespace.clone();
                let name = object.metadata.name.clone().unwrap_or_default();
                let named = (
                    kind.to_owned(),
                    namespace.clone().unwrap_or_default(),
                    name.clone(),
                );
                if !ours(&name) || keep.contains(&named) {
                    continue;
                }
                let api = match &namespace {
                    Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                    None => all.clone(),
                };
                api.delete(&name, &DeleteParams::default())
                    .await
                    .with_context(|| format!("deleting {kind} {name}, no longer printed"))?;
            }
        }
        Ok(())
    }
}

/// (kind, namespace, name) of a printed object.
type Named = (String, String, String);

/// Every object of a YAML stream, named.
fn names(yaml: &str) -> Result<BTreeSet<Named>> {
    let mut out = BTreeSet::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(document)?;
        if value.is_null() {
            continue;
        }
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        out.insert((
            text(&value["kind"]),
            text(&value["metadata"]["namespace"]),
            text(&value["metadata"]["name"]),
        ));
    }
    Ok(out)
}

/// `kubectl apply -f -` of `yaml`, as the control plane's administrator.
fn apply(cp: &ControlPlane, yaml: &str) -> Result<()> {
    let mut child = cp
        .kubectl()?
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(&mut child.stdin.take().context("stdin")?, yaml.as_bytes())?;
    let applied = child.wait_with_output()?;
    ensure!(
        applied.status.success(),
        "kubectl apply of the printed RBAC: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    Ok(())
}

/// The team Role of [`TEAM_ROLE`], as the file holds it.
pub fn team_role() -> Result<Role> {
    let path = repo_root().join(TEAM_ROLE);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    serde_yaml::from_str(&text).with_context(|| format!("{} is not one Role", path.display()))
}

/// A client for an application team of namespace `ns`: ServiceAccount `team` there, bound
/// (by the administrator) to the team Role of [`TEAM_ROLE`] and to nothing else.
pub async fn team(cp: &ControlPlane, ns: &str) -> Result<kube::Client> {
    let admin = cp.client().await?;
    let mut role = team_role()?;
    role.metadata.namespace = Some(ns.to_owned());
    let name = role
        .metadata
        .name
        .clone()
        .context("the team Role has no name")?;
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .with_context(|| format!("creating the team Role in {ns}"))?;
    let account = Account::create(cp, ns, "team").await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "team"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "team", "namespace": ns}],
    }))?;
    Api::<RoleBinding>::namespaced(admin, ns)
        .create(&PostParams::default(), &binding)
        .await?;
    account.client().await
}
