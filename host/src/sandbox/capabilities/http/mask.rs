//! Credentials the host added must not come back to the guest: a server that reflects request
//! headers (an echo endpoint, an error message quoting the key, a value stored by one request
//! and read back by another) would hand them over. Every credential of the guest's grant, not
//! only the one a request carried, is looked for in every response, in the spellings a server
//! plausibly produces, and each occurrence is overwritten with `*` of the same length, in the
//! body, in header values and in header names, so lengths and framing stay intact.
//!
//! What is recognised, for a value of [`SHORTEST`] bytes or more:
//!
//! - the value as sent, in any ASCII letter case;
//! - its hex, in any letter case;
//! - its base64, standard or URL-safe alphabet (even mixed), padded or not, at each of the three
//!   byte offsets the value can start at in the encoded data (`Basic base64(user:key)`, a JWT
//!   claim, a dump of the whole request): the characters only the value decides, and the one
//!   at either end that mixes a few of its bits with its neighbours'; line breaks (CR, LF, or
//!   JSON's `\r` and `\n`) may fall anywhere in it, as in MIME (76 columns) and PEM (64);
//!   a form whose characters of the value alone are fewer than [`SHORTEST_ENCODED`] is left out;
//! - in each of these, any byte written as a URL escape (`%2F`, `%2f`) or a JSON escape (`\/`,
//!   `\"`, `\\`, `\u002f`).
//!
//! Header names are compared ignoring letter case, base64 included (HTTP lowercases them).
//! What cannot be recognised is listed in docs/security.md: other encodings (base32, UTF-16,
//! HTML entities), encodings stacked on each other, hashing, encryption, compression.

use http::{HeaderMap, HeaderName, HeaderValue};

/// Values shorter than this are not masked: they would garble ordinary text.
const SHORTEST: usize = 4;
/// Base64 characters that only the value decides, at the least, for a form to be looked for:
/// 36 bits, which unrelated base64 matches by chance once in 2^36 positions. Values of 5 bytes
/// or more reach it at every offset.
const SHORTEST_ENCODED: usize = 6;

/// The values to hide from the guest, with the forms they are looked for in.
#[derive(Debug, Clone)]
pub(super) struct Secrets {
    values: Vec<Vec<u8>>,
    forms: Vec<Form>,
    /// For each byte, the forms whose first character can stand for it: the scan tries a form
    /// only where the text (as it is, or an escape undone) can start it.
    starting: Vec<Vec<usize>>,
}

impl Default for Secrets {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            forms: Vec::new(),
            starting: vec![Vec::new(); 256],
        }
    }
}

/// One spelling of a value: a run of units, each matched against one character of the text
/// after its escape (if any) is undone.
#[derive(Debug, Clone)]
struct Form {
    /// Base64 at an offset that splits a byte: the character before the value's own, which
    /// holds the top bits of its first byte beside bits of what precedes it.
    lead: Option<Unit>,
    units: Vec<Unit>,
    /// Base64: the character after, with the bottom bits of its last byte.
    trail: Option<Unit>,
    /// Base64: line breaks may stand between characters.
    wrapped: bool,
}

#[derive(Debug, Clone, Copy)]
enum Unit {
    /// A byte, in either ASCII case.
    Byte(u8),
    /// A base64 character (either alphabet) whose bits under `mask` are `bits`.
    Sextet { mask: u8, bits: u8 },
}

impl Secrets {
    /// Hides `value` in every form it is recognised in.
    pub(super) fn add(&mut self, value: &[u8]) {
        if value.len() < SHORTEST || self.values.iter().any(|v| v == value) {
            return;
        }
        let hex: Vec<u8> = value
            .iter()
            .flat_map(|b| [b >> 4, b & 0xf])
            .map(|nibble| b"0123456789abcdef"[usize::from(nibble)])
            .collect();
        let forms = [Form::plain(value), Form::plain(&hex)]
            .into_iter()
            .chain((0..3).filter_map(|offset| Form::base64(value, offset)));
        for form in forms {
            let index = self.forms.len();
            for byte in 0..=u8::MAX {
                if form.units[0].accepts(byte, true) {
                    self.starting[usize::from(byte)].push(index);
                }
            }
            self.forms.push(form);
        }
        self.values.push(value.to_vec());
    }

    pub(super) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `bytes` masked, or None when no secret is in them (and nothing was copied). Costs a
    /// look-up per byte and, where a form can start, a comparison or two: measured in a release
    /// build, 30 to 50 ms for 4 MiB of JSON and three values, under 200 ms for 4 MiB made to
    /// start a form at every sixth byte.
    pub(super) fn masked(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let hidden = self.hidden(bytes, false)?;
        let mut bytes = bytes.to_vec();
        overwrite(&mut bytes, &hidden);
        Some(bytes)
    }

    /// Masks header values, and header names ignoring letter case (HTTP lowercases them). A
    /// header whose masked name or value would not be valid is dropped (it cannot happen: `*` is
    /// valid in both).
    pub(super) fn mask_headers(&self, headers: &mut HeaderMap) {
        let mut masked = HeaderMap::with_capacity(headers.len());
        let mut current: Option<HeaderName> = None;
        for (next, value) in std::mem::take(headers) {
            if next.is_some() {
                current = next;
            }
            let Some(name) = current.clone() else {
                continue;
            };
            let mut name_bytes = name.as_str().as_bytes().to_vec();
            let name = if self.mask_folded(&mut name_bytes, true) {
                HeaderName::from_bytes(&name_bytes).ok()
            } else {
                Some(name)
            };
            let value = match self.masked(value.as_bytes()) {
                Some(bytes) => HeaderValue::from_bytes(&bytes).ok(),
                None => Some(value),
            };
            if let (Some(name), Some(value)) = (name, value) {
                masked.append(name, value);
            }
        }
        *headers = masked;
    }

    fn mask_folded(&self, bytes: &mut [u8], fold: bool) -> bool {
        let Some(hidden) = self.hidden(bytes, fold) else {
            return false;
        };
        overwrite(bytes, &hidden);
        true
    }

    /// A bit for each byte of `bytes` that a secret covers, or None. Every occurrence is found
    /// in the unchanged text, so that one form's mask cannot break another's match; a bit a
    /// byte, so that a text of nothing but matches costs an eighth of its size.
    fn hidden(&self, bytes: &[u8], fold: bool) -> Option<Vec<u64>> {
        let mut hidden = Vec::new();
        for at in 0..bytes.len() {
            let [plain, escaped] = spellings(bytes, at);
            let escaped = escaped.filter(|e| Some(e.0) != plain.map(|p| p.0));
            for (byte, _) in plain.into_iter().chain(escaped) {
                for &form in &self.starting[usize::from(byte)] {
                    let Some(span) = self.forms[form].find(bytes, at, fold) else {
                        continue;
                    };
                    if hidden.is_empty() {
                        hidden = vec![0u64; bytes.len().div_ceil(64)];
                    }
                    for i in span {
                        hidden[i / 64] |= 1 << (i % 64);
                    }
                }
            }
        }
        (!hidden.is_empty()).then_some(hidden)
    }
}

fn overwrite(bytes: &mut [u8], hidden: &[u64]) {
    for (i, byte) in bytes.iter_mut().enumerate() {
        if hidden[i / 64] >> (i % 64) & 1 == 1 {
            *byte = b'*';
        }
    }
}

impl Form {
    fn plain(bytes: &[u8]) -> Self {
        Self {
            lead: None,
            units: bytes.iter().map(|&b| Unit::Byte(b)).collect(),
            trail: None,
            // A server may wrap any text it quotes (a log line, a folded header).
            wrapped: true,
        }
    }

    /// The base64 characters of `offset` bytes of anything followed by `value`, from the first
    /// that holds a bit of the value to the last; None when too few hold nothing else.
    fn base64(value: &[u8], offset: usize) -> Option<Self> {
        let (first, end) = (8 * offset, 8 * (offset + value.len()));
        let bit = |at: usize| (value[(at - first) / 8] >> (7 - (at - first) % 8)) & 1;
        let (mut lead, mut units, mut trail) = (None, Vec::new(), None);
        for character in first / 6..end.div_ceil(6) {
            let (mut mask, mut bits) = (0, 0);
            for at in (6 * character..6 * character + 6).filter(|at| (first..end).contains(at)) {
                let place = 5 - (at - 6 * character);
                mask |= 1 << place;
                bits |= bit(at) << place;
            }
            let unit = Unit::Sextet { mask, bits };
            match mask {
                0b11_1111 => units.push(unit),
                _ if units.is_empty() => lead = Some(unit),
                _ => trail = Some(unit),
            }
        }
        (units.len() >= SHORTEST_ENCODED).then_some(Self {
            lead,
            units,
            trail,
            wrapped: true,
        })
    }

    /// The text the form covers when its units start at `at`: with the lead before and the
    /// trail after when they are there.
    fn find(&self, text: &[u8], at: usize, fold: bool) -> Option<std::ops::Range<usize>> {
        let ends = self.run(text, at, fold)?;
        let start = self.lead_start(text, at, fold).unwrap_or(at);
        let trailed = match self.trail {
            Some(unit) => step(text, &self.breaks(text, ends.clone()), unit, fold),
            None => Vec::new(),
        };
        let end = trailed.into_iter().chain(ends).max()?;
        Some(start..end)
    }

    /// Where the units end when they start at `at`, or None.
    fn run(&self, text: &[u8], at: usize, fold: bool) -> Option<Vec<usize>> {
        // Most text spells a form plainly or not at all: compare character by character first,
        // and undo escapes only when one may stand before the mismatch.
        let plain = self
            .units
            .iter()
            .enumerate()
            .find(|(i, unit)| !text.get(at + i).is_some_and(|&b| unit.accepts(b, fold)));
        let Some((mismatch, _)) = plain else {
            return Some(vec![at + self.units.len()]);
        };
        let seen = &text[at..text.len().min(at + mismatch + 1)];
        if !seen
            .iter()
            .any(|b| matches!(b, b'%' | b'\\' | b'\r' | b'\n'))
        {
            return None;
        }
        // A character of the text stands for one byte at most, except where a `%` or `\` may
        // be itself or start an escape: only a form with such a byte follows every spelling.
        if self
            .units
            .iter()
            .any(|u| matches!(u, Unit::Byte(b'%' | b'\\')))
        {
            return self.every_spelling(text, at, fold);
        }
        let mut end = at;
        for (i, unit) in self.units.iter().enumerate() {
            if i > 0 && self.wrapped {
                while let Some(length) = line_break(text, end) {
                    end += length;
                }
            }
            let (_, length) = spellings(text, end)
                .into_iter()
                .flatten()
                .find(|&(byte, _)| unit.accepts(byte, fold))?;
            end += length;
        }
        Some(vec![end])
    }

    fn every_spelling(&self, text: &[u8], at: usize, fold: bool) -> Option<Vec<usize>> {
        let mut ends = vec![at];
        for (i, unit) in self.units.iter().enumerate() {
            if i > 0 {
                ends = self.breaks(text, ends);
            }
            ends = step(text, &ends, *unit, fold);
            if ends.is_empty() {
                return None;
            }
        }
        Some(ends)
    }

    /// Where the lead character starts when one stands before `at` (line breaks between: only
    /// base64 has a lead).
    fn lead_start(&self, text: &[u8], at: usize, fold: bool) -> Option<usize> {
        let lead = self.lead?;
        let mut before = at;
        loop {
            match text[..before] {
                [.., b'\r' | b'\n'] => before -= 1,
                [.., b'\\', b'r' | b'n'] => before -= 2,
                _ => break,
            }
        }
        [1, 2, 3, 6].into_iter().find_map(|length| {
            let start = before.checked_sub(length)?;
            spellings(text, start)
                .into_iter()
                .flatten()
                .any(|(byte, l)| l == length && lead.accepts(byte, fold))
                .then_some(start)
        })
    }

    /// `positions` and where the line breaks after each end, when the form may be wrapped.
    fn breaks(&self, text: &[u8], mut positions: Vec<usize>) -> Vec<usize> {
        if !self.wrapped {
            return positions;
        }
        let mut i = 0;
        while i < positions.len() {
            if let Some(length) = line_break(text, positions[i])
                && !positions.contains(&(positions[i] + length))
            {
                positions.push(positions[i] + length);
            }
            i += 1;
        }
        positions
    }
}

impl Unit {
    fn accepts(self, byte: u8, fold: bool) -> bool {
        match self {
            Unit::Byte(b) => byte.eq_ignore_ascii_case(&b),
            Unit::Sextet { mask, bits } => {
                let fits = |c: u8| sextet(c).is_some_and(|s| s & mask == bits);
                fits(byte)
                    || fold && (fits(byte.to_ascii_lowercase()) || fits(byte.to_ascii_uppercase()))
            }
        }
    }
}

/// Where `unit` ends after each of `starts`, in any spelling.
fn step(text: &[u8], starts: &[usize], unit: Unit, fold: bool) -> Vec<usize> {
    let mut ends = Vec::new();
    for &at in starts {
        for (byte, length) in spellings(text, at).into_iter().flatten() {
            if unit.accepts(byte, fold) && !ends.contains(&(at + length)) {
                ends.push(at + length);
            }
        }
    }
    ends
}

/// The length of a line break (CR or LF, as it is or escaped) at `at`.
fn line_break(text: &[u8], at: usize) -> Option<usize> {
    spellings(text, at)
        .into_iter()
        .flatten()
        .find_map(|(byte, length)| matches!(byte, b'\r' | b'\n').then_some(length))
}

/// The byte the text at `at` stands for, with how many characters it takes: as it is, and
/// undoing a URL escape (`%2F`) or a JSON one (`\/`, `\n`, `\u002F`) when one starts there.
fn spellings(text: &[u8], at: usize) -> [Option<(u8, usize)>; 2] {
    let Some(&first) = text.get(at) else {
        return [None, None];
    };
    let hex = |from: usize, digits: usize| {
        let digits = text.get(from..from + digits)?;
        digits
            .iter()
            .try_fold(0, |n, &d| Some(n * 16 + char::from(d).to_digit(16)?))
    };
    let escaped = match (first, text.get(at + 1)) {
        (b'%', _) => hex(at + 1, 2).map(|b| (b, 3)),
        (b'\\', Some(b'u')) => hex(at + 2, 4).map(|b| (b, 6)),
        (b'\\', Some(&c @ (b'/' | b'\\' | b'"'))) => Some((u32::from(c), 2)),
        (b'\\', Some(b'n')) => Some((u32::from(b'\n'), 2)),
        (b'\\', Some(b'r')) => Some((u32::from(b'\r'), 2)),
        _ => None,
    };
    let escaped = escaped.and_then(|(b, length)| Some((u8::try_from(b).ok()?, length)));
    [Some((first, 1)), escaped]
}

/// The six bits a base64 character of either alphabet stands for.
fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    use bytes::Bytes;
    use http::{HeaderMap, HeaderName, HeaderValue};

    use base64::Engine as _;

    use super::*;

    /// A key as API keys come, and one whose base64 differs between the alphabets (`+`, `/`) and
    /// that JSON and URLs escape.
    const KEYS: [&[u8]; 2] = [b"s3cr3t-api-key-0123456789", b"k3y?>~/+=&%\"\\y0123"];

    fn secrets(keys: &[&[u8]]) -> Secrets {
        let mut secrets = Secrets::default();
        for key in keys {
            secrets.add(key);
        }
        secrets
    }

    fn masked(secrets: &Secrets, text: &str) -> String {
        let bytes = secrets.masked(text.as_bytes());
        String::from_utf8(bytes.unwrap_or_else(|| text.as_bytes().to_vec())).unwrap()
    }

    /// The characters of a base64 encoding that carry bits of data bytes `from..to`.
    fn dependent(from: usize, to: usize) -> Range<usize> {
        (8 * from) / 6..(8 * to).div_ceil(6)
    }

    /// What a guest could read a key back from: as sent, and each run of base64 characters (at
    /// every alignment, in both alphabets) that only the key decides.
    fn traces(key: &[u8]) -> Vec<String> {
        let mut traces = vec![String::from_utf8_lossy(key).into_owned()];
        for engine in [&STANDARD, &URL_SAFE] {
            for k in 0..3 {
                let mut data = vec![0; k];
                data.extend_from_slice(key);
                let encoded = engine.encode(&data);
                traces.push(encoded[(8 * k).div_ceil(6)..(8 * (k + key.len())) / 6].to_owned());
            }
        }
        traces
    }

    /// `key` with each byte written as `spell` writes it.
    fn spelled(key: &[u8], spell: impl Fn(u8) -> String) -> String {
        key.iter().map(|&b| spell(b)).collect()
    }

    /// Every character of `encoded` that carries a bit of data bytes `key` is `*` in `out`, and
    /// every other is as it was; `breaks` are characters that are not base64 (line breaks).
    fn assert_hidden(encoded: &str, out: &str, key: Range<usize>, breaks: &[&str]) {
        assert_eq!(out.len(), encoded.len(), "{encoded}\n{out}");
        let hidden = dependent(key.start, key.end);
        let (mut at, mut index) = (0, 0);
        while at < encoded.len() {
            if let Some(b) = breaks.iter().find(|b| encoded[at..].starts_with(**b)) {
                at += b.len();
                continue;
            }
            let (was, now) = (&encoded[at..=at], &out[at..=at]);
            if hidden.contains(&index) {
                assert_eq!(now, "*", "character {index} of {encoded}\n{out}");
            } else {
                assert_eq!(now, was, "character {index} of {encoded}\n{out}");
            }
            at += 1;
            index += 1;
        }
    }

    #[test]
    fn a_reflected_credential_is_overwritten_as_sent_and_base64_encoded() {
        let mut secrets = Secrets::default();
        secrets.add(b"s3cr3t-key");
        secrets.add(b"abc");
        let body = br#"{"echo":"X-API-Key: s3cr3t-key","b64":"czNjcjN0LWtleQ==","again":"s3cr3t-key","abc":1}"#;
        let length = body.len();
        let text = String::from_utf8(secrets.masked(body).unwrap()).unwrap();
        assert!(!text.contains("s3cr3t-key"), "{text}");
        assert!(!text.contains("czNjcjN0LWtleQ"), "{text}");
        assert!(
            text.contains(r#""abc":1"#),
            "a short value is not masked: {text}"
        );
        assert_eq!(text.len(), length);
        assert_eq!(secrets.masked(b"nothing to see"), None);
    }

    #[test]
    fn base64_of_a_key_is_masked_at_every_offset_in_both_alphabets_padded_or_not() {
        for key in KEYS {
            let secrets = secrets(&[key]);
            for before in 0..6 {
                for after in 0..4 {
                    let mut data = b"user:x"[..before].to_vec();
                    data.extend_from_slice(key);
                    data.extend_from_slice(&b"\r\nZz"[..after]);
                    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
                        let encoded = engine.encode(&data);
                        let out = masked(&secrets, &encoded);
                        assert_hidden(&encoded, &out, before..before + key.len(), &[]);
                    }
                }
            }
        }
    }

    #[test]
    fn a_basic_credential_a_jwt_claim_and_a_base64_dump_of_the_request_hide_the_key() {
        for key in KEYS {
            let secrets = secrets(&[key]);
            let text = String::from_utf8_lossy(key);
            let basic = format!("Basic {}", STANDARD.encode(format!("user:{text}")));
            let jwt = format!(
                "{}.{}.",
                URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
                URL_SAFE_NO_PAD.encode(format!(r#"{{"sub":"guest","key":"{text}","n":1}}"#))
            );
            let dump = STANDARD.encode(format!(
                "GET /api/echo HTTP/1.1\r\nhost: example\r\nx-api-key: {text}\r\n\r\n"
            ));
            for body in [basic, jwt, dump] {
                let out = masked(&secrets, &body);
                for trace in traces(key) {
                    assert!(!out.contains(&trace), "{trace} in {out}");
                }
            }
        }
    }

    #[test]
    fn line_wrapped_base64_is_masked_across_its_line_breaks() {
        for key in KEYS {
            let secrets = secrets(&[key]);
            // 50 bytes before the key put its encoding across column 64 and 76.
            let mut data = vec![b'.'; 50];
            data.extend_from_slice(key);
            data.extend_from_slice(b" and after it");
            let encoded = STANDARD.encode(&data);
            for (width, separator) in [(76, "\r\n"), (64, "\n"), (76, r"\r\n"), (64, r"\n")] {
                let lines: Vec<&str> = encoded
                    .as_bytes()
                    .chunks(width)
                    .map(|c| std::str::from_utf8(c).unwrap())
                    .collect();
                let wrapped = lines.join(separator);
                let out = masked(&secrets, &wrapped);
                assert_hidden(&wrapped, &out, 50..50 + key.len(), &[separator]);
            }
        }
    }

    #[test]
    fn a_key_or_its_hex_broken_across_lines_is_masked() {
        let secrets = secrets(&KEYS);
        let key = String::from_utf8_lossy(KEYS[1]).into_owned();
        let hex = spelled(KEYS[1], |b| format!("{b:02x}"));
        for form in [key, hex] {
            for separator in ["\n", "\r\n", "\\n"] {
                let (a, b) = form.split_at(form.len() / 2);
                let body = format!("<{a}{separator}{b}>");
                let out = masked(&secrets, &body);
                assert!(!out.contains(a) && !out.contains(b), "{body:?} -> {out:?}");
            }
        }
    }

    #[test]
    fn a_key_in_hex_either_case_percent_encoded_or_json_escaped_is_masked() {
        let secrets = secrets(&KEYS);
        let hex = |key: &[u8]| spelled(key, |b| format!("{b:02x}"));
        let percent_all = |key: &[u8]| spelled(key, |b| format!("%{b:02X}"));
        let percent = |key: &[u8]| {
            spelled(key, |b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
        };
        let unicode = |key: &[u8]| spelled(key, |b| format!("\\u{b:04x}"));
        let text = |key: &[u8]| String::from_utf8_lossy(key).into_owned();
        let mut forms = Vec::new();
        for key in KEYS {
            forms.extend([
                text(key).to_uppercase(),
                hex(key),
                hex(key).to_uppercase(),
                percent(key),
                percent(key).to_lowercase(),
                percent_all(key),
                unicode(key),
                serde_json::to_string(&text(key))
                    .unwrap()
                    .trim_matches('"')
                    .to_owned(),
                serde_json::to_string(&text(key))
                    .unwrap()
                    .trim_matches('"')
                    .replace('/', r"\/"),
            ]);
        }
        for form in forms {
            let body = format!("<{form}>");
            let out = masked(&secrets, &body);
            assert_eq!(out, format!("<{}>", "*".repeat(form.len())), "{body}");
        }
        // Base64 whose `/` JSON escaped and whose `+` a URL escaped.
        let key = KEYS[1];
        for (k, encoded) in [
            (0, STANDARD.encode(key)),
            (2, STANDARD.encode([b"ab", key].concat())),
        ] {
            let escaped = encoded.replace('/', r"\/").replace('+', "%2B");
            assert_ne!(escaped, encoded);
            let out = masked(&secrets, &escaped);
            let clear = out.replace(r"\/", "/").replace("%2B", "+");
            for trace in traces(key) {
                assert!(!clear.contains(&trace), "{k}: {trace} in {out}");
            }
            assert!(out.contains("*******************"), "{k}: {out}");
        }
    }

    #[test]
    fn unrelated_text_and_base64_are_left_alone() {
        let secrets = secrets(&KEYS);
        for text in [
            "nothing to see, s3cr3t-api-key-012345678 (one short)".to_owned(),
            r#"{"path":"a\/b","q":"%41%42","u":"\u0041"}"#.to_owned(),
            STANDARD.encode(b"an ordinary value, 25 b.."),
            STANDARD.encode([0xffu8; 64]),
        ] {
            assert_eq!(secrets.masked(text.as_bytes()), None, "{text}");
        }
    }

    #[test]
    fn response_header_names_and_values_are_masked_and_stay_valid() {
        let key = KEYS[0];
        let text = std::str::from_utf8(key).unwrap();
        let secrets = secrets(&[key]);
        let mut headers = HeaderMap::new();
        let named = |name: String, value: &str| {
            (
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            )
        };
        for (name, value) in [
            named(text.to_owned(), "1"),
            named(format!("x-{text}-echo"), "2"),
            named(format!("x-{}", URL_SAFE_NO_PAD.encode(key)), "3"),
            named(
                format!("x-{}", URL_SAFE_NO_PAD.encode([b"u:", key].concat())),
                "4",
            ),
            named("x-echo".to_owned(), text),
            named(
                "x-echo".to_owned(),
                &format!("Basic {}", STANDARD.encode(format!("user:{text}"))),
            ),
            named("x-plain".to_owned(), "fine"),
        ] {
            headers.append(name, value);
        }
        let mut response = super::super::OutboundResponse {
            status: http::StatusCode::OK,
            headers,
            body: Bytes::from_static(b"{}"),
        };
        super::super::mask_response(&secrets, &mut response).unwrap();
        assert_eq!(response.headers.len(), 7, "{:?}", response.headers);
        assert_eq!(response.headers["x-plain"], "fine");
        assert!(
            response
                .headers
                .contains_key(format!("x-{}-echo", "*".repeat(key.len())))
        );
        for (name, value) in &response.headers {
            for trace in traces(key) {
                let trace = trace.to_ascii_lowercase();
                assert!(!name.as_str().contains(&trace), "{name}: {trace}");
                let value = String::from_utf8_lossy(value.as_bytes()).to_ascii_lowercase();
                assert!(!value.contains(&trace), "{name}: {value}: {trace}");
            }
        }
    }
}
