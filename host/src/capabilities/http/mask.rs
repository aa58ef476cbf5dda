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
    use super::*;

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
}
