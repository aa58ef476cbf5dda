//! `http:` in a grant: the URLs a guest may call through `wasi:http/outgoing-handler`, the
//! methods per URL prefix, and the credentials the host adds to matching requests (read from
//! Secrets, never shown to the guest). The rules that apply them are in
//! `crate::sandbox::capabilities::http`; docs/http.md describes both.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::http_path::normalise_path;

/// One prefix a guest may call, with what the host does for requests under it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRule {
    /// `scheme://host[:port]/path-prefix`: a request matches when its scheme, host and port
    /// are these and its path is the prefix or continues it after a `/`.
    pub(crate) prefix: UrlPrefix,
    /// Methods allowed under the prefix (upper case); unset: `GET` and `HEAD`.
    #[serde(default)]
    pub(crate) methods: Option<BTreeSet<String>>,
    /// Headers the host sets on every matching request, from a Secret or ConfigMap key in the
    /// host's namespace; the guest may not set them itself.
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, ValueFrom>,
    /// `Authorization: Bearer <value>` on every matching request.
    #[serde(default)]
    pub(crate) bearer_token: Option<ValueFrom>,
    /// PEM certificates trusted for this prefix besides the system roots.
    #[serde(default)]
    pub(crate) ca_bundle: Option<ValueFrom>,
}

impl HttpRule {
    /// The methods allowed under this prefix.
    pub(crate) fn methods(&self) -> BTreeSet<String> {
        self.methods
            .clone()
            .unwrap_or_else(|| ["GET", "HEAD"].map(str::to_owned).into())
    }

    /// The header names the host sets for this rule, lower case.
    pub(crate) fn injected_headers(&self) -> impl Iterator<Item = String> + '_ {
        let bearer = self
            .bearer_token
            .as_ref()
            .map(|_| "authorization".to_owned());
        self.headers
            .keys()
            .map(|name| name.to_ascii_lowercase())
            .chain(bearer)
    }

    /// Whether every request `other` allows, this rule allows with the same credentials: its
    /// prefix within this one, its methods among these, and every value it names named here
    /// for the same header (a ceiling decides which Secret may go where).
    pub(crate) fn covers(&self, other: &HttpRule) -> bool {
        self.prefix.covers(&other.prefix)
            && other.methods().is_subset(&self.methods())
            && other
                .headers
                .iter()
                .all(|(name, from)| self.header(name) == Some(from))
            && (other.bearer_token.is_none() || other.bearer_token == self.bearer_token)
            && (other.ca_bundle.is_none() || other.ca_bundle == self.ca_bundle)
    }

    fn header(&self, name: &str) -> Option<&ValueFrom> {
        self.headers
            .iter()
            .find(|(mine, _)| mine.eq_ignore_ascii_case(name))
            .map(|(_, from)| from)
    }
}

/// Where a value comes from: a key of a Secret or of a ConfigMap in the host's namespace,
/// written as Kubernetes writes `valueFrom` (`{secretKeyRef: {name, key}}`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(try_from = "RawValueFrom")]
pub enum ValueFrom {
    SecretKeyRef(KeyRef),
    ConfigMapKeyRef(KeyRef),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawValueFrom {
    secret_key_ref: Option<KeyRef>,
    config_map_key_ref: Option<KeyRef>,
}

impl TryFrom<RawValueFrom> for ValueFrom {
    type Error = &'static str;

    fn try_from(raw: RawValueFrom) -> Result<Self, Self::Error> {
        match (raw.secret_key_ref, raw.config_map_key_ref) {
            (Some(r), None) => Ok(ValueFrom::SecretKeyRef(r)),
            (None, Some(r)) => Ok(ValueFrom::ConfigMapKeyRef(r)),
            _ => Err("name exactly one of secretKeyRef and configMapKeyRef"),
        }
    }
}

impl fmt::Display for ValueFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueFrom::SecretKeyRef(r) => write!(f, "Secret {} key {}", r.name, r.key),
            ValueFrom::ConfigMapKeyRef(r) => write!(f, "ConfigMap {} key {}", r.name, r.key),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRef {
    pub name: String,
    pub key: String,
}

/// `scheme://host[:port]/path`, parsed and normalised: scheme and host lower case, the
/// scheme's default port filled in, the path without a trailing `/` (but `/` for the root).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(into = "String")]
pub struct UrlPrefix {
    pub(crate) scheme: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) path: String,
}

impl UrlPrefix {
    /// Whether a request to `scheme://host:port` with `path` (one [`normalise_path`] passed,
    /// so that every server serves it where its text points) falls under this prefix.
    pub(crate) fn matches(&self, scheme: &str, host: &str, port: u16, path: &str) -> bool {
        self.scheme == scheme
            && self.host.eq_ignore_ascii_case(host)
            && self.port == port
            && path_under(path, &self.path)
    }

    /// Whether every URL under `other` is under this prefix.
    pub(crate) fn covers(&self, other: &UrlPrefix) -> bool {
        self.matches(&other.scheme, &other.host, other.port, &other.path)
    }

    /// The host as an IP address, when the prefix names one literally: only such a prefix may
    /// reach a loopback, private or other special-purpose address.
    pub(crate) fn literal_ip(&self) -> Option<std::net::IpAddr> {
        self.host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok()
    }
}

/// `path` is `prefix` or continues it after a `/`.
fn path_under(path: &str, prefix: &str) -> bool {
    if prefix == "/" {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

impl fmt::Display for UrlPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}:{}{}",
            self.scheme, self.host, self.port, self.path
        )
    }
}

impl From<UrlPrefix> for String {
    fn from(p: UrlPrefix) -> String {
        p.to_string()
    }
}

impl std::str::FromStr for UrlPrefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let wrong = |problem| PrefixError {
            prefix: s.to_owned(),
            problem,
        };
        let uri: http::Uri = s.parse().map_err(|e| wrong(PrefixProblem::NotAUrl(e)))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| wrong(PrefixProblem::NoScheme))?
            .to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            other => return Err(wrong(PrefixProblem::Scheme(other.to_owned()))),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| wrong(PrefixProblem::NoHost))?;
        if authority.as_str().contains('@') {
            return Err(wrong(PrefixProblem::UserInfo));
        }
        if uri.query().is_some() {
            return Err(wrong(PrefixProblem::Query));
        }
        let path = normalise_path(uri.path())
            .map_err(|why| wrong(PrefixProblem::Path(why)))?
            .trim_end_matches('/')
            .to_owned();
        Ok(Self {
            scheme,
            host: authority.host().to_ascii_lowercase(),
            port: authority.port_u16().unwrap_or(default_port),
            path: if path.is_empty() {
                "/".to_owned()
            } else {
                path
            },
        })
    }
}

/// Why a text is not an `http:` rule's URL prefix.
#[derive(Debug, thiserror::Error)]
#[error("{prefix:?}: {problem}")]
pub struct PrefixError {
    prefix: String,
    problem: PrefixProblem,
}

#[derive(Debug, thiserror::Error)]
enum PrefixProblem {
    #[error("not a URL: {0}")]
    NotAUrl(http::uri::InvalidUri),
    #[error("a prefix needs a scheme (http:// or https://)")]
    NoScheme,
    #[error("scheme {0} is not http or https")]
    Scheme(String),
    #[error("a prefix needs a host")]
    NoHost,
    #[error("a prefix may not carry user information")]
    UserInfo,
    #[error("a prefix may not carry a query")]
    Query,
    #[error(transparent)]
    Path(super::http_path::PathRefused),
}

impl<'de> Deserialize<'de> for UrlPrefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(s: &str) -> UrlPrefix {
        s.parse().unwrap()
    }

    #[test]
    fn a_prefix_is_normalised_and_matches_its_path_and_below_only() {
        let p = prefix("HTTPS://API.Example.com/v1/zones/");
        assert_eq!(p.to_string(), "https://api.example.com:443/v1/zones");
        assert!(p.matches("https", "api.example.com", 443, "/v1/zones"));
        assert!(p.matches("https", "API.example.COM", 443, "/v1/zones/a"));
        assert!(!p.matches("https", "api.example.com", 443, "/v1/zonesx"));
        assert!(!p.matches("https", "api.example.com", 443, "/v1"));
        assert!(!p.matches("http", "api.example.com", 443, "/v1/zones"));
        assert!(!p.matches("https", "api.example.com", 8443, "/v1/zones"));
        assert!(!p.matches("https", "api.example.com.evil", 443, "/v1/zones"));
        let root = prefix("http://127.0.0.1:8081");
        assert_eq!(root.path, "/");
        assert!(root.matches("http", "127.0.0.1", 8081, "/anything"));
        assert_eq!(root.literal_ip(), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(
            prefix("http://[::1]:80/").literal_ip(),
            Some("::1".parse().unwrap())
        );
        assert_eq!(prefix("https://example.com/").literal_ip(), None);
    }

    #[test]
    fn a_prefix_the_host_cannot_enforce_is_refused_with_the_reason() {
        for (text, why) in [
            ("example.com/v1", "not a URL"),
            ("//example.com/v1", "needs a scheme"),
            ("ftp://example.com/", "not http"),
            ("http://user:pw@example.com/", "user information"),
            ("http://example.com/v1?x=1", "query"),
            ("http://example.com/a/../b", ".. segment"),
            ("http://example.com/a%2fb", "encoded /"),
            ("http://example.com/a;v=1", "path parameter"),
            ("http://example.com/a%25", "encoded %"),
        ] {
            let err = text.parse::<UrlPrefix>().unwrap_err();
            assert!(err.to_string().contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn a_rule_covers_another_only_within_its_prefix_methods_and_credentials() {
        let key = ValueFrom::SecretKeyRef(KeyRef {
            name: "pdns".into(),
            key: "api-key".into(),
        });
        let other_key = ValueFrom::SecretKeyRef(KeyRef {
            name: "other".into(),
            key: "api-key".into(),
        });
        let rule = |p: &str, methods: Option<&[&str]>, header: Option<&ValueFrom>| HttpRule {
            prefix: prefix(p),
            methods: methods.map(|m| m.iter().map(|s| (*s).to_owned()).collect()),
            headers: header
                .map(|h| [("X-API-Key".to_owned(), h.clone())].into())
                .unwrap_or_default(),
            bearer_token: None,
            ca_bundle: None,
        };
        let ceiling = rule(
            "http://127.0.0.1:8081/api/v1",
            Some(&["GET", "PATCH"]),
            Some(&key),
        );
        assert!(ceiling.covers(&rule(
            "http://127.0.0.1:8081/api/v1/servers",
            Some(&["GET"]),
            Some(&key)
        )));
        assert!(
            !ceiling.covers(&rule(
                "http://127.0.0.1:8081/api/v1/servers",
                None,
                Some(&key)
            )),
            "unset methods mean GET and HEAD, and the ceiling does not allow HEAD"
        );
        assert!(ceiling.covers(&rule(
            "http://127.0.0.1:8081/api/v1",
            Some(&["PATCH"]),
            None
        )));
        let get = Some(&["GET"][..]);
        assert!(!ceiling.covers(&rule("http://127.0.0.1:8081/api", get, None)));
        assert!(!ceiling.covers(&rule(
            "http://127.0.0.1:8081/api/v1",
            Some(&["DELETE"]),
            None
        )));
        assert!(!ceiling.covers(&rule("http://127.0.0.1:8081/api/v1", get, Some(&other_key))));
        assert!(!ceiling.covers(&rule("http://127.0.0.2:8081/api/v1", get, None)));
    }

    #[test]
    fn a_rule_reads_as_written_in_yaml() {
        let rule: HttpRule = serde_yaml::from_str(
            "prefix: http://127.0.0.1:8081/api/v1/servers/localhost\nmethods: [GET, PATCH]\nheaders:\n  X-API-Key: {secretKeyRef: {name: pdns, key: api-key}}\n",
        )
        .unwrap();
        assert_eq!(rule.methods().len(), 2);
        assert_eq!(rule.injected_headers().collect::<Vec<_>>(), ["x-api-key"]);
        assert!(
            serde_yaml::from_str::<HttpRule>("prefix: http://a/\nheaders: {X: {secretRef: x}}\n")
                .is_err()
        );
        assert!(
            serde_yaml::from_str::<HttpRule>(
                "prefix: http://a/\nbearerToken: {secretKeyRef: {name: a, key: b}, configMapKeyRef: {name: a, key: b}}\n"
            )
            .is_err()
        );
    }
}
