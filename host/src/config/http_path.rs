//! Which request paths the prefix check of `http:` can be trusted with. The check compares
//! text; the server compares what it resolves the text to, and servers resolve differently
//! (path parameters, decoding once or twice, backslashes, look-alikes, trimming). A path is
//! refused unless every server we know of would serve it under the prefix its text is under.
//! Used for every request (`crate::sandbox::capabilities::http::policy`) and for every rule's prefix.

/// The path a request may be sent to (the text itself, never rewritten, so what is sent is what
/// was checked; `/` for an empty path), or why it is refused. It must be made of
///
/// - the unreserved characters `A-Z a-z 0-9 - . _ ~`, the sub-delimiters `! $ & ' ( ) * + , =`
///   (not `;`), `:`, `@` and `/`;
/// - `%XX` escapes (two hex digits) of an ASCII byte that is not `.`, `/`, `\`, `%`, `;`, a
///   space or a control (0x00-0x1F, 0x7F);
///
/// and hold no `.` or `..` segment. Everything else is a spelling that some widely used server
/// resolves to another path than the text shows, up to outside a prefix the text is under; the
/// table in the tests shows each against four models of real servers. Costs one pass over the
/// path.
pub fn normalise_path(path: &str) -> Result<String, PathRefused> {
    // Besides letters and digits: the rest of the unreserved characters, the sub-delimiters
    // but `;`, and `:`, `@`, `/`.
    const PLAIN: &str = "-._~!$&'()*+,=:@/";
    let mut chars = path.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c.is_ascii_alphanumeric() || PLAIN.contains(c) => {}
            '%' => {
                check_escape(&path[at..])?;
                chars.nth(1);
            }
            c => return Err(PathRefused::Char(c)),
        }
    }
    if path
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err(PathRefused::DotSegment);
    }
    Ok(if path.is_empty() {
        "/".to_owned()
    } else {
        path.to_owned()
    })
}

/// Why a request path is refused ([`normalise_path`]): what it holds that some server resolves
/// to another path than its text shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathRefused {
    /// A `.` or `..` segment.
    DotSegment,
    /// A `%` not followed by two hex digits; the text from the `%` on (6 characters at most).
    BadEscape(String),
    /// A `%XX` escape of a byte some server resolves: the escape as written, and its byte.
    Escaped { escape: String, byte: u8 },
    /// A character outside the allow-list.
    Char(char),
}

/// Why nothing outside ASCII may be in a path, raw or percent-encoded.
const NON_ASCII: &str = "no non-ASCII may be in a path, raw or encoded: servers that read \
    overlong UTF-8 take `%c0%ae` for `.` and `%c0%af` for `/`, and servers that fold look-alikes \
    take U+FF0E, U+2024 and U+FE52 for `.` and U+FF0F, U+2215 and U+2044 for `/`";

/// Why a `%XX` escape at the start of `rest` is refused, if it is.
fn check_escape(rest: &str) -> Result<(), PathRefused> {
    let digits = rest
        .as_bytes()
        .get(1..3)
        .filter(|d| d.iter().all(u8::is_ascii_hexdigit));
    let Some(byte) = digits.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 16).ok())
    else {
        return Err(PathRefused::BadEscape(rest.chars().take(6).collect()));
    };
    match byte {
        b'.' | b'/' | b'\\' | b'%' | b';' | b'?' | b'#' | b' ' | 0..=0x1f | 0x7f | 0x80.. => {
            Err(PathRefused::Escaped {
                escape: rest[..3].to_owned(),
                byte,
            })
        }
        _ => Ok(()),
    }
}

impl std::fmt::Display for PathRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DotSegment => f.write_str(
                "the path holds a . or .. segment (servers resolve it against the segment before it)",
            ),
            Self::BadEscape(seen) => write!(
                f,
                "the path holds a % not followed by two hex digits ({seen:?}): servers read such \
                 text each their own way (IIS takes `%u002e` for `.`)"
            ),
            Self::Escaped { escape, byte } => {
                f.write_str("the path holds ")?;
                escaped(f, escape, *byte)
            }
            Self::Char(c) => {
                f.write_str("the path holds ")?;
                refused_char(f, *c)
            }
        }
    }
}

impl std::error::Error for PathRefused {}

/// Why the escape `escape` of `byte` is refused.
fn escaped(f: &mut std::fmt::Formatter<'_>, escape: &str, byte: u8) -> std::fmt::Result {
    match byte {
        b'.' => write!(
            f,
            "an encoded . ({escape}: servers decode it before they resolve dot segments, so \
             `%2e%2e` is served as `..`)"
        ),
        b'/' => write!(
            f,
            "an encoded / ({escape}: servers that decode it before they split segments serve \
             `..%2f` as `../`)"
        ),
        b'\\' => write!(
            f,
            "an encoded \\ ({escape}: servers that take `\\` for `/` decode it into a separator)"
        ),
        b'%' => write!(
            f,
            "an encoded % ({escape}: a proxy and a server that each decode once serve `%252e` \
             as `.`)"
        ),
        b';' => write!(
            f,
            "an encoded ; ({escape}: a proxy that decodes it before Tomcat, Jetty or Spring \
             makes `..%3b` the path parameter `..;`)"
        ),
        b'?' | b'#' => write!(
            f,
            "an encoded {} ({escape}: a proxy that decodes it before the server ends the path \
             there, so `/api/x/..%3F` is served as `/api/x/..`, one level up)",
            char::from(byte)
        ),
        b' ' => write!(
            f,
            "an encoded space ({escape}: Spring trims spaces from a segment's ends, so `..%20` is \
             served as `..`)"
        ),
        0..=0x1f | 0x7f => write!(
            f,
            "an encoded control byte ({escape}: servers trim controls from a segment's ends, so \
             `..%09` is served as `..`, or cut the path at NUL)"
        ),
        _ => write!(f, "an encoded byte above 0x7F ({escape}); {NON_ASCII}"),
    }
}

/// Why a character outside the allow-list is refused.
fn refused_char(f: &mut std::fmt::Formatter<'_>, c: char) -> std::fmt::Result {
    match c {
        ';' => f.write_str(
            "`;` (a path parameter: Tomcat, Jetty and Spring drop `;...` from a segment, so \
            `/api/..;/admin` is served as `/admin`)",
        ),
        '\\' => f.write_str("a \\ (Tomcat, Jetty, IIS and others take it for `/`)"),
        ' ' => f.write_str(
            "a space (Spring trims spaces from a segment's ends, so `.. ` is served as `..`)",
        ),
        '\0'..='\x1f' | '\x7f' => write!(
            f,
            "a control byte {:#04x} (servers trim controls from a segment's ends, so `..` and a \
             tab are served as `..`, or cut the path at NUL)",
            u32::from(c)
        ),
        c if !c.is_ascii() => write!(f, "non-ASCII {c:?} (U+{:04X}); {NON_ASCII}", u32::from(c)),
        c => write!(
            f,
            "{c:?}, which RFC 3986 allows in a path only percent-encoded: write it as %{:02X}",
            u32::from(c)
        ),
    }
}

#[cfg(test)]
mod tests {
    //! The rule against the way servers resolve paths. Four reference resolvers, each a small
    //! model of a family of servers written from their documented behaviour (not their code):
    //!
    //! - `tomcat_like`: Tomcat or Jetty in front of Spring MVC;
    //! - `nginx_like`: nginx;
    //! - `proxy_then_tomcat`: a proxy that decodes once and forwards what it decoded, in front
    //!   of a Tomcat-like backend that decodes again;
    //! - `folding`: a backend that decodes as IIS 4/5 did (`%u` escapes, overlong UTF-8) and
    //!   folds Unicode look-alikes as NFKC normalisation and Windows' best-fit mapping do.
    //!
    //! Each spelling of the table is judged under the prefix `/api` by every model: `i` served
    //! under `/api`, `O` served outside it, `?` a 400 or a model that cannot tell.

    use super::*;
    use crate::config::UrlPrefix;
    use unicode_normalization::UnicodeNormalization as _;

    /// What a model makes of a raw path: the path it serves, or `None` (a 400, or unknown).
    type Model = fn(&[u8]) -> Option<Vec<u8>>;

    /// The models, in the order of a verdict's letters.
    const MODELS: [(&str, Model); 4] = [
        ("tomcat_like", tomcat_like),
        ("nginx_like", nginx_like),
        ("proxy_then_tomcat", proxy_then_tomcat),
        ("folding", folding),
    ];

    /// `(path, verdicts of the four models, what the refusal names or None for a path that
    /// must pass)`. A path any model serves outside `/api`, or cannot tell, must be refused;
    /// some that every model keeps under `/api` are refused as well, since the rule is an
    /// allow-list (marked `iiii` with a reason).
    const SPELLINGS: &[(&str, &str, Option<&str>)] = &[
        // `;` path parameters: Tomcat, Jetty and Spring drop `;...` from each segment.
        ("/api/..;/admin", "OiOi", Some("path parameter")),
        ("/api/x/..;/..;/admin", "OiOi", Some("path parameter")),
        ("/api/..;x=1/admin", "OiOi", Some("path parameter")),
        ("/api/..;jsessionid=0/admin", "OiOi", Some("path parameter")),
        ("/api/x/..;a=b/..;/admin", "OiOi", Some("path parameter")),
        ("/api/%2e%2e;/admin", "OiOi", Some("encoded .")),
        ("/api/a;b", "iiii", Some("path parameter")),
        ("/api/.;/x", "iiii", Some("path parameter")),
        // Dot segments, plain and encoded once.
        ("/api/../admin", "OOOO", Some(".. segment")),
        ("/api/./../admin", "OOOO", Some(".. segment")),
        ("/api/%2e%2e/admin", "OOOO", Some("encoded .")),
        ("/api/%2E%2E/admin", "OOOO", Some("encoded .")),
        ("/api/.%2e/admin", "OOOO", Some("encoded .")),
        ("/api/%2e./admin", "OOOO", Some("encoded .")),
        // Encoded separators and backslashes.
        ("/api/..%2fadmin", "OOOO", Some("encoded /")),
        ("/api/x%2f..%2f..%2fadmin", "OOOO", Some("encoded /")),
        ("/api/..%2Fadmin", "OOOO", Some("encoded /")),
        ("/api/..%5cadmin", "OiOO", Some("encoded \\")),
        ("/api/%5c..%5cadmin", "OiOO", Some("encoded \\")),
        ("/api/..\\admin", "OiOO", Some("a \\")),
        ("/api/\\..\\admin", "OiOO", Some("a \\")),
        // Encoded `%` and `;`: decoded by a proxy, decoded or stripped again behind it.
        ("/api/%252e%252e/admin", "iiOi", Some("encoded %")),
        ("/api/%252E%252E/admin", "iiOi", Some("encoded %")),
        ("/api/..%252fadmin", "iiOi", Some("encoded %")),
        ("/api/%25%32%65%25%32%65/admin", "iiOi", Some("encoded %")),
        ("/api/..%3b/admin", "iiOi", Some("encoded ;")),
        ("/api/..%253b/admin", "iiii", Some("encoded %")),
        // `%` not followed by two hex digits: IIS's `%u`, and text each server reads its way.
        ("/api/%u002e%u002e/admin", "???O", Some("two hex digits")),
        ("/api/..%u2215admin", "???O", Some("two hex digits")),
        ("/api/..%u002fadmin", "???O", Some("two hex digits")),
        ("/api/%%32%65%%32%65/admin", "????", Some("two hex digits")),
        ("/api/%", "????", Some("two hex digits")),
        ("/api/%2", "????", Some("two hex digits")),
        ("/api/%zz/admin", "????", Some("two hex digits")),
        // Overlong UTF-8 for `.` and `/`.
        ("/api/%c0%ae%c0%ae/admin", "?i?O", Some("non-ASCII")),
        ("/api/%C0%AE%C0%AE/admin", "?i?O", Some("non-ASCII")),
        ("/api/%e0%80%ae%e0%80%ae/admin", "?i?O", Some("non-ASCII")),
        ("/api/..%c0%afadmin", "?i?O", Some("non-ASCII")),
        ("/api/%c0%ae%c0%ae%c0%afadmin", "?i?O", Some("non-ASCII")),
        ("/api/..%e0%80%afadmin", "?i?O", Some("non-ASCII")),
        // Unicode look-alikes of `.`, `/` and `\`, encoded as UTF-8 and raw.
        ("/api/%ef%bc%8e%ef%bc%8e/admin", "iiiO", Some("non-ASCII")),
        ("/api/%e2%80%a4%e2%80%a4/admin", "iiiO", Some("non-ASCII")),
        ("/api/%ef%b9%92%ef%b9%92/admin", "iiiO", Some("non-ASCII")),
        ("/api/%e2%80%a5/admin", "iiiO", Some("non-ASCII")),
        ("/api/..%ef%bc%8fadmin", "iiiO", Some("non-ASCII")),
        ("/api/..%e2%88%95admin", "iiiO", Some("non-ASCII")),
        ("/api/..%e2%81%84admin", "iiiO", Some("non-ASCII")),
        ("/api/..%ef%bc%bcadmin", "iiiO", Some("non-ASCII")),
        ("/api/\u{ff0e}\u{ff0e}/admin", "iiiO", Some("non-ASCII")),
        ("/api/\u{2024}\u{2024}/admin", "iiiO", Some("non-ASCII")),
        ("/api/\u{fe52}\u{fe52}/admin", "iiiO", Some("non-ASCII")),
        ("/api/..\u{ff0f}admin", "iiiO", Some("non-ASCII")),
        ("/api/..\u{2215}admin", "iiiO", Some("non-ASCII")),
        ("/api/..\u{2044}admin", "iiiO", Some("non-ASCII")),
        ("/api/..\u{ff3c}admin", "iiiO", Some("non-ASCII")),
        ("/api/caf\u{e9}", "iiii", Some("non-ASCII")),
        // NUL, tabs, spaces and other controls that servers trim or cut at.
        ("/api/..%00/admin", "???O", Some("control")),
        ("/api/..%09/admin", "OiOi", Some("control")),
        ("/api/..%0d%0a/admin", "OiOi", Some("control")),
        ("/api/%0a../admin", "OiOi", Some("control")),
        ("/api/..%20/admin", "OiOi", Some("space")),
        ("/api/..%2509/admin", "iiOi", Some("encoded %")),
        ("/api/.. /admin", "OiOi", Some("a space")),
        ("/api/..\t/admin", "OiOi", Some("control")),
        ("/api/..\0/admin", "???O", Some("control")),
        ("/api/..%7f/admin", "iiii", Some("control")),
        ("/api/a%20b", "iiii", Some("space")),
        // Other characters RFC 3986 allows in a path only percent-encoded.
        ("/api/{\"a\"}", "iiii", Some("only percent-encoded")),
        ("/api/a|b", "iiii", Some("only percent-encoded")),
        // Paths that must pass: every model keeps them under `/api`.
        ("/api", "iiii", None),
        ("/api/", "iiii", None),
        ("/api/v2/x", "iiii", None),
        ("/api/a/b-c_d~e", "iiii", None),
        ("/api/a:b@c", "iiii", None),
        ("/api/v1/servers/localhost/zones/example.org.", "iiii", None),
        ("/api/.well-known/x", "iiii", None),
        ("/api/..a/a../a..b", "iiii", None),
        ("/api/!$&'()*+,=", "iiii", None),
        ("/api/%41%7e%22%7B%7D", "iiii", None),
        ("/api//x", "iiii", None),
    ];

    #[test]
    fn a_path_passes_only_if_no_server_model_serves_it_outside_the_prefix() {
        let refused = SPELLINGS.iter().filter(|row| row.2.is_some()).count();
        assert!(
            refused >= 40,
            "{refused} hostile spellings; the table wants 40"
        );
        let mut wrong = Vec::new();
        for &(path, expected, why) in SPELLINGS {
            let verdicts = verdicts(path);
            if verdicts != expected {
                wrong.push(format!(
                    "{path:?}: the models say {verdicts}, not {expected}"
                ));
            }
            let checked = normalise_path(path);
            let as_prefix = format!("http://127.0.0.1:8081{path}").parse::<UrlPrefix>();
            match (why, checked) {
                (None, _) if verdicts != "iiii" => {
                    wrong.push(format!("{path:?} cannot be allowed: {}", served(path)));
                }
                (None, Ok(checked)) if checked == path && as_prefix.is_ok() => {}
                (None, checked) => wrong.push(format!(
                    "{path:?} must pass: {checked:?}, as a prefix {as_prefix:?}"
                )),
                (Some(why), Err(err)) if err.to_string().contains(why) && as_prefix.is_err() => {}
                (Some(why), checked) => wrong.push(format!(
                    "{path:?} must be refused for {why:?}: {checked:?}, as a prefix {as_prefix:?}"
                )),
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn the_models_serve_the_key_spellings_as_their_servers_do() {
        const OUTSIDE: &str = "/admin";
        let example = "/api/zones/example.org.";
        for (path, expected) in [
            (
                "/api/..;/admin",
                [OUTSIDE, "/api/..;/admin", OUTSIDE, "/api/..;/admin"],
            ),
            (
                "/api/%252e%252e/admin",
                [
                    "/api/%2e%2e/admin",
                    "/api/%2e%2e/admin",
                    OUTSIDE,
                    "/api/%2e%2e/admin",
                ],
            ),
            (
                "/api/%c0%ae%c0%ae/admin",
                [
                    "400",
                    "/api/\u{fffd}\u{fffd}\u{fffd}\u{fffd}/admin",
                    "400",
                    OUTSIDE,
                ],
            ),
            (
                "/api/%ef%bc%8e%ef%bc%8e/admin",
                [
                    "/api/\u{ff0e}\u{ff0e}/admin",
                    "/api/\u{ff0e}\u{ff0e}/admin",
                    "/api/\u{ff0e}\u{ff0e}/admin",
                    OUTSIDE,
                ],
            ),
            (
                "/api/..%09/admin",
                [OUTSIDE, "/api/..\t/admin", OUTSIDE, "/api/..\t/admin"],
            ),
            ("/api/..%00/admin", ["400", "400", "400", "/"]),
            (example, [example; 4]),
        ] {
            let served = MODELS.map(|(_, model)| {
                model(path.as_bytes()).map_or("400".to_owned(), |p| {
                    String::from_utf8_lossy(&p).into_owned()
                })
            });
            assert_eq!(served, expected, "{path:?}");
        }
    }

    fn verdicts(path: &str) -> String {
        MODELS
            .iter()
            .map(|(_, model)| match model(path.as_bytes()) {
                None => '?',
                Some(p) if p == b"/api" || p.starts_with(b"/api/") => 'i',
                Some(_) => 'O',
            })
            .collect()
    }

    fn served(path: &str) -> String {
        let each: Vec<String> = MODELS
            .iter()
            .map(|(name, model)| match model(path.as_bytes()) {
                Some(p) => format!("{name}={}", String::from_utf8_lossy(&p)),
                None => format!("{name}=400"),
            })
            .collect();
        each.join(" ")
    }

    /// Tomcat or Jetty in front of Spring MVC: `;...` dropped from every segment, one decoding
    /// read as strict UTF-8 (else 400), NUL refused, an encoded `/` taken as a separator (Jetty
    /// before 10, Tomcat with `ALLOW_ENCODED_SLASH`), `\` as `/` (`ALLOW_BACKSLASH`), each
    /// segment trimmed of bytes up to 0x20 (Spring's path tokenizer trims), dot segments.
    fn tomcat_like(path: &[u8]) -> Option<Vec<u8>> {
        let segments: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .map(|segment| segment.split(|&b| b == b';').next().unwrap_or_default())
            .collect();
        let decoded = decode_once(&segments.join(&b'/'))?;
        let text = std::str::from_utf8(&decoded).ok()?;
        if text.contains('\0') {
            return None;
        }
        let slashed = text.replace('\\', "/");
        let trimmed: Vec<&str> = slashed
            .split('/')
            .map(|segment| segment.trim_matches(|c: char| c <= ' '))
            .collect();
        resolve(trimmed.join("/").as_bytes())
    }

    /// nginx: one decoding on bytes (an encoded `/` is a separator), NUL refused, `;` and `\`
    /// plain bytes, slashes merged, dot segments resolved.
    fn nginx_like(path: &[u8]) -> Option<Vec<u8>> {
        let decoded = decode_once(path)?;
        if decoded.contains(&0) {
            return None;
        }
        resolve(&decoded)
    }

    /// A proxy that decodes once and forwards what it decoded, before a Tomcat-like backend.
    fn proxy_then_tomcat(path: &[u8]) -> Option<Vec<u8>> {
        tomcat_like(&decode_once(path)?)
    }

    /// `%XX` and IIS's `%uXXXX` decoded, UTF-8 read leniently (overlong forms accepted, as IIS
    /// 4/5 did: `%c0%af` is `/`), look-alikes folded (NFKC, and the slashes Unicode lists as
    /// confusable with `/` and `\`), `\` taken as `/`, the path cut at NUL as a C string is.
    fn folding(path: &[u8]) -> Option<Vec<u8>> {
        let text = lenient_utf8(&decode_with_u(path)?);
        let folded: String = text
            .nfkc()
            .map(|c| match c {
                '\u{2215}' | '\u{2044}' | '\u{29f8}' => '/',
                '\u{2216}' | '\u{29f5}' => '\\',
                c => c,
            })
            .collect();
        let cut = folded.split('\0').next().unwrap_or_default();
        resolve(cut.replace('\\', "/").as_bytes())
    }

    /// `.` and `..` resolved and empty segments merged; `None` for `..` above the root, which
    /// servers answer with 400.
    fn resolve(path: &[u8]) -> Option<Vec<u8>> {
        let mut kept: Vec<&[u8]> = Vec::new();
        for segment in path.split(|&b| b == b'/') {
            match segment {
                b"" | b"." => {}
                b".." => {
                    kept.pop()?;
                }
                segment => kept.push(segment),
            }
        }
        if kept.is_empty() {
            return Some(b"/".to_vec());
        }
        Some(
            kept.iter()
                .flat_map(|s| [&b"/"[..], s])
                .flatten()
                .copied()
                .collect(),
        )
    }

    /// Written here, not taken from `percent-encoding`, because a model must answer a `%`
    /// without two hex digits with 400 (`None`), as Tomcat and nginx do, not pass it on.
    fn decode_once(path: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(path.len());
        let mut rest = path;
        while let Some((&b, tail)) = rest.split_first() {
            if b == b'%' {
                out.push(u8::try_from(hex(tail.get(..2)?)?).ok()?);
                rest = &tail[2..];
            } else {
                out.push(b);
                rest = tail;
            }
        }
        Some(out)
    }

    /// [`decode_once`] that also reads `%uXXXX` as the UTF-8 of U+XXXX.
    fn decode_with_u(path: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(path.len());
        let mut rest = path;
        while let Some((&b, tail)) = rest.split_first() {
            match (b, tail.first()) {
                (b'%', Some(b'u' | b'U')) => {
                    let c = char::from_u32(hex(tail.get(1..5)?)?)?;
                    out.extend_from_slice(c.to_string().as_bytes());
                    rest = &tail[5..];
                }
                (b'%', _) => {
                    out.push(u8::try_from(hex(tail.get(..2)?)?).ok()?);
                    rest = &tail[2..];
                }
                _ => {
                    out.push(b);
                    rest = tail;
                }
            }
        }
        Some(out)
    }

    fn hex(digits: &[u8]) -> Option<u32> {
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    }

    /// UTF-8 read as the decoders of the IIS 4/5 era did: the bits of a sequence taken whatever
    /// its length, so the overlong `C0 AE` and `E0 80 AE` are `.`. Written here because every
    /// maintained decoder refuses overlong forms, which is the point.
    fn lenient_utf8(bytes: &[u8]) -> String {
        let mut out = String::new();
        let mut rest = bytes;
        while let Some((&lead, tail)) = rest.split_first() {
            let (len, bits) = match lead {
                0x00..=0x7f => (0, u32::from(lead)),
                0xc0..=0xdf => (1, u32::from(lead & 0x1f)),
                0xe0..=0xef => (2, u32::from(lead & 0x0f)),
                0xf0..=0xf7 => (3, u32::from(lead & 0x07)),
                _ => (0, 0xfffd),
            };
            let continuation = tail
                .get(..len)
                .filter(|c| c.iter().all(|b| b & 0xc0 == 0x80));
            let Some(continuation) = continuation else {
                out.push('\u{fffd}');
                rest = tail;
                continue;
            };
            let code = continuation
                .iter()
                .fold(bits, |code, b| (code << 6) | u32::from(b & 0x3f));
            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
            rest = &tail[len..];
        }
        out
    }
}
