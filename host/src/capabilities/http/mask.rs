//! Credentials the host added must not come back to the guest: a server that reflects request
//! headers (an echo endpoint, an error message quoting the key) would hand them over. Every
//! occurrence of an injected value, as sent and base64-encoded, is overwritten with `*` of the
//! same length in the response's headers and body, so lengths and framing stay intact. Requests
//! carrying credentials ask for an unencoded response (`Accept-Encoding: identity`) so the scan
//! sees the bytes the guest will see.

use base64::Engine as _;

/// Values shorter than this are not masked: they would garble ordinary text.
const SHORTEST: usize = 4;

/// The byte strings to hide from the guest.
#[derive(Debug, Default, Clone)]
pub(super) struct Secrets(Vec<Vec<u8>>);

impl Secrets {
    /// Hides `value` and its base64 forms.
    pub(super) fn add(&mut self, value: &[u8]) {
        if value.len() < SHORTEST {
            return;
        }
        let standard = base64::engine::general_purpose::STANDARD.encode(value);
        let url_safe = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value);
        self.0.push(value.to_vec());
        self.0
            .push(standard.trim_end_matches('=').as_bytes().to_vec());
        self.0.push(url_safe.into_bytes());
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Overwrites every occurrence of a secret in `bytes`; true when one was found.
    pub(super) fn mask(&self, bytes: &mut [u8]) -> bool {
        let mut found = false;
        for secret in &self.0 {
            let mut at = 0;
            while let Some(offset) = find(&bytes[at..], secret) {
                let start = at + offset;
                bytes[start..start + secret.len()].fill(b'*');
                at = start + secret.len();
                found = true;
            }
        }
        found
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    use bytes::Bytes;
    use http::{HeaderMap, HeaderName, HeaderValue};

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
        let mut bytes = text.as_bytes().to_vec();
        secrets.mask(&mut bytes);
        String::from_utf8(bytes).unwrap()
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
        let mut body = br#"{"echo":"X-API-Key: s3cr3t-key","b64":"czNjcjN0LWtleQ==","again":"s3cr3t-key","abc":1}"#.to_vec();
        let length = body.len();
        assert!(secrets.mask(&mut body));
        let text = String::from_utf8(body).unwrap();
        assert!(!text.contains("s3cr3t-key"), "{text}");
        assert!(!text.contains("czNjcjN0LWtleQ"), "{text}");
        assert!(
            text.contains(r#""abc":1"#),
            "a short value is not masked: {text}"
        );
        assert_eq!(text.len(), length);
        let mut clean = b"nothing to see".to_vec();
        assert!(!secrets.mask(&mut clean));
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
    fn a_key_in_hex_either_case_percent_encoded_or_json_escaped_is_masked() {
        let secrets = secrets(&KEYS);
        let hex = |key: &[u8]| key.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let percent_all = |key: &[u8]| key.iter().map(|b| format!("%{b:02X}")).collect::<String>();
        let percent = |key: &[u8]| {
            key.iter()
                .map(|&b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        };
        let unicode = |key: &[u8]| {
            key.iter()
                .map(|b| format!("\\u{b:04x}"))
                .collect::<String>()
        };
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
            let mut bytes = text.clone().into_bytes();
            assert!(!secrets.mask(&mut bytes), "{text}");
            assert_eq!(bytes, text.as_bytes());
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
        super::super::mask_response(&secrets, &mut response);
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
