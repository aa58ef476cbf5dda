//! Registry credentials: none, basic, bearer, or from a `kubernetes.io/dockerconfigjson`
//! document (`{"auths": {"HOST": {"auth": base64(user:password)}}}`, or `username` and
//! `password`, or `registrytoken`), the format of imagePullSecrets.

use std::collections::BTreeMap;

use base64::Engine;
use oci_client::secrets::RegistryAuth;

#[derive(Clone, Default, PartialEq, Eq)]
pub enum Auth {
    #[default]
    Anonymous,
    Basic {
        username: String,
        password: String,
    },
    Bearer(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        match self {
            Self::Anonymous => f.write_str("Anonymous"),
            Self::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Self::Bearer(_) => f.write_str("Bearer(***)"),
        }
    }
}

impl Auth {
    pub(super) fn to_registry_auth(&self) -> RegistryAuth {
        match self {
            Self::Anonymous => RegistryAuth::Anonymous,
            Self::Basic { username, password } => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
            Self::Bearer(token) => RegistryAuth::Bearer(token.clone()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("not a dockerconfigjson document: {0}")]
    Json(#[from] serde_json::Error),
    #[error("auths.{host}.auth: {why}")]
    BadAuth { host: String, why: String },
}

/// A parsed dockerconfigjson document.
#[derive(Debug, Default, serde::Deserialize)]
pub struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct Entry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    registrytoken: Option<String>,
}

impl DockerConfig {
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, CredentialsError> {
        Ok(serde_json::from_slice(bytes)?)
    }

    /// The credentials for `registry` (`host[:port]`; an entry may also be written as a URL),
    /// anonymous when the document has none.
    pub(crate) fn auth_for(&self, registry: &str) -> Result<Auth, CredentialsError> {
        let entry = self.auths.iter().find(|(key, _)| {
            let host = key
                .trim_start_matches("https://")
                .trim_start_matches("http://");
            host.split('/').next() == Some(registry)
        });
        let Some((host, entry)) = entry else {
            return Ok(Auth::Anonymous);
        };
        if let Some(token) = &entry.registrytoken {
            return Ok(Auth::Bearer(token.clone()));
        }
        if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
            return Ok(Auth::Basic {
                username: username.clone(),
                password: password.clone(),
            });
        }
        let bad = |why: &str| CredentialsError::BadAuth {
            host: host.clone(),
            why: why.to_owned(),
        };
        let Some(auth) = &entry.auth else {
            return Err(bad(
                "the entry has neither auth, username and password, nor registrytoken",
            ));
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .map_err(|_| bad("not base64"))?;
        let decoded = String::from_utf8(decoded).map_err(|_| bad("not UTF-8"))?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| bad("not user:password"))?;
        Ok(Auth::Basic {
            username: username.to_owned(),
            password: password.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dockerconfigjson_gives_each_registry_its_own_credentials() {
        let doc = br#"{"auths": {
            "127.0.0.1:5000": {"auth": "cmVjb25jaWxlcjpzM2NyZXQ="},
            "https://r.example.com/v1/": {"username": "u", "password": "p"},
            "t.example.com": {"registrytoken": "tok"}
        }}"#;
        let config = DockerConfig::parse(doc).unwrap();
        let basic = |u: &str, p: &str| Auth::Basic {
            username: u.into(),
            password: p.into(),
        };
        assert_eq!(
            config.auth_for("127.0.0.1:5000").unwrap(),
            basic("reconciler", "s3cret")
        );
        assert_eq!(config.auth_for("r.example.com").unwrap(), basic("u", "p"));
        assert_eq!(
            config.auth_for("t.example.com").unwrap(),
            Auth::Bearer("tok".into())
        );
        assert_eq!(config.auth_for("other:5000").unwrap(), Auth::Anonymous);
        let broken = DockerConfig::parse(br#"{"auths": {"h:1": {"auth": "!!"}}}"#).unwrap();
        assert_eq!(
            broken.auth_for("h:1").unwrap_err().to_string(),
            "auths.h:1.auth: not base64"
        );
        assert!(!format!("{:?}", basic("u", "secret")).contains("secret"));
    }
}
