//! Per-guest identity in the configuration: the ServiceAccount a grant names
//! (`serviceAccount: NAMESPACE/NAME`), the host-wide `identity:` section, and the ServiceAccounts
//! a `Reconciler` may name (`reconcilers.allow.serviceAccounts`). What the host does with them is
//! `crate::sandbox::identity`'s.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often an identity's reads are reviewed again when `identity.recheck` is unset.
pub const DEFAULT_RECHECK: Duration = Duration::from_mins(5);

/// A ServiceAccount a guest writes as: every API write the guest causes is sent impersonating
/// it, so the API server authorizes it against that account's RBAC.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ServiceAccountRef {
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl ServiceAccountRef {
    /// The user name the API server gives the account's tokens, which impersonation names.
    pub(crate) fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The groups the API server gives every ServiceAccount of the namespace (and every
    /// authenticated user), which access reviews must name to see what impersonation sees.
    pub(crate) fn groups(&self) -> Vec<String> {
        vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated".to_owned(),
        ]
    }
}

impl fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl FromStr for ServiceAccountRef {
    type Err = AccountError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (namespace, name) = s
            .split_once('/')
            .ok_or_else(|| AccountError::Shape(s.to_owned()))?;
        crate::cluster::validation::dns1123_label("serviceAccount namespace", namespace)?;
        crate::cluster::validation::dns1123_subdomain("serviceAccount name", name)?;
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// Why a text is not a ServiceAccount (`NAMESPACE/NAME`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    #[error("serviceAccount {0:?}: write it NAMESPACE/NAME")]
    Shape(String),
    #[error(transparent)]
    Invalid(#[from] crate::cluster::validation::Invalid),
}

impl TryFrom<String> for ServiceAccountRef {
    type Error = AccountError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ServiceAccountRef> for String {
    fn from(account: ServiceAccountRef) -> Self {
        account.to_string()
    }
}

/// An entry of `reconcilers.allow.serviceAccounts`: one account (`NAMESPACE/NAME`) or every
/// account of a namespace (`NAMESPACE/*`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub struct AllowedAccount {
    pub(crate) namespace: String,
    /// None: every account in the namespace.
    pub(crate) name: Option<String>,
}

impl AllowedAccount {
    pub(crate) fn covers(&self, account: &ServiceAccountRef) -> bool {
        self.namespace == account.namespace && self.name.as_ref().is_none_or(|n| *n == account.name)
    }
}

impl TryFrom<String> for AllowedAccount {
    type Error = AccountError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        if let Some(namespace) = s.strip_suffix("/*") {
            crate::cluster::validation::dns1123_label("serviceAccounts namespace", namespace)?;
            return Ok(Self {
                namespace: namespace.to_owned(),
                name: None,
            });
        }
        let account: ServiceAccountRef = s.parse()?;
        Ok(Self {
            namespace: account.namespace,
            name: Some(account.name),
        })
    }
}

impl fmt::Display for AllowedAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            self.namespace,
            self.name.as_deref().unwrap_or("*")
        )
    }
}

/// `identity:` in the host configuration.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdentitySettings {
    /// Every guest must name a `serviceAccount`; one that does not is refused at load.
    #[serde(default)]
    pub(crate) required: bool,
    /// How often each identity's reads are reviewed again (`SubjectAccessReview`), so an RBAC
    /// change takes effect: a revoked read unloads the guest. Default: 5m.
    #[serde(default, with = "humantime_serde")]
    pub(crate) recheck: Option<Duration>,
}

impl IdentitySettings {
    pub(crate) fn recheck(&self) -> Duration {
        self.recheck
            .unwrap_or(DEFAULT_RECHECK)
            .max(Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_reads_as_namespace_slash_name_and_names_its_user_and_groups() {
        let account: ServiceAccountRef = "guests/greeter".parse().unwrap();
        assert_eq!(account.to_string(), "guests/greeter");
        assert_eq!(account.username(), "system:serviceaccount:guests:greeter");
        assert_eq!(
            account.groups(),
            [
                "system:serviceaccounts",
                "system:serviceaccounts:guests",
                "system:authenticated"
            ]
        );
        for bad in [
            "greeter",
            "Guests/greeter",
            "guests/",
            "/greeter",
            "a/b/c",
            "guests/x y",
        ] {
            assert!(bad.parse::<ServiceAccountRef>().is_err(), "{bad}");
        }
    }

    #[test]
    fn an_allowed_entry_covers_one_account_or_a_namespace() {
        let one = AllowedAccount::try_from("guests/greeter".to_owned()).unwrap();
        let all = AllowedAccount::try_from("guests/*".to_owned()).unwrap();
        let greeter: ServiceAccountRef = "guests/greeter".parse().unwrap();
        let other: ServiceAccountRef = "guests/other".parse().unwrap();
        let elsewhere: ServiceAccountRef = "kube-system/greeter".parse().unwrap();
        assert!(one.covers(&greeter) && !one.covers(&other));
        assert!(all.covers(&greeter) && all.covers(&other) && !all.covers(&elsewhere));
        assert_eq!(all.to_string(), "guests/*");
        assert!(AllowedAccount::try_from("*/*".to_owned()).is_err());
    }
}
