//! Label selectors in the Kubernetes string syntax (`a=b,c!=d,e in (x,y),f notin (z),g,!h`).
//!
//! Written here because kube-core 5 has `Selector`/`Expression` and their matching but no parser.
//! The grammar, the accepted spellings (`=`, `==`, `!=`, `in`, `notin`, `!key`, `key`) and the
//! key/value validation follow apimachinery's `labels.Parse`, so a selector that works with
//! kubectl works here. `>`/`<` are rejected: kube-core has no expression for them.

use std::collections::BTreeSet;

use kube::core::{Expression, Selector};

/// Why a label selector string was rejected. `position` is a byte offset into `selector`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?} at byte {position}: {reason}")]
pub struct SelectorError {
    pub(crate) selector: String,
    pub(crate) position: usize,
    pub(crate) reason: String,
}

/// Parses a label selector. The empty (or all-blank) string selects everything.
///
/// The expressions are sorted, so two spellings of the same selector (`a=1,b=2` and
/// `b=2, a=1`) give equal `Selector`s and the same `to_string()`.
///
/// # Errors
///
/// A [`SelectorError`] naming the byte offset and what was expected there.
pub fn parse_selector(input: &str) -> Result<Selector, SelectorError> {
    let mut parser = Parser {
        input,
        tokens: lex(input),
        next: 0,
    };
    let mut expressions = Vec::new();
    if parser.peek().kind == Tok::End {
        return Ok(Selector::default());
    }
    loop {
        expressions.push(parser.requirement()?);
        let token = parser.take();
        match token.kind {
            Tok::End => break,
            Tok::Comma => {}
            _ => {
                return Err(parser.error(
                    token.at,
                    format!(
                        "expected ',' or the end of the selector, found {}",
                        token.describe()
                    ),
                ));
            }
        }
    }
    expressions.sort();
    expressions.dedup();
    Ok(expressions.into_iter().collect())
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
                ('!', Some('=')) => Some(Tok::NotEquals),
                ('=', Some('=')) => Some(Tok::DoubleEquals),
                _ => None,
            };
            let kind = match kind {
                Some(kind) => {
                    chars.next();
                    kind
                }
                None => match c {
                    '!' => Tok::Bang,
                    '=' => Tok::Equals,
                    '>' => Tok::Greater,
                    '<' => Tok::Less,
                    '(' => Tok::Open,
                    ')' => Tok::Close,
                    _ => Tok::Comma,
                },
            };
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
        if self.next < self.tokens.len() {
            self.next += 1;
        }
        token
    }

    fn error(&self, position: usize, reason: String) -> SelectorError {
        SelectorError {
            selector: self.input.to_string(),
            position,
            reason,
        }
    }

    fn requirement(&mut self) -> Result<Expression, SelectorError> {
        let mut token = self.take();
        let negated = token.kind == Tok::Bang;
        if negated {
            token = self.take();
        }
        let Tok::Ident(key) = token.kind else {
            return Err(self.error(
                token.at,
                format!("expected a label key, found {}", token.describe()),
            ));
        };
        validate_key(key).map_err(|invalid| self.error(token.at, invalid.to_string()))?;
        if negated {
            return Ok(Expression::DoesNotExist(key.to_string()));
        }
        let operator = self.peek();
        match operator.kind {
            Tok::Comma | Tok::End => Ok(Expression::Exists(key.to_string())),
            Tok::Equals | Tok::DoubleEquals | Tok::NotEquals => {
                self.take();
                let value = self.exact_value()?;
                Ok(if operator.kind == Tok::NotEquals {
                    Expression::NotEqual(key.to_string(), value)
                } else {
                    Expression::Equal(key.to_string(), value)
                })
            }
            Tok::Ident(word @ ("in" | "notin")) => {
                self.take();
                let values = self.value_set()?;
                Ok(if word == "in" {
                    Expression::In(key.to_string(), values)
                } else {
                    Expression::NotIn(key.to_string(), values)
                })
            }
            Tok::Greater | Tok::Less => Err(self.error(
                operator.at,
                format!(
                    "operator {} is not supported here (use =, ==, !=, in, notin, key or !key)",
                    operator.describe()
                ),
            )),
            _ => Err(self.error(
                operator.at,
                format!(
                    "expected an operator (=, ==, !=, in, notin), ',' or the end after key {key:?}, found {}",
                    operator.describe()
                ),
            )),
        }
    }

    /// The value after `=`, `==` or `!=`; empty when the requirement ends right there (`a=`).
    fn exact_value(&mut self) -> Result<String, SelectorError> {
        let token = self.peek();
        match token.kind {
            Tok::Comma | Tok::End => Ok(String::new()),
            Tok::Ident(value) => {
                self.take();
                validate_value(value)
                    .map_err(|invalid| self.error(token.at, invalid.to_string()))?;
                Ok(value.to_string())
            }
            _ => Err(self.error(
                token.at,
                format!("expected a label value, found {}", token.describe()),
            )),
        }
    }

    /// `( v1, v2, ... )`. As in apimachinery, an empty slot (`()`, `(a,)`) is the empty value.
    fn value_set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let open = self.take();
        if open.kind != Tok::Open {
            return Err(self.error(
                open.at,
                format!("expected '(' after in/notin, found {}", open.describe()),
            ));
        }
        let mut values = BTreeSet::new();
        let mut expect_value = true;
        loop {
            let token = self.take();
            match token.kind {
                Tok::Ident(value) if expect_value => {
                    validate_value(value)
                        .map_err(|invalid| self.error(token.at, invalid.to_string()))?;
                    values.insert(value.to_string());
                    expect_value = false;
                }
                Tok::Comma => {
                    if expect_value {
                        values.insert(String::new());
                    }
                    expect_value = true;
                }
                Tok::Close => {
                    if expect_value {
                        values.insert(String::new());
                    }
                    return Ok(values);
                }
                Tok::End => {
                    return Err(
                        self.error(token.at, "unclosed value list: expected ')'".to_string())
                    );
                }
                _ => {
                    return Err(self.error(
                        token.at,
                        format!(
                            "expected a label value, ',' or ')' in the value list, found {}",
                            token.describe()
                        ),
                    ));
                }
            }
        }
    }
}

/// Why a label key or value is not one apimachinery accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidLabel {
    #[error(
        "label key {key:?} has an invalid prefix {prefix:?}: it must be a lowercase DNS subdomain (e.g. example.com) of at most 253 characters"
    )]
    Prefix { key: String, prefix: String },
    #[error("label key {key:?} has an empty name")]
    EmptyName { key: String },
    #[error(
        "label key {key:?} is invalid: the name must be at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit"
    )]
    Name { key: String },
    #[error(
        "label value {value:?} is invalid: it must be at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit"
    )]
    Value { value: String },
}

/// A label key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters.
fn validate_key(key: &str) -> Result<(), InvalidLabel> {
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
            return Err(InvalidLabel::Prefix {
                key: key.to_owned(),
                prefix: prefix.to_owned(),
            });
        }
    }
    if name.is_empty() {
        return Err(InvalidLabel::EmptyName {
            key: key.to_owned(),
        });
    }
    if !is_label_name(name) {
        return Err(InvalidLabel::Name {
            key: key.to_owned(),
        });
    }
    Ok(())
}

fn validate_value(value: &str) -> Result<(), InvalidLabel> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(InvalidLabel::Value {
            value: value.to_owned(),
        })
    }
}

fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: u8| b.is_ascii_alphanumeric();
    !bytes.is_empty()
        && bytes.len() <= 63
        && edge(bytes[0])
        && edge(bytes[bytes.len() - 1])
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::core::SelectorExt;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    fn set(values: &[&str]) -> BTreeSet<String> {
        values.iter().map(|v| (*v).to_string()).collect()
    }

    fn one(input: &str) -> Expression {
        let selector = parse_selector(input).unwrap();
        let mut exprs: Vec<Expression> = selector.into_iter().collect();
        assert_eq!(exprs.len(), 1, "{input}");
        exprs.remove(0)
    }

    #[test]
    fn every_operator() {
        assert_eq!(one("a=b"), Expression::Equal("a".into(), "b".into()));
        assert_eq!(one("a==b"), Expression::Equal("a".into(), "b".into()));
        assert_eq!(one("a!=b"), Expression::NotEqual("a".into(), "b".into()));
        assert_eq!(
            one("a in (x,y)"),
            Expression::In("a".into(), set(&["x", "y"]))
        );
        assert_eq!(
            one("a notin (z)"),
            Expression::NotIn("a".into(), set(&["z"]))
        );
        assert_eq!(one("a"), Expression::Exists("a".into()));
        assert_eq!(one("!a"), Expression::DoesNotExist("a".into()));
    }

    #[test]
    fn full_example_and_matching() {
        let s = parse_selector("a=b,c!=d,e in (x,y),f notin (z),g,!h").unwrap();
        let good = labels(&[("a", "b"), ("c", "x"), ("e", "y"), ("f", "q"), ("g", "")]);
        assert!(s.matches(&good));
        for bad in [
            labels(&[("a", "x"), ("e", "y"), ("g", "")]), // a=b fails
            labels(&[("a", "b"), ("c", "d"), ("e", "y"), ("g", "")]), // c!=d fails
            labels(&[("a", "b"), ("e", "q"), ("g", "")]), // e in fails
            labels(&[("a", "b"), ("e", "x"), ("f", "z"), ("g", "")]), // f notin fails
            labels(&[("a", "b"), ("e", "x")]),            // g missing
            labels(&[("a", "b"), ("e", "x"), ("g", ""), ("h", "1")]), // h present
        ] {
            assert!(!s.matches(&bad), "{bad:?}");
        }
    }

    #[test]
    fn whitespace_prefixes_and_canonical_form() {
        let a = parse_selector("  example.com/app = web ,tier!=db, env in ( a , b ) , !legacy")
            .unwrap();
        let b = parse_selector("!legacy,env in (b,a),tier!=db,example.com/app==web").unwrap();
        assert_eq!(a, b);
        assert_eq!(
            a.to_string(),
            "env in (a,b),example.com/app=web,tier!=db,!legacy"
        );
    }

    #[test]
    fn empty_selects_everything() {
        assert!(parse_selector("").unwrap().selects_all());
        assert!(parse_selector("  \t").unwrap().selects_all());
    }

    #[test]
    fn empty_values_follow_apimachinery() {
        assert_eq!(one("a="), Expression::Equal("a".into(), String::new()));
        assert_eq!(one("a in ()"), Expression::In("a".into(), set(&[""])));
        assert_eq!(
            one("a in (x,)"),
            Expression::In("a".into(), set(&["x", ""]))
        );
        // Keywords are ordinary values and keys where a value or key is expected.
        assert_eq!(
            one("in=notin"),
            Expression::Equal("in".into(), "notin".into())
        );
    }

    fn err(input: &str) -> SelectorError {
        parse_selector(input).expect_err(input)
    }

    #[test]
    fn errors_say_what_and_where() {
        let e = err("a=b,");
        assert_eq!(e.position, 4);
        assert!(
            e.reason.contains("expected a label key, found the end"),
            "{e}"
        );

        let e = err("a in x");
        assert!(e.reason.contains("expected '(' after in/notin"), "{e}");

        let e = err("a in (x,y");
        assert!(e.reason.contains("unclosed value list"), "{e}");

        let e = err("a>1");
        assert_eq!(e.position, 1);
        assert!(e.reason.contains("operator '>' is not supported"), "{e}");
        assert!(err("a<1").reason.contains("'<'"));

        let e = err("a b");
        assert!(e.reason.contains("expected an operator"), "{e}");
        assert!(e.reason.contains("\"b\""), "{e}");

        let e = err("!a=b");
        assert_eq!(e.position, 2);
        assert!(e.reason.contains("expected ',' or the end"), "{e}");

        let e = err(",a");
        assert_eq!(e.position, 0);

        let e = err("a=(b)");
        assert!(
            e.reason.contains("expected a label value, found '('"),
            "{e}"
        );

        let e = err("a in (x y)");
        assert!(e.reason.contains("in the value list"), "{e}");

        assert!(err("a=b c").reason.contains("expected ',' or the end"));
        assert!(err("a=b=c").reason.contains("expected ',' or the end"));
        assert_eq!(
            err("a=b,").to_string(),
            "invalid label selector \"a=b,\" at byte 4: expected a label key, found the end of the selector"
        );
    }

    #[test]
    fn keys_and_values_are_validated() {
        assert!(err("-a=b").reason.contains("label key \"-a\" is invalid"));
        assert!(err("Example.com/a=b").reason.contains("invalid prefix"));
        assert!(err("/a").reason.contains("invalid prefix"));
        assert!(err("example.com/=b").reason.contains("empty name"));
        assert!(
            err(&format!("{}=b", "k".repeat(64)))
                .reason
                .contains("at most 63")
        );
        assert!(err("a=b_").reason.contains("label value \"b_\" is invalid"));
        assert!(
            err("a in (ok,-bad)")
                .reason
                .contains("label value \"-bad\"")
        );
        assert!(parse_selector(&format!("a={}", "v".repeat(63))).is_ok());
        assert!(parse_selector("x_y.z-1=A.b_c-9").is_ok());
    }
}
