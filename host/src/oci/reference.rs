//! `oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]`.

use std::fmt;
use std::str::FromStr;

use oci_client::Reference;

/// A module's place in a registry. The registry is explicit: a bare `repo:tag` would mean
/// Docker Hub to most tools, which is never what a guest reference means here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleRef {
    reference: Reference,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text}: not a module reference ({why}); expected oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]"
)]
pub struct ModuleRefError {
    text: String,
    why: String,
}

impl ModuleRef {
    pub(crate) fn reference(&self) -> &Reference {
        &self.reference
    }

    /// The pinned manifest digest (`sha256:…`), if the reference has one.
    pub(crate) fn digest(&self) -> Option<&str> {
        self.reference.digest()
    }

    /// `host[:port]`, as `registries.insecure` lists it.
    pub(crate) fn registry(&self) -> &str {
        self.reference.registry()
    }

    /// `registry/repository[:tag]`: what a tag's last resolution is remembered under.
    pub(crate) fn tagged_name(&self) -> String {
        let base = format!(
            "{}/{}",
            self.reference.registry(),
            self.reference.repository()
        );
        match self.reference.tag() {
            Some(tag) => format!("{base}:{tag}"),
            None => format!("{base}:latest"),
        }
    }

    /// The same module pinned to `digest`.
    pub(crate) fn pinned(&self, digest: &str) -> Result<Self, ModuleRefError> {
        let base = format!(
            "oci://{}/{}",
            self.reference.registry(),
            self.reference.repository()
        );
        match self.reference.tag() {
            Some(tag) => format!("{base}:{tag}@{digest}"),
            None => format!("{base}@{digest}"),
        }
        .parse()
    }
}

impl FromStr for ModuleRef {
    type Err = ModuleRefError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| ModuleRefError {
            text: text.to_owned(),
            why: why.to_owned(),
        };
        let rest = text
            .strip_prefix("oci://")
            .ok_or_else(|| err("it does not start with oci://"))?;
        let (host, _) = rest
            .split_once('/')
            .ok_or_else(|| err("it names no repository"))?;
        // Registry hosts have a dot, a port or are `localhost` (the distribution spec's rule for
        // telling a registry from a first path component).
        if !(host.contains('.') || host.contains(':') || host == "localhost") {
            return Err(err(
                "the registry host must be explicit, e.g. registry.example.com or 127.0.0.1:5000",
            ));
        }
        if let Some((_, digest)) = rest.split_once('@') {
            let hex = digest
                .strip_prefix("sha256:")
                .ok_or_else(|| err("a digest must be sha256:"))?;
            if hex.len() != 64
                || !hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err(err("a sha256 digest is 64 lowercase hex digits"));
            }
        }
        let reference: Reference = rest.parse().map_err(|e| err(&format!("{e}")))?;
        Ok(Self {
            reference,
            text: text.to_owned(),
        })
    }
}

impl fmt::Display for ModuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowed_registry_covers_its_host_and_repository_prefix_only() {
        let module = |text: &str| text.parse::<ModuleRef>().unwrap();
        let whole: AllowedRegistry = "Registry.example.com:5000".parse().unwrap();
        assert!(whole.covers(&module("oci://registry.example.com:5000/team/guest:v1")));
        assert!(
            !whole.covers(&module("oci://registry.example.com/team/guest:v1")),
            "port"
        );
        assert!(!whole.covers(&module("oci://registry.example.com.evil.io:5000/team/g:v1")));
        let team: AllowedRegistry = "ghcr.io/team-a/".parse().unwrap();
        assert_eq!(team.to_string(), "ghcr.io/team-a");
        assert!(team.covers(&module("oci://ghcr.io/team-a/guest:v1")));
        assert!(team.covers(&module("oci://ghcr.io/team-a/sub/guest:v1")));
        assert!(
            !team.covers(&module("oci://ghcr.io/team-ab/guest:v1")),
            "a prefix ends at /"
        );
        assert!(!team.covers(&module("oci://ghcr.io/team-b/guest:v1")));
        for bad in [
            "https://ghcr.io",
            "",
            "/team",
            "ghcr.io/",
            "gh cr.io",
            "ghcr.io/a@b",
        ] {
            assert!(bad.parse::<AllowedRegistry>().is_err(), "{bad:?}");
        }
    }

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_reference_names_its_registry_repository_tag_and_digest() {
        let r: ModuleRef = "oci://127.0.0.1:5000/guests/greeter:v1".parse().unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.reference().repository(), "guests/greeter");
        assert_eq!(r.digest(), None);
        assert_eq!(r.tagged_name(), "127.0.0.1:5000/guests/greeter:v1");
        let pinned = r.pinned(DIGEST).unwrap();
        assert_eq!(pinned.digest(), Some(DIGEST));
        assert_eq!(
            pinned.to_string(),
            format!("oci://127.0.0.1:5000/guests/greeter:v1@{DIGEST}")
        );
        let by_digest: ModuleRef = format!("oci://registry.example.com/network@{DIGEST}")
            .parse()
            .unwrap();
        assert_eq!(by_digest.digest(), Some(DIGEST));
    }

    #[test]
    fn a_reference_without_scheme_registry_or_a_sha256_digest_is_refused_with_the_form() {
        for bad in [
            "127.0.0.1:5000/greeter",
            "oci://greeter:v1",
            "oci://library/greeter:v1",
            "oci://r.example.com/greeter@md5:abc",
            "oci://r.example.com/greeter@sha256:abc",
        ] {
            let err = bad.parse::<ModuleRef>().unwrap_err().to_string();
            assert!(
                err.starts_with(bad)
                    && err.ends_with("expected oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]"),
                "{bad}: {err}"
            );
        }
    }
}

/// An entry of `reconcilers.allow.registries`: a registry (`HOST[:PORT]`, as a module
/// reference names it) and, optionally, a repository prefix that ends at a `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowedRegistry {
    registry: String,
    prefix: Option<String>,
}

impl AllowedRegistry {
    /// `host[:port]`, lowercase.
    pub(crate) fn registry(&self) -> &str {
        &self.registry
    }

    /// Whether `module` names this registry, and a repository under the prefix if any.
    pub(crate) fn covers(&self, module: &ModuleRef) -> bool {
        if !module.registry().eq_ignore_ascii_case(&self.registry) {
            return false;
        }
        self.prefix.as_deref().is_none_or(|prefix| {
            let repository = module.reference.repository();
            repository == prefix
                || repository
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }
}

impl std::fmt::Display for AllowedRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.prefix {
            Some(prefix) => write!(f, "{}/{prefix}", self.registry),
            None => f.write_str(&self.registry),
        }
    }
}

impl std::str::FromStr for AllowedRegistry {
    type Err = NotARegistry;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |why: &'static str| NotARegistry {
            text: text.to_owned(),
            why,
        };
        if text.contains("://") {
            return Err(bad("a scheme is not part of it"));
        }
        let (registry, prefix) = match text.split_once('/') {
            Some((registry, prefix)) => (registry, Some(prefix.trim_end_matches('/'))),
            None => (text, None),
        };
        if registry.is_empty()
            || !registry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
        {
            return Err(bad("the registry is not a host[:port]"));
        }
        if prefix.is_some_and(|p| p.is_empty() || p.contains(['@', ':', ' '])) {
            return Err(bad("the path is not a repository prefix"));
        }
        Ok(Self {
            registry: registry.to_ascii_lowercase(),
            prefix: prefix.map(ToOwned::to_owned),
        })
    }
}

/// Why a text is not an allowed registry entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("registry {text:?}: {why}; expected HOST[:PORT] or HOST[:PORT]/PATH (no scheme)")]
pub(crate) struct NotARegistry {
    text: String,
    why: &'static str,
}

impl<'de> serde::Deserialize<'de> for AllowedRegistry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
