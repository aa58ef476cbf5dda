//! Whether a guest's request is within the `http:` of its grant: the rule whose prefix holds
//! its URL and whose methods hold its method. A refusal names the URL and what the grant
//! allows, and where to add it.

use crate::config::{Grant, HttpRule, normalise_path};

/// The rule of `grant` covering `method` on `uri`, or why there is none.
pub(super) fn authorize<'g>(
    guest: &str,
    grant: &'g Grant,
    method: &http::Method,
    uri: &http::Uri,
) -> Result<&'g HttpRule, Box<Refused>> {
    // Boxed: a refusal is the rare path, and its four strings would make every answer large.
    let refuse = |why: Why| {
        Box::new(Refused {
            guest: guest.to_owned(),
            method: method.to_string(),
            url: uri.to_string(),
            place: grant.place_in_full(guest, "http"),
            why,
        })
    };
    let scheme = uri
        .scheme_str()
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| refuse(Why::NoScheme))?;
    let authority = uri.authority().ok_or_else(|| refuse(Why::NoHost))?;
    if authority.as_str().contains('@') {
        return Err(refuse(Why::UserInfo));
    }
    // `:044615` or `:+44615` reach the same port but travel in the Host header as written.
    if let Some(port) = authority.port()
        && port.as_str() != port.as_u16().to_string()
    {
        return Err(refuse(Why::PortSpelling {
            written: port.as_str().to_owned(),
            port: port.as_u16(),
        }));
    }
    let port = authority.port_u16().unwrap_or(match scheme.as_str() {
        "https" => 443,
        _ => 80,
    });
    let path = normalise_path(uri.path()).map_err(|why| refuse(Why::Path(why)))?;
    let host = authority.host();
    let under: Vec<&HttpRule> = grant
        .http
        .iter()
        .filter(|rule| rule.prefix.matches(&scheme, host, port, &path))
        .collect();
    if let Some(rule) = under
        .iter()
        .find(|rule| rule.methods().contains(method.as_str()))
    {
        return Ok(rule);
    }
    if grant.http.is_empty() {
        return Err(refuse(Why::NoHttp));
    }
    let rules: Vec<String> = grant
        .http
        .iter()
        .map(|rule| {
            let methods: Vec<String> = rule.methods().into_iter().collect();
            format!("{} {}", methods.join(","), rule.prefix)
        })
        .collect();
    Err(refuse(Why::NotAllowed {
        under_a_prefix: !under.is_empty(),
        allowed: rules.join("; "),
    }))
}

/// A request the grant does not allow: the guest, the request, where its grant lives and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    guest: String,
    method: String,
    url: String,
    /// Where the guest's `http:` rules are written (`guests.NAME.http`, a Reconciler's grant).
    place: String,
    why: Why,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Why {
    NoScheme,
    NoHost,
    UserInfo,
    PortSpelling {
        written: String,
        port: u16,
    },
    Path(crate::config::PathRefused),
    NoHttp,
    NotAllowed {
        under_a_prefix: bool,
        allowed: String,
    },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            guest,
            method,
            url,
            place,
            why,
        } = self;
        write!(f, "guest `{guest}` may not {method} {url}: ")?;
        match why {
            Why::NoScheme => f.write_str("the URL has no scheme")?,
            Why::NoHost => f.write_str("the URL has no host")?,
            Why::UserInfo => f.write_str("the URL carries user information")?,
            Why::PortSpelling { written, port } => {
                write!(f, "the port is spelled {written}; write it as {port}")?;
            }
            // A path some server resolves elsewhere is no grant's to allow: the advice differs.
            Why::Path(why) => {
                return write!(
                    f,
                    "{why}; no rule of {place} can allow such a path, so write it as the server should read it"
                );
            }
            Why::NoHttp => f.write_str("the grant allows no HTTP at all")?,
            Why::NotAllowed {
                under_a_prefix,
                allowed,
            } => {
                let which = if *under_a_prefix {
                    "the prefixes that hold the URL do not allow the method"
                } else {
                    "no prefix of the grant holds the URL"
                };
                write!(f, "{which} (allowed: {allowed})")?;
            }
        }
        write!(f, "; add it to {place}")
    }
}

impl std::error::Error for Refused {}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(yaml: &str) -> Grant {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn check(grant: &Grant, method: &str, url: &str) -> Result<String, String> {
        authorize(
            "dns",
            grant,
            &method.parse().unwrap(),
            &url.parse().unwrap(),
        )
        .map(|rule| rule.prefix.to_string())
        .map_err(|refused| refused.to_string())
    }

    #[test]
    fn a_request_passes_only_under_a_prefix_that_allows_its_method() {
        let g = grant(
            "http:\n- prefix: http://127.0.0.1:8081/api/v1/servers/localhost\n  methods: [GET, PATCH]\n- prefix: https://api.example.com/v2\n",
        );
        assert!(
            check(
                &g,
                "GET",
                "http://127.0.0.1:8081/api/v1/servers/localhost/zones"
            )
            .is_ok()
        );
        assert!(
            check(
                &g,
                "PATCH",
                "http://127.0.0.1:8081/api/v1/servers/localhost/zones/a."
            )
            .is_ok()
        );
        assert!(check(&g, "GET", "https://API.example.com:443/v2?q=1").is_ok());
        // The query is not the path: a server does not resolve it.
        assert!(check(&g, "GET", "https://api.example.com/v2/x?q=..;%2e%00").is_ok());
        for (method, url, why) in [
            (
                "DELETE",
                "http://127.0.0.1:8081/api/v1/servers/localhost/zones/a.",
                "do not allow the method",
            ),
            (
                "POST",
                "https://api.example.com/v2/x",
                "do not allow the method",
            ),
            (
                "GET",
                "http://127.0.0.1:8081/api/v1/servers/other",
                "no prefix",
            ),
            (
                "GET",
                "http://127.0.0.1:8082/api/v1/servers/localhost",
                "no prefix",
            ),
            (
                "GET",
                "https://127.0.0.1:8081/api/v1/servers/localhost",
                "no prefix",
            ),
            (
                "GET",
                "http://localhost:8081/api/v1/servers/localhost",
                "no prefix",
            ),
            (
                "GET",
                "http://127.0.0.1:8081/api/v1/servers/localhost/../../../config",
                ".. segment",
            ),
            (
                "GET",
                "http://127.0.0.1:8081/api/v1/servers/localhost/%2e%2e/x",
                "encoded .",
            ),
            (
                "GET",
                "http://127.0.0.1:8081/api/v1/servers/localhost/..;/..;/config",
                "path parameter",
            ),
            (
                "GET",
                "http://127.0.0.1:8081/api/v1/servers/localhost/%252e%252e/x",
                "encoded %",
            ),
            (
                "GET",
                "http://user@127.0.0.1:8081/api/v1/servers/localhost",
                "user information",
            ),
            (
                "GET",
                "http://169.254.169.254/latest/meta-data",
                "no prefix",
            ),
        ] {
            let err = check(&g, method, url).unwrap_err();
            assert!(err.contains(why), "{method} {url}: {err}");
            assert!(err.contains(url) || err.contains("user"), "{err}");
            assert!(err.contains("guests.dns.http"), "{err}");
        }
        let err = check(&g, "DELETE", "https://api.example.com/v2").unwrap_err();
        assert!(
            err.contains("GET,PATCH http://127.0.0.1:8081/api/v1/servers/localhost"),
            "{err}"
        );
        assert!(
            err.contains("GET,HEAD https://api.example.com:443/v2"),
            "{err}"
        );
    }

    #[test]
    fn a_port_is_written_plainly_or_refused() {
        let g = grant("http:\n- prefix: http://127.0.0.1:8081/api\n");
        assert!(check(&g, "GET", "http://127.0.0.1:8081/api/x").is_ok());
        for url in [
            "http://127.0.0.1:08081/api/x",
            "http://127.0.0.1:008081/api",
        ] {
            let err = check(&g, "GET", url).unwrap_err();
            assert!(err.contains("write it as 8081"), "{url}: {err}");
        }
    }

    #[test]
    fn a_grant_without_http_refuses_every_request() {
        let err = check(&Grant::default(), "GET", "https://example.com/").unwrap_err();
        assert!(err.contains("allows no HTTP"), "{err}");
    }
}
