//! Label selectors in the Kubernetes string syntax (`a=b,c!=d,e in (x,y),f notin (z),g,!h`),
//! parsed and matched as the host's lister does, so a selector the fake takes, the host takes.
//!
//! Written here because the host's parser (`host/src/cluster/selector.rs`, after apimachinery's
//! `labels.Parse`) lives in the host's crate and no crate offers one; this is a port of it,
//! with the same grammar, key and value rules and error texts.

use std::collections::{BTreeMap, BTreeSet};

/// One requirement of a selector; a selector matches when all of its requirements do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Requirement {
    Equal(String, String),
    NotEqual(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    /// As apimachinery: `!=` and `notin` match an object without the label.
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equal(key, value) => labels.get(key) == Some(value),
            Requirement::NotEqual(key, value) => labels.get(key) != Some(value),
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
        }
    }
}

/// Whether every requirement matches `labels`.
pub(crate) fn matches(selector: &[Requirement], labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|r| r.matches(labels))
}

/// Parses a selector; the empty (or all-blank) string selects everything.
///
/// # Errors
///
/// The host's text: `invalid label selector "a=b," at byte 4: expected a label key, found the
/// end of the selector`.
pub(crate) fn parse(input: &str) -> Result<Vec<Requirement>, String> {
    let mut parser = Parser {
        input,
        tokens: lex(input),
        next: 0,
    };
    let mut requirements = Vec::new();
    if parser.peek().kind == Tok::End {
        return Ok(requirements);
    }
    loop {
        requirements.push(parser.requirement()?);
        let token = parser.take();
        match token.kind {
            Tok::End => return Ok(requirements),
            Tok::Comma => {}
            _ => {
                return Err(parser.error(
                    token.at,
                    &format!(
                        "expected ',' or the end of the selector, found {}",
                        token.describe()
                    ),
                ));
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    Ident(&'a str),
    Bang,
    NotEquals,
    Equals,
    DoubleEquals,
    Greater,
    Less,
    Open,
    Close,
    Comma,
    End,
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    kind: Tok<'a>,
    at: usize,
}

impl Token<'_> {
    fn describe(&self) -> String {
        match self.kind {
            Tok::Ident(s) => format!("{s:?}"),
            Tok::Bang => "'!'".into(),
            Tok::NotEquals => "'!='".into(),
            Tok::Equals => "'='".into(),
            Tok::DoubleEquals => "'=='".into(),
            Tok::Greater => "'>'".into(),
            Tok::Less => "'<'".into(),
            Tok::Open => "'('".into(),
            Tok::Close => "')'".into(),
            Tok::Comma => "','".into(),
            Tok::End => "the end of the selector".into(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(input: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut chars = input.char_indices().peekable();
    while let Some(&(at, c)) = chars.peek() {
        if c.is_ascii_whitespace() {
            chars.next();
            continue;
        }
        if is_special(c) {
            chars.next();
            let second = chars.peek().map(|&(_, c)| c);
            let kind = match (c, second) {
                ('!', Some('=')) => Tok::NotEquals,
                ('=', Some('=')) => Tok::DoubleEquals,
                ('!', _) => Tok::Bang,
                ('=', _) => Tok::Equals,
                ('>', _) => Tok::Greater,
                ('<', _) => Tok::Less,
                ('(', _) => Tok::Open,
                (')', _) => Tok::Close,
                _ => Tok::Comma,
            };
            if matches!(kind, Tok::NotEquals | Tok::DoubleEquals) {
                chars.next();
            }
            tokens.push(Token { kind, at });
            continue;
        }
        let mut end = input.len();
        while let Some(&(i, c)) = chars.peek() {
            if c.is_ascii_whitespace() || is_special(c) {
                end = i;
                break;
            }
            chars.next();
        }
        tokens.push(Token {
            kind: Tok::Ident(&input[at..end]),
            at,
        });
    }
    tokens.push(Token {
        kind: Tok::End,
        at: input.len(),
    });
    tokens
}

struct Parser<'a> {
    input: &'a str,
    tokens: Vec<Token<'a>>,
    next: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Token<'a> {
        self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn take(&mut self) -> Token<'a> {
        let token = self.peek();
        self.next = (self.next + 1).min(self.tokens.len());
        token
    }

    fn error(&self, position: usize, reason: &str) -> String {
        format!(
            "invalid label selector {:?} at byte {position}: {reason}",
            self.input
        )
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let mut token = self.take();
        let negated = token.kind == Tok::Bang;
        if negated {
            token = self.take();
        }
        let Tok::Ident(key) = token.kind else {
            return Err(self.error(
                token.at,
                &format!("expected a label key, found {}", token.describe()),
            ));
        };
        validate_key(key).map_err(|reason| self.error(token.at, &reason))?;
        let key = key.to_owned();
        if negated {
            return Ok(Requirement::DoesNotExist(key));
        }
        let operator = self.peek();
        match operator.kind {
            Tok::Comma | Tok::End => Ok(Requirement::Exists(key)),
            Tok::Equals | Tok::DoubleEquals | Tok::NotEquals => {
                self.take();
                let value = self.exact_value()?;
                Ok(if operator.kind == Tok::NotEquals {
                    Requirement::NotEqual(key, value)
                } else {
                    Requirement::Equal(key, value)
                })
            }
            Tok::Ident(word @ ("in" | "notin")) => {
                self.take();
                let values = self.value_set()?;
                Ok(if word == "in" {
                    Requirement::In(key, values)
                } else {
                    Requirement::NotIn(key, values)
                })
            }
            Tok::Greater | Tok::Less => Err(self.error(
                operator.at,
                &format!(
                    "operator {} is not supported here (use =, ==, !=, in, notin, key or !key)",
                    operator.describe()
                ),
            )),
            _ => Err(self.error(
                operator.at,
                &format!(
                    "expected an operator (=, ==, !=, in, notin), ',' or the end after key {key:?}, found {}",
                    operator.describe()
                ),
            )),
        }
    }

    /// The value after `=`, `==` or `!=`; empty when the requirement ends right there (`a=`).
    fn exact_value(&mut self) -> Result<String, String> {
        let token = self.peek();
        match token.kind {
            Tok::Comma | Tok::End => Ok(String::new()),
            Tok::Ident(value) => {
                self.take();
                validate_value(value).map_err(|reason| self.error(token.at, &reason))?;
                Ok(value.to_owned())
            }
            _ => Err(self.error(
                token.at,
                &format!("expected a label value, found {}", token.describe()),
            )),
        }
    }

    /// `( v1, v2, ... )`. As in apimachinery, an empty slot (`()`, `(a,)`) is the empty value.
    fn value_set(&mut self) -> Result<BTreeSet<String>, String> {
        let open = self.take();
        if open.kind != Tok::Open {
            return Err(self.error(
                open.at,
                &format!("expected '(' after in/notin, found {}", open.describe()),
            ));
        }
        let mut values = BTreeSet::new();
        let mut expect_value = true;
        loop {
            let token = self.take();
            match token.kind {
                Tok::Ident(value) if expect_value => {
                    validate_value(value).map_err(|reason| self.error(token.at, &reason))?;
                    values.insert(value.to_owned());
                    expect_value = false;
                }
                Tok::Comma | Tok::Close => {
                    if expect_value {
                        values.insert(String::new());
                    }
                    if token.kind == Tok::Close {
                        return Ok(values);
                    }
                    expect_value = true;
                }
                Tok::End => {
                    return Err(self.error(token.at, "unclosed value list: expected ')'"));
                }
                _ => {
                    return Err(self.error(
                        token.at,
                        &format!(
                            "expected a label value, ',' or ')' in the value list, found {}",
                            token.describe()
                        ),
                    ));
                }
            }
        }
    }
}

/// A label key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters.
fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err(format!(
                "label key {key:?} has an invalid prefix {prefix:?}: it must be a lowercase DNS \
                 subdomain (e.g. example.com) of at most 253 characters"
            ));
        }
    }
    if name.is_empty() {
        return Err(format!("label key {key:?} has an empty name"));
    }
    if !is_label_name(name) {
        return Err(format!(
            "label key {key:?} is invalid: the name must be at most 63 characters of [A-Za-z0-9-_.], \
             starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "label value {value:?} is invalid: it must be at most 63 characters of [A-Za-z0-9-_.], \
             starting and ending with a letter or digit"
        ))
    }
}

fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: &u8| b.is_ascii_alphanumeric();
    bytes.len() <= 63
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn set(values: &[&str]) -> BTreeSet<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn every_operator_parses_as_the_host_parses_it() {
        let one = |input: &str| {
            let mut parsed = parse(input).unwrap();
            assert_eq!(parsed.len(), 1, "{input}");
            parsed.remove(0)
        };
        let s = String::from;
        assert_eq!(one("a=b"), Requirement::Equal(s("a"), s("b")));
        assert_eq!(one("a==b"), Requirement::Equal(s("a"), s("b")));
        assert_eq!(one("a!=b"), Requirement::NotEqual(s("a"), s("b")));
        assert_eq!(
            one("a in (x, y)"),
            Requirement::In(s("a"), set(&["x", "y"]))
        );
        assert_eq!(one("a notin (z)"), Requirement::NotIn(s("a"), set(&["z"])));
        assert_eq!(one("a"), Requirement::Exists(s("a")));
        assert_eq!(one("!a"), Requirement::DoesNotExist(s("a")));
        assert_eq!(one("a="), Requirement::Equal(s("a"), String::new()));
        assert_eq!(one("a in (x,)"), Requirement::In(s("a"), set(&["x", ""])));
        assert!(parse(" \t").unwrap().is_empty());
    }

    #[test]
    fn a_selector_matches_when_every_requirement_does() {
        let selector = parse("a=b,c!=d,e in (x,y),f notin (z),g,!h").unwrap();
        let good = labels(&[("a", "b"), ("c", "x"), ("e", "y"), ("f", "q"), ("g", "")]);
        assert!(matches(&selector, &good));
        for bad in [
            labels(&[("a", "x"), ("e", "y"), ("g", "")]),
            labels(&[("a", "b"), ("c", "d"), ("e", "y"), ("g", "")]),
            labels(&[("a", "b"), ("e", "q"), ("g", "")]),
            labels(&[("a", "b"), ("e", "x"), ("f", "z"), ("g", "")]),
            labels(&[("a", "b"), ("e", "x")]),
            labels(&[("a", "b"), ("e", "x"), ("g", ""), ("h", "1")]),
        ] {
            assert!(!matches(&selector, &bad), "{bad:?}");
        }
    }

    #[test]
    fn errors_read_like_the_hosts() {
        assert_eq!(
            parse("a=b,").unwrap_err(),
            "invalid label selector \"a=b,\" at byte 4: expected a label key, found the end of the selector"
        );
        let err = |input: &str| parse(input).expect_err(input);
        assert!(err("a in x").contains("expected '(' after in/notin"));
        assert!(err("a in (x,y").contains("unclosed value list"));
        assert!(err("a>1").contains("operator '>' is not supported"));
        assert!(err("a b").contains("expected an operator"));
        assert!(err("!a=b").contains("at byte 2: expected ',' or the end"));
        assert!(err("a=(b)").contains("expected a label value, found '('"));
        assert!(err("-a=b").contains("label key \"-a\" is invalid"));
        assert!(err("Example.com/a=b").contains("invalid prefix"));
        assert!(err("a=b_").contains("label value \"b_\" is invalid"));
    }
}
