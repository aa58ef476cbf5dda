//! `calculateNamesAndConditions` of upstream's `NamingConditionController`
//! (`k8s.io/apiextensions-apiserver@v0.37.2`, `pkg/controller/status/naming_controller.go`,
//! unchanged since v0.36.3):
//! which requested names a CRD may have, and its `NamesAccepted` and `Established` conditions.
//! Pure functions over parsed CRDs, so the upstream table tests run natively (below).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::crd::{Condition, Crd, Names};

pub const NAMES_ACCEPTED: &str = "NamesAccepted";
pub const ESTABLISHED: &str = "Established";

/// The names every CRD of a group has been granted (`getAcceptedNamesForGroup`): resource
/// names (plural, singular, short names) and kinds (kind, list kind). Like upstream's
/// `sets.String`, an unset name is the empty string and is in the set.
#[derive(Debug, Default)]
pub struct Taken {
    pub resources: BTreeSet<String>,
    pub kinds: BTreeSet<String>,
}

impl Taken {
    /// The accepted names of every CRD of `group` in `crds` (the CRD being judged included,
    /// as upstream's lister includes it).
    pub fn in_group<'a>(group: &str, crds: impl IntoIterator<Item = &'a Crd>) -> Self {
        let mut taken = Taken::default();
        for crd in crds.into_iter().filter(|c| c.group == group) {
            let names = &crd.accepted_names;
            taken.resources.insert(names.plural.clone());
            taken.resources.insert(names.singular.clone());
            taken
                .resources
                .extend(names.short_names.iter().flatten().cloned());
            taken.kinds.insert(names.kind.clone());
            taken.kinds.insert(names.list_kind.clone());
        }
        taken
    }
}

/// What one sync concludes for a CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub names: Names,
    pub names_accepted: Condition,
    pub established: Condition,
}

/// A conflict as upstream words it (`fmt.Errorf("%q is already in use", name)`).
fn in_use(name: &str) -> String {
    format!("{} is already in use", go_quote(name))
}

/// `equalToAcceptedOrFresh`: a requested name is fine when the CRD already holds it or
/// nobody in the group does.
fn equal_to_accepted_or_fresh(
    requested: &str,
    accepted: &str,
    used: &BTreeSet<String>,
) -> Result<(), String> {
    if requested == accepted || !used.contains(requested) {
        return Ok(());
    }
    Err(in_use(requested))
}

/// `calculateNamesAndConditions`. Each requested name is checked on its own; a name that
/// conflicts keeps the accepted one, and the condition records the *last* conflict found
/// (plural, singular, short names, kind, list kind: a later one overwrites an earlier one).
pub fn judge(crd: &Crd, taken: &Taken) -> Judgement {
    let requested = &crd.spec_names;
    let accepted = &crd.accepted_names;
    let mut names = accepted.clone();
    let mut conflict: Option<Condition> = None;
    let mut conflicted = |reason: &str, message: String| {
        conflict = Some(Condition::new(NAMES_ACCEPTED, "False", reason, message));
    };

    match equal_to_accepted_or_fresh(&requested.plural, &accepted.plural, &taken.resources) {
        Ok(()) => names.plural.clone_from(&requested.plural),
        Err(e) => conflicted("PluralConflict", e),
    }
    match equal_to_accepted_or_fresh(&requested.singular, &accepted.singular, &taken.resources) {
        Ok(()) => names.singular.clone_from(&requested.singular),
        Err(e) => conflicted("SingularConflict", e),
    }
    // `reflect.DeepEqual`: an empty list differs from an absent one here.
    if requested.short_names != accepted.short_names {
        let held: BTreeSet<&String> = accepted.short_names.iter().flatten().collect();
        let errors: Vec<String> = requested
            .short_names
            .iter()
            .flatten()
            .filter(|name| !held.contains(name))
            .filter_map(|name| equal_to_accepted_or_fresh(name, "", &taken.resources).err())
            .collect();
        if errors.is_empty() {
            names.short_names.clone_from(&requested.short_names);
        } else {
            conflicted("ShortNamesConflict", aggregate(&errors));
        }
    }
    let kind_checks = [
        ("KindConflict", &requested.kind, &accepted.kind),
        (
            "ListKindConflict",
            &requested.list_kind,
            &accepted.list_kind,
        ),
    ];
    // The deliberately wrong build for the shadow-mode test checks them in the other order.
    let order: [usize; 2] = if cfg!(feature = "altered") {
        [1, 0]
    } else {
        [0, 1]
    };
    for (reason, wanted, held) in order.map(|i| kind_checks[i]) {
        match equal_to_accepted_or_fresh(wanted, held, &taken.kinds) {
            Ok(()) if reason == "KindConflict" => names.kind.clone_from(wanted),
            Ok(()) => names.list_kind.clone_from(wanted),
            Err(e) => conflicted(reason, e),
        }
    }
    names.categories.clone_from(&requested.categories);

    let names_accepted = conflict.unwrap_or_else(|| {
        Condition::new(NAMES_ACCEPTED, "True", "NoConflicts", "no conflicts found")
    });

    // Established starts false and is set true by the establishing controller, never here;
    // once names are accepted a CRD that is not established yet is installing.
    let mut established = crd.condition(ESTABLISHED).unwrap_or_else(|| {
        Condition::new(
            ESTABLISHED,
            "False",
            "NotAccepted",
            "not all names are accepted",
        )
    });
    if established.status != "True" && names_accepted.status == "True" {
        established = Condition::new(
            ESTABLISHED,
            "False",
            "Installing",
            "the initial names have been accepted",
        );
    }
    Judgement {
        names,
        names_accepted,
        established,
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message as it is, several de-duplicated,
/// comma-separated and bracketed.
fn aggregate(messages: &[String]) -> String {
    let mut seen: Vec<&String> = Vec::new();
    for message in messages {
        if !seen.contains(&message) {
            seen.push(message);
        }
    }
    match seen.as_slice() {
        [one] => (*one).clone(),
        many => format!(
            "[{}]",
            many.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Go's `%q` (`strconv.Quote`) for the names a CRD can carry: printable characters as they
/// are, `"` and `\` escaped, control characters as Go escapes them.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Upstream's `TestSync` table (`naming_controller_test.go` at v0.37.2, as at v0.36.3), case
/// by case: the CRD under test, the other CRDs of the lister, and the expected names and
/// conditions.
#[cfg(test)]
mod tests {
    use super::*;

    fn crd(name: &str) -> Crd {
        let (plural, group) = name.split_once('.').unwrap();
        Crd {
            name: name.into(),
            group: group.into(),
            spec_names: Names {
                plural: plural.into(),
                ..Names::default()
            },
            ..Crd::default()
        }
    }

    fn names(plural: &str, singular: &str, kind: &str, list_kind: &str, short: &[&str]) -> Names {
        Names {
            plural: plural.into(),
            singular: singular.into(),
            kind: kind.into(),
            list_kind: list_kind.into(),
            // The builder's variadic `shortNames ...string`: nil when none are given.
            short_names: (!short.is_empty())
                .then(|| short.iter().map(|s| (*s).to_owned()).collect()),
            categories: None,
        }
    }

    fn spec(mut c: Crd, n: Names) -> Crd {
        c.spec_names = n;
        c
    }

    fn status(mut c: Crd, n: Names) -> Crd {
        c.accepted_names = n;
        c
    }

    fn condition(mut c: Crd, cond: &Condition) -> Crd {
        c.set_condition(cond, "2017-01-01T00:00:00Z");
        c
    }

    fn full() -> Names {
        names(
            "alfa",
            "delta-singular",
            "echo-kind",
            "foxtrot-listkind",
            &["golf-shortname-1", "hotel-shortname-2"],
        )
    }

    fn merged_status() -> Names {
        names(
            "zulu",
            "yankee-singular",
            "xray-kind",
            "whiskey-listkind",
            &["victor-shortname-1", "uniform-shortname-2"],
        )
    }

    fn accepted() -> Condition {
        Condition::new(NAMES_ACCEPTED, "True", "NoConflicts", "no conflicts found")
    }
    fn not_accepted() -> Condition {
        Condition::new(
            NAMES_ACCEPTED,
            "False",
            "NotAccepted",
            "not all names are accepted",
        )
    }
    fn installing() -> Condition {
        Condition::new(
            ESTABLISHED,
            "False",
            "Installing",
            "the initial names have been accepted",
        )
    }
    fn not_established() -> Condition {
        Condition::new(
            ESTABLISHED,
            "False",
            "NotAccepted",
            "not all names are accepted",
        )
    }
    fn conflict(reason: &str, message: &str) -> Condition {
        Condition::new(NAMES_ACCEPTED, "False", reason, message)
    }

    struct Case {
        name: &'static str,
        input: Crd,
        existing: Vec<Crd>,
        names: Names,
        names_accepted: Condition,
        established: Condition,
    }

    #[allow(clippy::too_many_lines)] // one entry per upstream case, as upstream's table
    fn cases() -> Vec<Case> {
        let plural_only = names("alfa", "", "", "", &[]);
        vec![
            Case {
                name: "first resource",
                input: crd("alfa.bravo.com"),
                existing: vec![],
                names: plural_only.clone(),
                names_accepted: accepted(),
                established: installing(),
            },
            Case {
                name: "different groups",
                input: spec(crd("alfa.bravo.com"), full()),
                existing: vec![status(crd("alfa.charlie.com"), full())],
                names: full(),
                names_accepted: accepted(),
                established: installing(),
            },
            Case {
                name: "conflict plural to singular",
                input: spec(crd("alfa.bravo.com"), full()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names("india", "alfa", "", "", &[]),
                )],
                names: Names {
                    plural: String::new(),
                    ..full()
                },
                names_accepted: conflict("PluralConflict", r#""alfa" is already in use"#),
                established: not_established(),
            },
            Case {
                name: "conflict singular to shortName",
                input: spec(crd("alfa.bravo.com"), full()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names("india", "indias", "", "", &["delta-singular"]),
                )],
                names: Names {
                    singular: String::new(),
                    ..full()
                },
                names_accepted: conflict(
                    "SingularConflict",
                    r#""delta-singular" is already in use"#,
                ),
                established: not_established(),
            },
            Case {
                name: "conflict on shortName to shortName",
                input: spec(crd("alfa.bravo.com"), full()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names("india", "indias", "", "", &["hotel-shortname-2"]),
                )],
                names: names(
                    "alfa",
                    "delta-singular",
                    "echo-kind",
                    "foxtrot-listkind",
                    &[],
                ),
                names_accepted: conflict(
                    "ShortNamesConflict",
                    r#""hotel-shortname-2" is already in use"#,
                ),
                established: not_established(),
            },
            Case {
                name: "conflict on kind to listkind",
                input: spec(crd("alfa.bravo.com"), full()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names("india", "indias", "", "echo-kind", &[]),
                )],
                names: Names {
                    kind: String::new(),
                    ..full()
                },
                names_accepted: conflict("KindConflict", r#""echo-kind" is already in use"#),
                established: not_established(),
            },
            Case {
                name: "conflict on listkind to kind",
                input: spec(crd("alfa.bravo.com"), full()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names("india", "indias", "foxtrot-listkind", "", &[]),
                )],
                names: Names {
                    list_kind: String::new(),
                    ..full()
                },
                names_accepted: conflict(
                    "ListKindConflict",
                    r#""foxtrot-listkind" is already in use"#,
                ),
                established: not_established(),
            },
            Case {
                name: "no conflict on resource and kind",
                input: spec(crd("alfa.bravo.com"), full()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names("india", "echo-kind", "", "", &[]),
                )],
                names: full(),
                names_accepted: accepted(),
                established: installing(),
            },
            Case {
                name: "merge on conflicts",
                input: status(spec(crd("alfa.bravo.com"), full()), merged_status()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names(
                        "india",
                        "indias",
                        "foxtrot-listkind",
                        "",
                        &["delta-singular"],
                    ),
                )],
                names: names(
                    "alfa",
                    "yankee-singular",
                    "echo-kind",
                    "whiskey-listkind",
                    &["golf-shortname-1", "hotel-shortname-2"],
                ),
                names_accepted: conflict(
                    "ListKindConflict",
                    r#""foxtrot-listkind" is already in use"#,
                ),
                established: not_established(),
            },
            Case {
                name: "merge on conflicts shortNames as one",
                input: status(spec(crd("alfa.bravo.com"), full()), merged_status()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names(
                        "india",
                        "indias",
                        "foxtrot-listkind",
                        "",
                        &["delta-singular", "golf-shortname-1"],
                    ),
                )],
                names: names(
                    "alfa",
                    "yankee-singular",
                    "echo-kind",
                    "whiskey-listkind",
                    &["victor-shortname-1", "uniform-shortname-2"],
                ),
                names_accepted: conflict(
                    "ListKindConflict",
                    r#""foxtrot-listkind" is already in use"#,
                ),
                established: not_established(),
            },
            Case {
                name: "no conflicts on self",
                input: status(spec(crd("alfa.bravo.com"), full()), full()),
                existing: vec![status(spec(crd("alfa.bravo.com"), full()), full())],
                names: full(),
                names_accepted: accepted(),
                established: installing(),
            },
            Case {
                name: "no conflicts on self, remove shortname",
                input: status(
                    spec(
                        crd("alfa.bravo.com"),
                        names(
                            "alfa",
                            "delta-singular",
                            "echo-kind",
                            "foxtrot-listkind",
                            &["golf-shortname-1"],
                        ),
                    ),
                    full(),
                ),
                existing: vec![status(spec(crd("alfa.bravo.com"), full()), full())],
                names: names(
                    "alfa",
                    "delta-singular",
                    "echo-kind",
                    "foxtrot-listkind",
                    &["golf-shortname-1"],
                ),
                names_accepted: accepted(),
                established: installing(),
            },
            Case {
                name: "installing before with true condition",
                input: condition(crd("alfa.bravo.com"), &accepted()),
                existing: vec![],
                names: plural_only.clone(),
                names_accepted: accepted(),
                established: installing(),
            },
            Case {
                name: "not installing before with false condition",
                input: condition(crd("alfa.bravo.com"), &not_accepted()),
                existing: vec![],
                names: plural_only,
                names_accepted: accepted(),
                established: installing(),
            },
            Case {
                name: "conflicting, installing before with true condition",
                input: condition(spec(crd("alfa.bravo.com"), full()), &accepted()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names("india", "alfa", "", "", &[]),
                )],
                names: Names {
                    plural: String::new(),
                    ..full()
                },
                names_accepted: conflict("PluralConflict", r#""alfa" is already in use"#),
                established: not_established(),
            },
            Case {
                name: "conflicting, not installing before with false condition",
                input: condition(spec(crd("alfa.bravo.com"), full()), &not_accepted()),
                existing: vec![status(
                    crd("india.bravo.com"),
                    names("india", "alfa", "", "", &[]),
                )],
                names: Names {
                    plural: String::new(),
                    ..full()
                },
                names_accepted: conflict("PluralConflict", r#""alfa" is already in use"#),
                established: not_established(),
            },
        ]
    }

    /// Passes in the altered build too: no upstream case has a kind and a list-kind conflict
    /// at once, which is why `a_kind_and_a_list_kind_conflict_report_the_later_check` exists.
    #[test]
    fn upstream_test_sync() {
        let cases = cases();
        assert_eq!(cases.len(), 16, "every case of upstream's TestSync");
        for case in cases {
            // Upstream's indexer holds only `existing`; the CRD under test is not in it.
            let taken = Taken::in_group(&case.input.group, &case.existing);
            let got = judge(&case.input, &taken);
            assert_eq!(got.names, case.names, "{}: names", case.name);
            assert!(
                case.names_accepted.equivalent(Some(&got.names_accepted)),
                "{}: NamesAccepted {:?}",
                case.name,
                got.names_accepted
            );
            assert!(
                case.established.equivalent(Some(&got.established)),
                "{}: Established {:?}",
                case.name,
                got.established
            );
        }
    }

    #[test]
    fn several_short_name_conflicts_read_as_upstream_aggregates_them() {
        let input = spec(
            crd("alfa.bravo.com"),
            names("alfa", "", "Alfa", "", &["x", "y", "x"]),
        );
        let other = status(
            crd("india.bravo.com"),
            names("india", "", "", "", &["x", "y"]),
        );
        let got = judge(&input, &Taken::in_group("bravo.com", [&other]));
        assert_eq!(
            got.names_accepted.message,
            r#"["x" is already in use, "y" is already in use]"#
        );
        let only_x = spec(
            crd("alfa.bravo.com"),
            names("alfa", "", "Alfa", "", &["x", "x"]),
        );
        let got = judge(&only_x, &Taken::in_group("bravo.com", [&other]));
        assert_eq!(got.names_accepted.message, r#""x" is already in use"#);
    }

    #[test]
    fn a_kind_and_a_list_kind_conflict_report_the_later_check() {
        let input = spec(
            crd("alfa.bravo.com"),
            names("alfa", "", "Shared", "SharedList", &[]),
        );
        let other = status(
            crd("india.bravo.com"),
            names("india", "", "SharedList", "Shared", &[]),
        );
        let got = judge(&input, &Taken::in_group("bravo.com", [&other]));
        let expected = if cfg!(feature = "altered") {
            "KindConflict"
        } else {
            "ListKindConflict"
        };
        assert_eq!(got.names_accepted.reason, expected);
    }

    #[test]
    fn go_quote_escapes_as_strconv_quote() {
        assert_eq!(go_quote("alfa"), r#""alfa""#);
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("a\nb\u{1}"), r#""a\nb\x01""#);
        assert_eq!(go_quote("é"), "\"é\"");
    }
}
