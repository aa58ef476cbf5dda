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

use crate::cluster::objects::{Gvk, ObjectRef};

/// Largest JSON body (object, patch) a guest may hand over: the API server's own request limit
/// is 3 MiB, and etcd refuses objects above 1.5 MiB.
pub(crate) const MAX_BODY_BYTES: usize = 3 << 20;
/// Deepest nesting of a JSON body (`serde_json` refuses beyond 128 anyway; this names the cap).
pub(crate) const MAX_JSON_DEPTH: usize = 100;
/// Most values (scalars, arrays and objects, the root among them) in one JSON body: what bounds
/// the tree a body parses into, which a 3 MiB text alone does not (3 MiB of `[0,0,…]` is 1.5
/// million values, a 100 MiB tree). The largest legitimate bodies are CRDs with their schemas;
/// measured: the Prometheus operator's CRD holds 2,143 values in 114 KB, core/v1's `OpenAPI`
/// document (what a CRD embedding whole pod specs approaches) 27,782 in 1.6 MB, and the
/// whole Kubernetes API's `swagger.json` 73,653 in 3.0 MB, larger than any object etcd stores
/// (1.5 MiB). The cap is 3.5 times that.
pub(crate) const MAX_JSON_VALUES: usize = 1 << 18;
/// Longest log line, event message or error text kept from a guest; the rest is cut off.
pub(crate) const MAX_MESSAGE_BYTES: usize = 4096;
/// Longest label selector.
pub(crate) const MAX_SELECTOR_BYTES: usize = 4096;
/// Longest object name (the API server's `metadata.name` limit for most kinds).
pub(crate) const MAX_NAME_BYTES: usize = 253;
/// Longest event reason (the API server's limit on `reason`).
pub(crate) const MAX_REASON_BYTES: usize = 128;

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
pub(crate) fn shown(value: &str) -> String {
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
pub(crate) fn dns1123_label(field: &str, value: &str) -> Result<(), Invalid> {
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
pub(crate) fn dns1123_subdomain(field: &str, value: &str) -> Result<(), Invalid> {
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
pub(crate) fn object_name(field: &str, value: &str) -> Result<(), Invalid> {
    // Line breaks and bidi controls too: names end up in the host's log lines.
    let forbidden = |c: &char| {
        matches!(c, '/' | '%' | '?' | '#') || c.is_whitespace() || escaped_in_messages(*c)
    };
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
pub(crate) fn gvk(field: &str, kind: &Gvk) -> Result<(), Invalid> {
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
pub(crate) fn namespace(field: &str, value: Option<&str>) -> Result<(), Invalid> {
    value.map_or(Ok(()), |ns| dns1123_label(field, ns))
}

/// A whole reference: kind, namespace and name. Scope (namespaced or not) is checked where the
/// kind's scope is known.
pub(crate) fn object_ref(field: &str, r: &ObjectRef) -> Result<(), Invalid> {
    gvk(&format!("{field}.kind"), &r.kind)?;
    namespace(&format!("{field}.namespace"), r.namespace.as_deref())?;
    object_name(&format!("{field}.name"), &r.name)
}

/// A qualified name (`prefix/name` or `name`), the rule for label keys and finalizers: the
/// optional prefix a DNS-1123 subdomain, the name 1-63 of `[A-Za-z0-9-_.]` starting and ending
/// with an alphanumeric.
pub(crate) fn qualified_name(field: &str, value: &str) -> Result<(), Invalid> {
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
pub(crate) fn finalizer(field: &str, value: &str) -> Result<(), Invalid> {
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
pub(crate) fn event_reason(field: &str, value: &str) -> Result<(), Invalid> {
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
pub(crate) fn selector_text(field: &str, value: &str) -> Result<(), Invalid> {
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

/// What [`json_shape`] found in a body, without building it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct JsonShape {
    /// Values of every kind, the root included.
    pub values: usize,
    /// Objects among them.
    pub objects: usize,
    /// Deepest nesting: a scalar is 0, an array or object one more than its deepest child.
    pub depth: usize,
}

impl JsonShape {
    /// An upper bound on the heap `serde_json` takes to build this body's tree (`serde_json` 1.x,
    /// maps as `BTreeMap`), measured with a counting allocator and pinned by
    /// `tests::the_tree_estimate_bounds_what_parsing_allocates`: per value up to 112 B (its 32 B
    /// `Value` in an array's `Vec`, which doubles as it grows and is copied when it does, or a
    /// 24 B key and 32 B value in a B-tree node that may be half empty); per object up to 640 B
    /// more (its first node, 11 slots allocated at once: a `{"a":0}` costs ~670 B); strings
    /// and keys at most the text's own bytes.
    pub(crate) fn tree_bytes(&self, text_bytes: usize) -> usize {
        text_bytes
            .saturating_add(self.values.saturating_mul(112))
            .saturating_add(self.objects.saturating_mul(640))
    }
}

/// A body of at most [`MAX_BODY_BYTES`]. Free: the first check of every body.
pub(crate) fn body_size(field: &str, text: &str) -> Result<(), Invalid> {
    if text.len() > MAX_BODY_BYTES {
        return Err(Invalid::new(
            field,
            format!(
                "is {} bytes; the host accepts at most {MAX_BODY_BYTES}",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// Checks a JSON body without building it: at most [`MAX_BODY_BYTES`], valid JSON, at most
/// [`MAX_JSON_DEPTH`] deep and [`MAX_JSON_VALUES`] values. Cost: one pass of `serde_json`'s
/// parser over the text, stopping at the first value past a cap, and no allocation (strings are
/// skipped in place; one with escapes is unescaped into the parser's scratch buffer, at most
/// its own size).
pub(crate) fn json_shape(field: &str, text: &str) -> Result<JsonShape, Invalid> {
    use serde::de::DeserializeSeed as _;
    body_size(field, text)?;
    let mut tally = Tally::default();
    let mut parser = serde_json::Deserializer::from_str(text);
    let parsed = Counter {
        tally: &mut tally,
        level: 0,
    }
    .deserialize(&mut parser)
    .and_then(|()| parser.end());
    match (parsed, tally.over) {
        (Ok(()), _) => Ok(tally.shape),
        (Err(_), Some(Over::Depth)) => Err(Invalid::new(
            field,
            format!("nests deeper than {MAX_JSON_DEPTH} levels"),
        )),
        (Err(_), Some(Over::Values)) => Err(Invalid::new(
            field,
            format!(
                "holds more than {MAX_JSON_VALUES} JSON values (scalars, arrays and objects); the host parses no larger body"
            ),
        )),
        (Err(e), None) => Err(Invalid::new(field, format!("is not valid JSON: {e}"))),
    }
}

#[derive(Default)]
struct Tally {
    shape: JsonShape,
    over: Option<Over>,
}

/// Which cap the pre-pass stopped at (`serde_json` wraps the visitor's error in its own text).
#[derive(Clone, Copy)]
enum Over {
    Depth,
    Values,
}

/// Visits every value of a body, counting, keeping nothing (see [`json_shape`]).
struct Counter<'a> {
    tally: &'a mut Tally,
    /// Containers around the value visited.
    level: usize,
}

impl Counter<'_> {
    /// Enters an array or object: its children's level, unless it nests too deep.
    fn enter<E: serde::de::Error>(&mut self) -> Result<usize, E> {
        let level = self.level + 1;
        if level > MAX_JSON_DEPTH {
            self.tally.over = Some(Over::Depth);
            return Err(E::custom("nested too deep"));
        }
        self.tally.shape.depth = self.tally.shape.depth.max(level);
        Ok(level)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Counter<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, value: D) -> Result<(), D::Error> {
        self.tally.shape.values += 1;
        if self.tally.shape.values > MAX_JSON_VALUES {
            self.tally.over = Some(Over::Values);
            return Err(serde::de::Error::custom("too many values"));
        }
        value.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Counter<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut items: A) -> Result<(), A::Error> {
        let level = self.enter()?;
        while items
            .next_element_seed(Counter {
                tally: &mut *self.tally,
                level,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.tally.shape.objects += 1;
        let level = self.enter()?;
        while map.next_key::<serde::de::IgnoredAny>()?.is_some() {
            map.next_value_seed(Counter {
                tally: &mut *self.tally,
                level,
            })?;
        }
        Ok(())
    }
}

/// Text a guest wants logged or shown (log lines, event messages, error texts): cut to
/// `MAX_MESSAGE_BYTES` on a character boundary, with every character [`escaped_in_messages`]
/// except tab written as a Rust escape (`\n`, `\u{2028}`), so one guest line is one host line
/// for any reader, whichever line breaks it honours, displays as what it contains, and cannot
/// pose as another guest's or the host's.
pub(crate) fn message(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_MESSAGE_BYTES));
    for (at, c) in text.char_indices() {
        if out.len() >= MAX_MESSAGE_BYTES {
            // Counted in the guest's bytes: escapes make `out` longer than what it shows.
            let _ = write!(out, "… ({} bytes cut)", text.len() - at);
            break;
        }
        if c != '\t' && escaped_in_messages(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `c` can split a line or make it display other than it reads: a control character
/// (`char::is_control`, which includes tab), a mandatory break of UAX #14, or a bidirectional
/// formatting control. [`message`] escapes these; names that reach log lines refuse them.
pub(crate) fn escaped_in_messages(c: char) -> bool {
    c.is_control() || MANDATORY_BREAKS.contains(&c) || BIDI_CONTROLS.contains(&c)
}

// Two tables rather than a Unicode property crate: both sets are closed, unchanged since
// Unicode 6.3, and short enough to read in full.

/// UAX #14's mandatory breaks (classes BK, CR, LF, NL): LF, VT, FF, CR, NEL, LINE SEPARATOR,
/// PARAGRAPH SEPARATOR. The first five are also `char::is_control`; the last two are not.
const MANDATORY_BREAKS: [char; 7] = [
    '\n', '\u{B}', '\u{C}', '\r', '\u{85}', '\u{2028}', '\u{2029}',
];

/// Unicode's `Bidi_Control` property (PropList.txt): ARABIC LETTER MARK, LRM and RLM, the
/// embeddings and overrides LRE..RLO, the isolates LRI..PDI. Each makes a line display in an
/// order other than the one it is stored (and grepped) in.
const BIDI_CONTROLS: [char; 12] = [
    '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}',
    '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
];

/// Percent-encodes a validated name for a URL path segment anyway: defence in depth, should a
/// rule above ever be loosened.
pub(crate) fn path_segment(value: &str) -> String {
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

    /// UAX #14's mandatory breaks and Unicode's `Bidi_Control` set, written out here from the
    /// standard rather than taken from the tables under test.
    const MANDATORY: [char; 7] = [
        '\u{A}', '\u{B}', '\u{C}', '\u{D}', '\u{85}', '\u{2028}', '\u{2029}',
    ];
    const BIDI: [char; 12] = [
        '\u{61C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}',
        '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
    ];

    #[test]
    fn every_line_break_bidi_control_and_control_character_is_escaped() {
        let controls = ['\0', '\u{1B}', '\u{1C}', '\u{7F}', '\u{9B}', '\u{9F}'];
        for c in MANDATORY.into_iter().chain(BIDI).chain(controls) {
            assert!(escaped_in_messages(c), "U+{:04X}", u32::from(c));
            let shown = message(&format!("a{c}b"));
            assert_eq!(
                shown,
                format!("a{}b", c.escape_default()),
                "U+{:04X}",
                u32::from(c)
            );
            assert!(shown.is_ascii(), "the escape is plain ASCII: {shown}");
        }
        assert_eq!(message("a\tb"), "a\tb", "tab stays: it breaks no line");
        assert_eq!(
            message("ünïcödé ✓"),
            "ünïcödé ✓",
            "printable text is untouched"
        );
    }

    #[test]
    fn a_guest_line_with_every_break_stays_one_line_for_any_splitter() {
        let mut hostile = String::from("ok");
        for c in MANDATORY.into_iter().chain(BIDI) {
            hostile.push(c);
            hostile.push_str("INFO host: guest admin loaded");
        }
        hostile.push_str("\r\n");
        let shown = message(&hostile);
        assert_eq!(shown.lines().count(), 1, "str::lines: {shown}");
        // Python's str.splitlines, the widest common splitter: it also honours NEL, LS, PS and
        // the separators FS, GS, RS.
        let splitlines = |c: char| {
            matches!(
                c,
                '\n' | '\r'
                    | '\u{B}'
                    | '\u{C}'
                    | '\u{1C}'
                    | '\u{1D}'
                    | '\u{1E}'
                    | '\u{85}'
                    | '\u{2028}'
                    | '\u{2029}'
            )
        };
        assert_eq!(shown.split(splitlines).count(), 1, "splitlines: {shown}");
        assert!(!shown.chars().any(|c| BIDI.contains(&c)), "{shown}");
    }

    #[test]
    fn the_cut_holds_when_every_character_is_escaped() {
        // 3 bytes in, 8 bytes (`\u{2028}`) out: the cut comes after 512 characters.
        let text = "\u{2028}".repeat(10_000);
        let shown = message(&text);
        assert!(shown.len() < MAX_MESSAGE_BYTES + 64, "{}", shown.len());
        assert!(
            shown.ends_with(&format!("… ({} bytes cut)", text.len() - 512 * 3)),
            "the cut counts the guest's bytes: {}",
            &shown[shown.len() - 40..]
        );
    }

    #[test]
    fn json_bodies_are_bounded() {
        assert!(json_shape("b", "{\"a\":1}").is_ok());
        assert!(json_shape("b", "{").is_err());
        let deep = format!("{}{}", "[".repeat(120), "]".repeat(120));
        assert!(json_shape("b", &deep).is_err());
        let big = format!("\"{}\"", "a".repeat(MAX_BODY_BYTES));
        assert!(
            json_shape("b", &big)
                .unwrap_err()
                .reason
                .contains("at most")
        );
    }

    #[test]
    fn a_body_at_the_depth_cap_passes_and_one_level_more_does_not() {
        let nested = |n| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let at_cap = json_shape("b", &nested(MAX_JSON_DEPTH)).unwrap();
        assert_eq!(at_cap.depth, MAX_JSON_DEPTH);
        let err = json_shape("patch", &nested(MAX_JSON_DEPTH + 1)).unwrap_err();
        assert_eq!(err.to_string(), "patch: nests deeper than 100 levels");
        let shape = json_shape("b", r#"{"a":[1,{"b":"c"}],"d":null}"#).unwrap();
        let expected = JsonShape {
            values: 6,
            objects: 2,
            depth: 3,
        };
        assert_eq!(shape, expected);
        let err = json_shape("b", r#"{"a":1} x"#).unwrap_err();
        assert!(err.reason.starts_with("is not valid JSON"), "{err}");
    }

    #[test]
    fn a_body_of_many_small_values_is_refused_before_any_tree_is_built() {
        let zeros = format!("[{}0]", "0,".repeat(MAX_BODY_BYTES / 2 - 2));
        let (refused, peak) = allocated_while(|| json_shape("patch", &zeros));
        let err = refused.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("patch: holds more than 262144 JSON values"),
            "{err}"
        );
        assert!(peak < 1024, "the pre-pass allocated {peak} bytes");
        let at_cap = format!("[{}0]", "0,".repeat(MAX_JSON_VALUES - 2));
        assert_eq!(json_shape("b", &at_cap).unwrap().values, MAX_JSON_VALUES);
    }

    #[test]
    fn the_tree_estimate_bounds_what_parsing_allocates() {
        let crd = |path: &str| {
            let path = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).expect(&path);
            let value: serde_json::Value = serde_yaml::from_str(&text).expect(&path);
            value.to_string()
        };
        let mut keys = String::new();
        for i in 0..100_000 {
            let _ = write!(keys, r#""k{i}":0,"#);
        }
        let bodies = [
            ("zeros", format!("[{}0]", "0,".repeat(MAX_JSON_VALUES - 2))),
            (
                "objects of one key",
                format!("[{}{{}}]", r#"{"a":0},"#.repeat(50_000)),
            ),
            ("empty objects", format!("[{}{{}}]", "{},".repeat(100_000))),
            ("one object of many keys", format!(r#"{{{keys}"k":0}}"#)),
            ("nested arrays", format!("[{}[]]", "[[0]],".repeat(80_000))),
            (
                "short strings",
                format!("[{}\"\"]", r#""a","#.repeat(100_000)),
            ),
            ("a CRD", crd("examples/crds/network.yaml")),
            ("a small CRD", crd("guests/testing/widget/crd.yaml")),
        ];
        for (what, text) in bodies {
            let shape = json_shape(what, &text).unwrap();
            let (tree, peak) = allocated_while(|| serde_json::from_str::<serde_json::Value>(&text));
            drop(tree.unwrap());
            let estimate = shape.tree_bytes(text.len());
            assert!(
                peak <= estimate,
                "{what}: parsing took {peak} bytes at its peak, estimated {estimate} ({shape:?})"
            );
        }
    }

    /// What `f` returned, and the most bytes this thread held at once while it ran, beyond what
    /// it held before.
    fn allocated_while<T>(f: impl FnOnce() -> T) -> (T, usize) {
        let before = LIVE.with(Cell::get);
        PEAK.with(|p| p.set(before));
        let out = f();
        (out, PEAK.with(Cell::get) - before)
    }

    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static LIVE: Cell<usize> = const { Cell::new(0) };
        static PEAK: Cell<usize> = const { Cell::new(0) };
    }

    /// Counts per thread what the test binary allocates, so that a test measures its own
    /// parse while others run beside it. Hand-written: the allocator crates count per process.
    struct PerThread;

    fn grew(bytes: usize) {
        let _ = LIVE.try_with(|live| {
            live.set(live.get() + bytes);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
        });
    }

    fn shrank(bytes: usize) {
        // Memory allocated on another thread may be freed on this one.
        let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(bytes)));
    }

    // SAFETY: every call is passed to `System` unchanged; the counters are const thread-locals
    // without destructors, so counting never allocates or reenters.
    unsafe impl GlobalAlloc for PerThread {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            grew(layout.size());
            // SAFETY: the caller's contract, passed on.
            unsafe { System.alloc(layout) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            grew(layout.size());
            // SAFETY: as above.
            unsafe { System.alloc_zeroed(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            shrank(layout.size());
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // Old and new blocks both exist while the contents are copied.
            grew(new_size);
            // SAFETY: as above.
            let moved = unsafe { System.realloc(ptr, layout, new_size) };
            shrank(if moved.is_null() {
                new_size
            } else {
                layout.size()
            });
            moved
        }
    }

    #[global_allocator]
    static PER_THREAD: PerThread = PerThread;

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(path_segment("a/b?c"), "a%2Fb%3Fc");
        assert_eq!(path_segment("system:web-1"), "system:web-1");
    }
}
