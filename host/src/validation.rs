//! What a guest may name, checked before anything it hands over reaches a URL, a cache, a log
//! line or a provider. Every string crossing the boundary is hostile input until one of these
//! functions has accepted it; a refusal names the field and the rule, and becomes the guest's
//! `invalid` error.
//!
//! The rules are the API server's own (apimachinery `validation.IsDNS1123Label`,
//! `IsDNS1123Subdomain`, `IsQualifiedName`, `path.IsValidPathSegmentName`), so a value refused
//! here would have been refused by the server too, only later and with the URL already built.
//! The size caps are the host's: they bound what one call can make the host allocate.

use std::fmt::Write as _;

use crate::objects::{Gvk, ObjectRef};

/// Largest JSON body (object, patch) a guest may hand over: the API server's own request limit
/// is 3 MiB, and etcd refuses objects above 1.5 MiB.
pub const MAX_BODY_BYTES: usize = 3 << 20;
/// Deepest nesting of a JSON body (`serde_json` refuses beyond 128 anyway; this names the cap).
pub const MAX_JSON_DEPTH: usize = 100;
/// Longest log line, event message or error text kept from a guest; the rest is cut off.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// Longest label selector.
pub const MAX_SELECTOR_BYTES: usize = 4096;
/// Longest object name (the API server's `metadata.name` limit for most kinds).
pub const MAX_NAME_BYTES: usize = 253;
/// Longest event reason (the API server's limit on `reason`).
pub const MAX_REASON_BYTES: usize = 128;

/// A value a guest named was refused: which field, and which rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Invalid {
    pub field: String,
    pub reason: String,
}

impl Invalid {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Quotes a guest-supplied value for an error message: escaped, and cut to 80 characters, so
/// a refusal can neither forge lines nor grow without bound.
pub fn shown(value: &str) -> String {
    let mut out = String::new();
    for (i, c) in value.chars().enumerate() {
        if i == 80 {
            out.push('…');
            break;
        }
        out.extend(c.escape_debug());
    }
    format!("`{out}`")
}

/// A DNS-1123 label: 1-63 of `[a-z0-9-]`, starting and ending with an alphanumeric. The rule
/// for namespaces.
pub fn dns1123_label(field: &str, value: &str) -> Result<(), Invalid> {
    if value.len() <= 63 && is_label(value) {
        return Ok(());
    }
    Err(Invalid::new(
        field,
        format!(
            "{} is not a DNS-1123 label (1-63 lower-case letters, digits or '-', starting and ending with a letter or digit)",
            shown(value)
        ),
    ))
}

/// The shape of one DNS-1123 label, its length aside.
fn is_label(label: &str) -> bool {
    !label.is_empty()
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated DNS-1123 labels. The rule for
/// API groups and most object names.
pub fn dns1123_subdomain(field: &str, value: &str) -> Result<(), Invalid> {
    if value.len() <= MAX_NAME_BYTES && value.split('.').all(is_label) {
        return Ok(());
    }
    Err(Invalid::new(
        field,
        format!(
            "{} is not a DNS-1123 subdomain (at most 253 lower-case letters, digits, '-' and '.')",
            shown(value)
        ),
    ))
}

/// An object name as the API server accepts it in a request path: not empty, at most 253
/// bytes, not `.` or `..`, no `/` or `%` (apimachinery's path-segment rule), and, stricter than
/// the server, no whitespace or control characters (no kind needs them; logs and URLs do not
/// want them).
pub fn object_name(field: &str, value: &str) -> Result<(), Invalid> {
    let forbidden =
        |c: &char| matches!(c, '/' | '%' | '?' | '#') || c.is_whitespace() || c.is_control();
    let reason = if value.is_empty() {
        "must not be empty".to_owned()
    } else if value.len() > MAX_NAME_BYTES {
        format!("is longer than {MAX_NAME_BYTES} bytes")
    } else if value == "." || value == ".." {
        format!("{} may not be a path segment name", shown(value))
    } else if let Some(c) = value.chars().find(forbidden) {
        format!("{} may not contain {}", shown(value), shown(&c.to_string()))
    } else {
        return Ok(());
    };
    Err(Invalid::new(field, reason))
}

/// A kind: the group a DNS-1123 subdomain (or empty for the core group), the version a
/// DNS-1123 label (`v1`, `v1beta1`), the kind 1-63 ASCII letters and digits starting with an
/// upper-case letter.
pub fn gvk(field: &str, kind: &Gvk) -> Result<(), Invalid> {
    if !kind.group.is_empty() {
        dns1123_subdomain(&format!("{field}.group"), &kind.group)?;
    }
    dns1123_label(&format!("{field}.version"), &kind.version)?;
    let k = &kind.kind;
    if is_upper_camel(k, 63) {
        Ok(())
    } else {
        Err(Invalid::new(
            format!("{field}.kind"),
            format!(
                "{} is not a kind (1-63 ASCII letters and digits, starting with an upper-case letter)",
                shown(k)
            ),
        ))
    }
}

/// A namespace as a guest names one: none, or a DNS-1123 label.
pub fn namespace(field: &str, value: Option<&str>) -> Result<(), Invalid> {
    value.map_or(Ok(()), |ns| dns1123_label(field, ns))
}

/// A whole reference: kind, namespace and name. Scope (namespaced or not) is checked where the
/// kind's scope is known.
pub fn object_ref(field: &str, r: &ObjectRef) -> Result<(), Invalid> {
    gvk(&format!("{field}.kind"), &r.kind)?;
    namespace(&format!("{field}.namespace"), r.namespace.as_deref())?;
    object_name(&format!("{field}.name"), &r.name)
}

/// A qualified name (`prefix/name` or `name`), the rule for label keys and finalizers: the
/// optional prefix a DNS-1123 subdomain, the name 1-63 of `[A-Za-z0-9-_.]` starting and ending
/// with an alphanumeric.
pub fn qualified_name(field: &str, value: &str) -> Result<(), Invalid> {
    let (prefix, name) = match value.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    if let Some(prefix) = prefix {
        dns1123_subdomain(&format!("{field} prefix"), prefix)?;
    }
    let bytes = name.as_bytes();
    let ok = !name.is_empty()
        && name.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!(
                "{} is not a qualified name ([prefix/]name, the name 1-63 of letters, digits, '-', '_' or '.')",
                shown(value)
            ),
        ))
    }
}

/// Finalizers the API server or kube-controller-manager own: a guest may never name them.
const RESERVED_FINALIZERS: &[&str] = &["orphan", "foregroundDeletion", "kubernetes"];

/// A finalizer a guest may declare: a qualified name with a domain prefix (the API server
/// warns on unprefixed ones), outside Kubernetes' own domains, and not one of the reserved
/// names.
pub fn finalizer(field: &str, value: &str) -> Result<(), Invalid> {
    qualified_name(field, value)?;
    let Some((prefix, _)) = value.rsplit_once('/') else {
        return Err(Invalid::new(
            field,
            format!(
                "{} needs a domain prefix that names its owner, e.g. example.com/cleanup",
                shown(value)
            ),
        ));
    };
    // `*.kubernetes.io` and `k8s.io` itself are Kubernetes' own; other `*.k8s.io` groups are
    // community projects (the sample-controller's `samplecrd.k8s.io` among them).
    let reserved_domain =
        prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io") || prefix == "k8s.io";
    if reserved_domain || RESERVED_FINALIZERS.contains(&value) {
        return Err(Invalid::new(
            field,
            format!(
                "{} belongs to Kubernetes itself; choose a finalizer in your own domain",
                shown(value)
            ),
        ));
    }
    Ok(())
}

/// 1 to `max` ASCII letters and digits, the first an upper-case letter (kinds, reasons).
fn is_upper_camel(value: &str, max: usize) -> bool {
    value.len() <= max
        && value.as_bytes().first().is_some_and(u8::is_ascii_uppercase)
        && value.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// An event reason: `UpperCamelCase`, 1-128 ASCII letters and digits.
pub fn event_reason(field: &str, value: &str) -> Result<(), Invalid> {
    if is_upper_camel(value, MAX_REASON_BYTES) {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!(
                "{} is not an event reason (UpperCamelCase, 1-{MAX_REASON_BYTES} ASCII letters and digits)",
                shown(value)
            ),
        ))
    }
}

/// A label selector: bounded size and no control characters; the grammar is checked by the
/// parser that uses it.
pub fn selector_text(field: &str, value: &str) -> Result<(), Invalid> {
    if value.len() > MAX_SELECTOR_BYTES {
        return Err(Invalid::new(
            field,
            format!("is longer than {MAX_SELECTOR_BYTES} bytes"),
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(Invalid::new(
            field,
            format!("may not contain {}", shown(&c.to_string())),
        ));
    }
    Ok(())
}

/// A JSON body: at most `MAX_BODY_BYTES`, parsed, at most `MAX_JSON_DEPTH` deep.
pub fn json_body(field: &str, text: &str) -> Result<serde_json::Value, Invalid> {
    if text.len() > MAX_BODY_BYTES {
        return Err(Invalid::new(
            field,
            format!(
                "is {} bytes; the host accepts at most {MAX_BODY_BYTES}",
                text.len()
            ),
        ));
    }
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Invalid::new(field, format!("is not valid JSON: {e}")))?;
    if depth(&value) > MAX_JSON_DEPTH {
        return Err(Invalid::new(
            field,
            format!("nests deeper than {MAX_JSON_DEPTH} levels"),
        ));
    }
    Ok(value)
}

fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Text a guest wants logged or shown (log lines, event messages, error texts): cut to
/// `MAX_MESSAGE_BYTES` on a character boundary, with control characters other than tab escaped,
/// so one guest line is one host line and cannot pose as another guest's or the host's.
pub fn message(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_MESSAGE_BYTES));
    for c in text.chars() {
        if out.len() >= MAX_MESSAGE_BYTES {
            let _ = write!(
                out,
                "… ({} bytes cut)",
                text.len().saturating_sub(out.len())
            );
            break;
        }
        if c.is_control() && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Percent-encodes a validated name for a URL path segment anyway: defence in depth, should a
/// rule above ever be loosened.
pub fn path_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':' | b'@') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_dns_labels() {
        assert!(dns1123_label("ns", "team-a").is_ok());
        for bad in [
            "",
            "victim/secrets/topsecret?x=",
            "A",
            "-a",
            "a-",
            "a.b",
            &"a".repeat(64),
        ] {
            let err = dns1123_label("ref.namespace", bad).unwrap_err();
            assert_eq!(err.field, "ref.namespace", "{bad}");
        }
    }

    #[test]
    fn names_follow_the_path_segment_rule() {
        for good in ["web", "system:controller", "a.b-c", "UPPER"] {
            assert!(object_name("n", good).is_ok(), "{good}");
        }
        for bad in [
            "", ".", "..", "a/b", "a%2f", "a?b", "a#b", "a b", "a\nb", "a\u{7f}",
        ] {
            assert!(object_name("n", bad).is_err(), "{bad:?}");
        }
        assert!(object_name("n", &"a".repeat(254)).is_err());
    }

    #[test]
    fn kinds_have_valid_parts() {
        assert!(gvk("k", &Gvk::new("", "v1", "ConfigMap")).is_ok());
        assert!(gvk("k", &Gvk::new("samplecrd.k8s.io", "v1alpha1", "Network")).is_ok());
        for bad in [
            Gvk::new("x/../../api", "v1", "Secret"),
            Gvk::new("", "v1/namespaces", "Secret"),
            Gvk::new("", "v1", "secret"),
            Gvk::new("", "", "Secret"),
            Gvk::new("", "v1", "Se/cret"),
        ] {
            assert!(gvk("k", &bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn finalizers_need_an_own_domain() {
        assert!(finalizer("f", "samplecrd.k8s.io/network-backend").is_ok());
        assert!(finalizer("f", "example.com/cleanup").is_ok());
        for bad in [
            "orphan",
            "foregroundDeletion",
            "kubernetes",
            "kubernetes.io/pv-protection",
            "batch.kubernetes.io/job-tracking",
            "k8s.io/x",
            "cleanup",
            "a/b/c",
            "example.com/",
        ] {
            assert!(finalizer("f", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn messages_cannot_forge_lines_or_grow() {
        let forged = message("ok\nINFO host: guest admin loaded\r\x1b[2J");
        assert!(!forged.contains('\n') && !forged.contains('\r') && !forged.contains('\x1b'));
        assert!(forged.contains("\\n"));
        let long = message(&"é".repeat(10_000));
        assert!(long.len() < MAX_MESSAGE_BYTES + 64, "{}", long.len());
        assert!(long.ends_with("bytes cut)"));
    }

    #[test]
    fn json_bodies_are_bounded() {
        assert!(json_body("b", "{\"a\":1}").is_ok());
        assert!(json_body("b", "{").is_err());
        let deep = format!("{}{}", "[".repeat(120), "]".repeat(120));
        assert!(json_body("b", &deep).is_err());
        let big = format!("\"{}\"", "a".repeat(MAX_BODY_BYTES));
        assert!(json_body("b", &big).unwrap_err().reason.contains("at most"));
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(path_segment("a/b?c"), "a%2Fb%3Fc");
        assert_eq!(path_segment("system:web-1"), "system:web-1");
    }
}
