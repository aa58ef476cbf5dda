//! What a guest asks of the host: the WIT `controller-manifest`, in host types, validated.
//!
//! A manifest is the first thing a guest hands the host, before any grant is known, and its
//! fields end up in informer URLs, metric labels and `/guests`: every field is checked here,
//! at load, and a guest with a bad manifest is refused with the field and the rule.

use std::time::Duration;

use serde::Serialize;

use crate::cluster::objects::Gvk;
use crate::cluster::validation::{self, Invalid};
use crate::sandbox::wit::guest;
use crate::sandbox::wit::indexing::indexes;
use crate::sandbox::wit::watching::watches;

/// Secondary watches one guest may ask for (the manifest's, `watches()`'s and `indexes()`'s
/// together).
pub(crate) const MAX_SECONDARY_WATCHES: usize = 16;

/// How secondary objects map to primary keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Mapping {
    /// `metadata.ownerReferences` entries of the primary kind.
    Owner,
    /// This label's value is the primary's name, in the object's namespace.
    Label(String),
    /// These labels' values are the primary's namespace (none: a cluster-scoped primary) and
    /// name.
    OwnerLabels {
        namespace: Option<String>,
        name: String,
    },
    /// The primaries whose field at `path` equals the object's `value`, from an index the
    /// host keeps over the primary cache.
    Field { path: FieldPath, value: IndexValue },
    /// The guest's `map` export, called per event.
    Function,
    /// The primaries among whose values, computed by the guest's `index` export for index
    /// `index`, is the object's `value`, from an index the host keeps over the primary cache.
    Computed { index: String, value: IndexValue },
}

/// What of a watched object a field index compares with the primary's field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum IndexValue {
    /// Its name; a namespaced object matches primaries in its own namespace only.
    Name,
    /// Its namespace.
    Namespace,
    /// `namespace/name` (the name alone when cluster-scoped).
    NamespacedName,
}

/// A path into an object: fields, and `[*]` for every item of a list (`spec.refs[*].name`).
///
/// The grammar (`docs/guests/contract.md`, "Field paths"):
///
/// ```text
/// path  = first *( "." name / quoted / "[*]" )
/// first = name / quoted
/// name  = 1*63( ALPHA / DIGIT / "-" / "_" )
/// quoted = "[" JSON-string "]"      ; any key: ["app.kubernetes.io/name"], ["a\"b"]
/// ```
///
/// A quoted step names a key as written, whatever it holds (dots, slashes, any character, up to
/// 316 bytes: the longest label or annotation key), so annotations and labels can be indexed:
/// `metadata.annotations["reloader.example/configmaps"]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct FieldPath {
    text: String,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Each,
}

/// Longest field path accepted: a path is configuration, not data.
const MAX_FIELD_PATH: usize = 512;
/// Longest key a quoted step names: a qualified name's prefix (253) and name (63), and the slash.
const MAX_QUOTED_KEY: usize = 317;

impl FieldPath {
    /// Parses a path (see the type's grammar).
    pub fn parse(field: &str, text: &str) -> Result<Self, Invalid> {
        let invalid = |reason: String| Invalid::new(field, reason);
        if text.is_empty() || text.len() > MAX_FIELD_PATH {
            return Err(invalid(format!(
                "a field path is 1 to {MAX_FIELD_PATH} characters, e.g. `spec.source`, `spec.targetNamespaces[*]` or `metadata.labels[\"app.kubernetes.io/name\"]`"
            )));
        }
        let wrong = |at: usize, what: &str| {
            invalid(format!(
                "{} is not a field path: {what} at byte {at}; steps are names (letters, digits, `-`, `_`) after a `.`, `[*]` for every item of a list, and `[\"any key\"]` (a JSON string) for a key with other characters",
                validation::shown(text)
            ))
        };
        let mut steps = Vec::new();
        let mut rest = text;
        let mut first = true;
        while !rest.is_empty() {
            let at = text.len() - rest.len();
            if let Some(after) = rest.strip_prefix("[*]") {
                if first {
                    return Err(wrong(at, "`[*]` before any field"));
                }
                steps.push(Step::Each);
                rest = after;
            } else if rest.starts_with("[\"") {
                let (key, after) = quoted(&rest[1..]).ok_or_else(|| {
                    wrong(
                        at,
                        "a quoted key that is not one JSON string followed by `]`",
                    )
                })?;
                if key.is_empty() || key.len() > MAX_QUOTED_KEY {
                    return Err(wrong(
                        at,
                        &format!("a quoted key must be 1 to {MAX_QUOTED_KEY} bytes"),
                    ));
                }
                steps.push(Step::Field(key));
                rest = after;
            } else {
                let name_at = if first {
                    rest
                } else {
                    rest.strip_prefix('.').ok_or_else(|| {
                        wrong(at, "a step that is not `.name`, `[*]` or `[\"key\"]`")
                    })?
                };
                let end = name_at
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                    .unwrap_or(name_at.len());
                let name = &name_at[..end];
                if name.is_empty() || name.len() > 63 {
                    return Err(wrong(
                        at,
                        "a field name of 1 to 63 letters, digits, `-` or `_` expected",
                    ));
                }
                steps.push(Step::Field(name.to_owned()));
                rest = &name_at[end..];
            }
            first = false;
        }
        Ok(Self {
            text: text.to_owned(),
            steps,
        })
    }

    /// Whether the path's first step is `metadata` (written `metadata` or `["metadata"]`).
    pub(crate) fn starts_at_metadata(&self) -> bool {
        matches!(self.steps.first(), Some(Step::Field(name)) if name == "metadata")
    }

    /// Every string the path reaches in `object` (none when a step is missing; values that
    /// are not strings are skipped).
    pub fn values<'a>(&self, object: &'a serde_json::Value) -> Vec<&'a str> {
        let mut here = vec![object];
        for step in &self.steps {
            here = match step {
                Step::Field(name) => here.into_iter().filter_map(|v| v.get(name)).collect(),
                Step::Each => here
                    .into_iter()
                    .filter_map(serde_json::Value::as_array)
                    .flatten()
                    .collect(),
            };
        }
        here.into_iter()
            .filter_map(serde_json::Value::as_str)
            .collect()
    }
}

/// The JSON string `text` starts with, decoded, and what follows its closing `]`; none when it
/// is not one (or no `]` follows it).
fn quoted(text: &str) -> Option<(String, &str)> {
    // serde_json reads one string and stops; the stream's offset says where it ended.
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<String>();
    let key = stream.next()?.ok()?;
    let rest = text.get(stream.byte_offset()..)?;
    Some((key, rest.strip_prefix(']')?))
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<FieldPath> for String {
    fn from(p: FieldPath) -> Self {
        p.text
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecondaryWatch {
    pub kind: Gvk,
    pub mapping: Mapping,
    /// Watch only this namespace (none: as the primary watch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Take only events of objects matching this label selector (from the lister's cache of
    /// the kind, which the grant's `readSelectors` bound).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

/// What a guest asks of the host (the WIT `manifest`, in host types).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub name: String,
    pub primary: Gvk,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub secondary: Vec<SecondaryWatch>,
    pub finalizer: Option<String>,
    pub concurrency: u32,
    #[serde(with = "humantime_serde")]
    pub resync: Option<Duration>,
    /// Primary updates that keep `metadata.generation` do not enqueue (see the WIT).
    pub generation_changed_only: bool,
}

impl Manifest {
    /// Whether `other` watches what this one does (primary, namespace, selector, secondary
    /// watches, finalizer, resync, generation filter): two versions one controller can run.
    pub(crate) fn watches_like(&self, other: &Self) -> bool {
        self.primary == other.primary
            && self.namespace == other.namespace
            && self.label_selector == other.label_selector
            && self.secondary == other.secondary
            && self.finalizer == other.finalizer
            && self.resync == other.resync
            && self.generation_changed_only == other.generation_changed_only
    }

    /// Converts and validates what the guest's `manifest()` returned, and what its
    /// `watches()` and `indexes()` returned when it exports them (`secondary[N]` numbers the
    /// manifest's and the watches together, the manifest's first; `indexes[N]` the indexes).
    pub fn from_wit(
        m: guest::ControllerManifest,
        watches: Vec<watches::Watch>,
        indexes: Vec<indexes::ComputedIndex>,
    ) -> Result<Self, Invalid> {
        // The name is the grant key, the field manager and a metric label.
        validation::dns1123_label("name", &m.name).map_err(|e| {
            Invalid::new(
                e.field,
                format!("{} (it is the field manager and the grant key)", e.reason),
            )
        })?;
        let primary: Gvk = m.primary.into();
        validation::gvk("primary", &primary)?;
        validation::namespace("namespace", m.namespace.as_deref())?;
        if let Some(selector) = &m.label_selector {
            validation::selector_text("label-selector", selector)?;
            crate::cluster::informers::parse_selector(selector)
                .map_err(|e| Invalid::new("label-selector", e.to_string()))?;
        }
        if m.secondary.len() + watches.len() + indexes.len() > MAX_SECONDARY_WATCHES {
            return Err(Invalid::new(
                "secondary",
                format!(
                    "at most {MAX_SECONDARY_WATCHES} secondary watches, the manifest's, watches()'s and indexes()'s together"
                ),
            ));
        }
        let declared = m.secondary.into_iter().map(|s| watches::Watch {
            kind: s.kind,
            mapping: match s.mapping {
                guest::Mapping::Owner => watches::WatchMapping::Owner,
                guest::Mapping::Label(label) => watches::WatchMapping::Label(label),
            },
            namespace: None,
            label_selector: None,
        });
        let mut secondary = declared
            .chain(watches)
            .enumerate()
            .map(|(i, w)| secondary_watch(&format!("secondary[{i}]"), w))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, index) in indexes.into_iter().enumerate() {
            let watch = computed_index(&format!("indexes[{i}]"), index)?;
            if let Mapping::Computed { index, .. } = &watch.mapping
                && secondary.iter().any(|w| {
                    matches!(&w.mapping, Mapping::Computed { index: other, .. } if other == index)
                })
            {
                return Err(Invalid::new(
                    format!("indexes[{i}].name"),
                    format!("`{index}` names two indexes"),
                ));
            }
            secondary.push(watch);
        }
        if let Some(finalizer) = &m.finalizer {
            validation::finalizer("finalizer", finalizer)?;
        }
        Ok(Self {
            name: m.name,
            primary,
            namespace: m.namespace,
            label_selector: m.label_selector,
            secondary,
            finalizer: m.finalizer,
            concurrency: m.concurrency,
            resync: (m.resync_seconds > 0)
                .then(|| Duration::from_secs(u64::from(m.resync_seconds))),
            generation_changed_only: m.generation_changed_only,
        })
    }
}

/// One computed index as the secondary watch it is, checked; `at` names it in refusals.
fn computed_index(at: &str, c: indexes::ComputedIndex) -> Result<SecondaryWatch, Invalid> {
    // The name is a metric label and a log field.
    validation::dns1123_label(&format!("{at}.name"), &c.name)?;
    let mut watch = secondary_watch(
        at,
        watches::Watch {
            kind: c.kind,
            mapping: watches::WatchMapping::Function,
            namespace: c.namespace,
            label_selector: c.label_selector,
        },
    )?;
    watch.mapping = Mapping::Computed {
        index: c.name,
        value: match c.lookup {
            indexes::Lookup::Name => IndexValue::Name,
            indexes::Lookup::Namespace => IndexValue::Namespace,
            indexes::Lookup::NamespacedName => IndexValue::NamespacedName,
        },
    };
    Ok(watch)
}

/// One secondary watch, checked; `at` names it in refusals.
fn secondary_watch(at: &str, w: watches::Watch) -> Result<SecondaryWatch, Invalid> {
    let kind: Gvk = w.kind.into();
    validation::gvk(&format!("{at}.kind"), &kind)?;
    validation::namespace(&format!("{at}.namespace"), w.namespace.as_deref())?;
    if let Some(selector) = &w.label_selector {
        let field = format!("{at}.label-selector");
        validation::selector_text(&field, selector)?;
        crate::cluster::informers::parse_selector(selector)
            .map_err(|e| Invalid::new(field, e.to_string()))?;
    }
    let label = |name: &str, label: String| {
        validation::qualified_name(&format!("{at}.mapping.{name}"), &label).map(|()| label)
    };
    let mapping = match w.mapping {
        watches::WatchMapping::Owner => Mapping::Owner,
        watches::WatchMapping::Label(l) => Mapping::Label(label("label", l)?),
        watches::WatchMapping::OwnerLabels(l) => Mapping::OwnerLabels {
            namespace: l
                .namespace
                .map(|n| label("owner-labels.namespace", n))
                .transpose()?,
            name: label("owner-labels.name", l.name)?,
        },
        watches::WatchMapping::Field(f) => Mapping::Field {
            path: FieldPath::parse(&format!("{at}.mapping.field.field"), &f.field)?,
            value: match f.value {
                watches::IndexValue::Name => IndexValue::Name,
                watches::IndexValue::Namespace => IndexValue::Namespace,
                watches::IndexValue::NamespacedName => IndexValue::NamespacedName,
            },
        },
        watches::WatchMapping::Function => Mapping::Function,
    };
    Ok(SecondaryWatch {
        kind,
        mapping,
        namespace: w.namespace,
        label_selector: w.label_selector,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::wit::types;

    fn manifest() -> guest::ControllerManifest {
        guest::ControllerManifest {
            name: "widget".into(),
            primary: types::Gvk {
                group: "test.reconciler.dev".into(),
                version: "v1".into(),
                kind: "Widget".into(),
            },
            namespace: None,
            label_selector: None,
            secondary: Vec::new(),
            finalizer: Some("test.reconciler.dev/cleanup".into()),
            concurrency: 2,
            resync_seconds: 0,
            generation_changed_only: false,
        }
    }

    #[test]
    fn a_good_manifest_converts() {
        let m = Manifest::from_wit(manifest(), Vec::new(), Vec::new()).unwrap();
        assert_eq!(m.primary.to_string(), "test.reconciler.dev/v1/Widget");
    }

    #[test]
    fn every_field_is_checked_and_named() {
        type Change = Box<dyn Fn(&mut guest::ControllerManifest)>;
        let cases: Vec<(&str, Change)> = vec![
            ("name", Box::new(|m| m.name = "Bad Name".into())),
            (
                "primary.group",
                Box::new(|m| m.primary.group = "a/../b".into()),
            ),
            (
                "primary.kind",
                Box::new(|m| m.primary.kind = "widget".into()),
            ),
            (
                "namespace",
                Box::new(|m| m.namespace = Some("x/secrets".into())),
            ),
            (
                "label-selector",
                Box::new(|m| m.label_selector = Some("a in (".into())),
            ),
            (
                "finalizer",
                Box::new(|m| m.finalizer = Some("orphan".into())),
            ),
            (
                "finalizer",
                Box::new(|m| m.finalizer = Some("kubernetes.io/pvc-protection".into())),
            ),
            (
                "secondary",
                Box::new(|m| {
                    m.secondary = (0..=MAX_SECONDARY_WATCHES)
                        .map(|_| guest::SecondaryWatch {
                            kind: m.primary.clone(),
                            mapping: guest::Mapping::Owner,
                        })
                        .collect();
                }),
            ),
            (
                "secondary[0].mapping.label",
                Box::new(|m| {
                    m.secondary = vec![guest::SecondaryWatch {
                        kind: m.primary.clone(),
                        mapping: guest::Mapping::Label("bad label!".into()),
                    }];
                }),
            ),
        ];
        for (field, change) in cases {
            let mut m = manifest();
            change(&mut m);
            let err = Manifest::from_wit(m, Vec::new(), Vec::new()).unwrap_err();
            assert!(err.field.starts_with(field), "{field}: {err}");
        }
    }

    fn watch(mapping: watches::WatchMapping) -> watches::Watch {
        watches::Watch {
            kind: types::Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            mapping,
            namespace: None,
            label_selector: Some("app=web".into()),
        }
    }

    fn computed(name: &str) -> indexes::ComputedIndex {
        indexes::ComputedIndex {
            name: name.into(),
            kind: types::Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            lookup: indexes::Lookup::Name,
            namespace: None,
            label_selector: Some("app=web".into()),
        }
    }

    #[test]
    fn computed_indexes_follow_the_watches_and_count_among_them() {
        let m = Manifest::from_wit(
            manifest(),
            vec![watch(watches::WatchMapping::Owner)],
            vec![computed("configmaps"), computed("secrets")],
        )
        .unwrap();
        assert_eq!(m.secondary.len(), 3);
        assert_eq!(
            m.secondary[1].mapping,
            Mapping::Computed {
                index: "configmaps".into(),
                value: IndexValue::Name
            }
        );
        assert_eq!(m.secondary[1].kind.kind, "ConfigMap");
        assert_eq!(m.secondary[1].label_selector.as_deref(), Some("app=web"));
        let too_many = (0..MAX_SECONDARY_WATCHES)
            .map(|i| computed(&format!("i{i}")))
            .collect();
        let err = Manifest::from_wit(
            manifest(),
            vec![watch(watches::WatchMapping::Owner)],
            too_many,
        )
        .unwrap_err();
        assert_eq!(err.field, "secondary");
        let err = Manifest::from_wit(
            manifest(),
            Vec::new(),
            vec![computed("configmaps"), computed("configmaps")],
        )
        .unwrap_err();
        assert_eq!(err.field, "indexes[1].name");
        assert!(err.reason.contains("names two indexes"), "{err}");
        for (name, field) in [("Bad_Name", "indexes[0].name"), ("", "indexes[0].name")] {
            let err = Manifest::from_wit(manifest(), Vec::new(), vec![computed(name)]).unwrap_err();
            assert_eq!(err.field, field, "{name:?}: {err}");
        }
        let mut bad = computed("configmaps");
        bad.label_selector = Some("a in (".into());
        let err = Manifest::from_wit(manifest(), Vec::new(), vec![bad]).unwrap_err();
        assert_eq!(err.field, "indexes[0].label-selector");
    }

    #[test]
    fn watches_join_the_manifests_secondaries_after_them() {
        let mut m = manifest();
        m.secondary = vec![guest::SecondaryWatch {
            kind: m.primary.clone(),
            mapping: guest::Mapping::Owner,
        }];
        let field = watch(watches::WatchMapping::Field(watches::FieldIndex {
            field: "spec.targets[*]".into(),
            value: watches::IndexValue::Name,
        }));
        let labels = watch(watches::WatchMapping::OwnerLabels(watches::OwnerLabels {
            namespace: Some("example.com/owner-namespace".into()),
            name: "example.com/owner-name".into(),
        }));
        let m = Manifest::from_wit(
            m,
            vec![field, labels, watch(watches::WatchMapping::Function)],
            Vec::new(),
        )
        .unwrap();
        assert_eq!(m.secondary.len(), 4);
        assert_eq!(m.secondary[0].mapping, Mapping::Owner);
        assert!(
            matches!(&m.secondary[1].mapping, Mapping::Field { path, value: IndexValue::Name } if path.to_string() == "spec.targets[*]")
        );
        assert_eq!(
            m.secondary[2].mapping,
            Mapping::OwnerLabels {
                namespace: Some("example.com/owner-namespace".into()),
                name: "example.com/owner-name".into()
            }
        );
        assert_eq!(m.secondary[3].mapping, Mapping::Function);
        assert_eq!(m.secondary[3].label_selector.as_deref(), Some("app=web"));
    }

    #[test]
    fn every_field_of_a_watch_is_checked_and_named_after_the_manifests() {
        let index = |field: &str| {
            watch(watches::WatchMapping::Field(watches::FieldIndex {
                field: field.into(),
                value: watches::IndexValue::Name,
            }))
        };
        let cases: Vec<(&str, watches::Watch)> = vec![
            ("secondary[0].mapping.field.field", index("spec..source")),
            ("secondary[0].mapping.field.field", index("spec.source[0]")),
            ("secondary[0].mapping.field.field", index("")),
            (
                "secondary[0].mapping.owner-labels.name",
                watch(watches::WatchMapping::OwnerLabels(watches::OwnerLabels {
                    namespace: None,
                    name: "not a label".into(),
                })),
            ),
            ("secondary[0].label-selector", {
                let mut w = watch(watches::WatchMapping::Function);
                w.label_selector = Some("a in (".into());
                w
            }),
            ("secondary[0].namespace", {
                let mut w = watch(watches::WatchMapping::Function);
                w.namespace = Some("../x".into());
                w
            }),
            ("secondary[0].kind.kind", {
                let mut w = watch(watches::WatchMapping::Owner);
                w.kind.kind = "configmap".into();
                w
            }),
        ];
        for (field, w) in cases {
            let err = Manifest::from_wit(manifest(), vec![w], Vec::new()).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
        let too_many = (0..=MAX_SECONDARY_WATCHES)
            .map(|_| watch(watches::WatchMapping::Owner))
            .collect();
        let err = Manifest::from_wit(manifest(), too_many, Vec::new()).unwrap_err();
        assert_eq!(err.field, "secondary");
    }

    #[test]
    fn a_field_path_reaches_every_item_of_its_lists() {
        let path = FieldPath::parse("f", "spec.refs[*].names[*]").unwrap();
        let object = serde_json::json!({"spec": {"refs": [
            {"names": ["a", "b"]}, {"names": "c"}, {"names": ["d", 4]}
        ]}});
        assert_eq!(path.values(&object), vec!["a", "b", "d"]);
        assert!(path.values(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn a_quoted_step_names_any_key() {
        let object = serde_json::json!({"metadata": {
            "annotations": {"reloader.example/configmaps": "a,b"},
            "labels": {"app.kubernetes.io/name": "web", "a\"b]": "odd"},
        }, "spec": {"items": [{"x.y": "1"}, {"x.y": "2"}]}});
        for (text, values) in [
            (
                r#"metadata.annotations["reloader.example/configmaps"]"#,
                vec!["a,b"],
            ),
            (r#"metadata.labels["app.kubernetes.io/name"]"#, vec!["web"]),
            (r#"metadata.labels["a\"b]"]"#, vec!["odd"]),
            (
                r#"["metadata"].labels["app.kubernetes.io/name"]"#,
                vec!["web"],
            ),
            (r#"spec.items[*]["x.y"]"#, vec!["1", "2"]),
            (r#"metadata.labels["missing"]"#, vec![]),
        ] {
            let path = FieldPath::parse("f", text).unwrap();
            assert_eq!(path.values(&object), values, "{text}");
            assert_eq!(path.to_string(), text);
        }
    }

    #[test]
    fn a_path_written_wrong_says_where() {
        for (text, says) in [
            ("", "1 to 512 characters"),
            ("spec..x", "byte 4"),
            ("spec.", "byte 4"),
            ("[*].x", "`[*]` before any field"),
            (r#"metadata.labels["unterminated]"#, "quoted key"),
            (r#"metadata.labels[""]"#, "1 to 317 bytes"),
            (r#"metadata.labels["a"]x"#, "byte 20"),
            ("metadata.labels.app.kubernetes.io/name", "byte 33"),
            ("spec.a b", "byte 6"),
        ] {
            let err = FieldPath::parse("f", text).unwrap_err();
            assert!(err.reason.contains(says), "{text}: {}", err.reason);
        }
        let long = format!("metadata.labels[\"{}\"]", "k".repeat(318));
        assert!(
            FieldPath::parse("f", &long)
                .unwrap_err()
                .reason
                .contains("317 bytes")
        );
    }
}
