//! What a guest asks of the host: the WIT `controller-manifest`, in host types, validated.
//!
//! A manifest is the first thing a guest hands the host, before any grant is known, and its
//! fields end up in informer URLs, metric labels and `/guests`: every field is checked here,
//! at load, and a guest with a bad manifest is refused with the field and the rule.

use std::time::Duration;

use serde::Serialize;

use crate::objects::Gvk;
use crate::validation::{self, Invalid};
use crate::wit::guest;

/// Secondary watches one guest may ask for.
pub(crate) const MAX_SECONDARY_WATCHES: usize = 16;

/// How secondary objects map to primary keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Mapping {
    Owner,
    Label(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecondaryWatch {
    pub kind: Gvk,
    pub mapping: Mapping,
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
    /// Converts and validates what the guest's `manifest()` returned.
    pub fn from_wit(m: guest::ControllerManifest) -> Result<Self, Invalid> {
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
            crate::informers::parse_selector(selector)
                .map_err(|e| Invalid::new("label-selector", e.to_string()))?;
        }
        if m.secondary.len() > MAX_SECONDARY_WATCHES {
            return Err(Invalid::new(
                "secondary",
                format!("at most {MAX_SECONDARY_WATCHES} secondary watches"),
            ));
        }
        let mut secondary = Vec::with_capacity(m.secondary.len());
        for (i, s) in m.secondary.into_iter().enumerate() {
            let kind: Gvk = s.kind.into();
            validation::gvk(&format!("secondary[{i}].kind"), &kind)?;
            let mapping = match s.mapping {
                guest::Mapping::Owner => Mapping::Owner,
                guest::Mapping::Label(label) => {
                    validation::qualified_name(&format!("secondary[{i}].mapping.label"), &label)?;
                    Mapping::Label(label)
                }
            };
            secondary.push(SecondaryWatch { kind, mapping });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wit::types;

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
        let m = Manifest::from_wit(manifest()).unwrap();
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
            let err = Manifest::from_wit(m).unwrap_err();
            assert!(err.field.starts_with(field), "{field}: {err}");
        }
    }
}
