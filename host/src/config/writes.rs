//! What a grant lets a guest write: targets (`write:`, a kind or one subresource of it) and,
//! per kind, the verbs (`writeVerbs:`). A kind `write` lists and `writeVerbs` leaves out gets
//! every verb, as before verbs could be named.
//!
//! The verbs are the RBAC verbs of the requests the host sends for the guest, so that
//! `reconciler-host rbac` prints exactly them: `create` (an apply that brings the object into
//! being: server-side apply of an absent object, which the API server authorizes as `create`
//! too), `patch` (an apply to an existing object, whole or partial; the host's finalizer on the
//! guest's primary kind; `blockOwnerDeletion` on the owner's kind) and `delete`. A subresource
//! target (`Kind/status`) gives its one write, a merge patch, so it takes no verbs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use crate::cluster::objects::Gvk;

/// A write target: a kind, or one subresource of it (`samplecrd.k8s.io/v1/Network/status`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub struct WriteTarget {
    pub(crate) kind: Gvk,
    pub(crate) subresource: Option<String>,
}

impl fmt::Display for WriteTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subresource {
            Some(sub) => write!(f, "{}/{sub}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

impl TryFrom<String> for WriteTarget {
    type Error = crate::cluster::objects::GvkParseError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        // A kind starts with an upper-case letter, so a lower-case last segment after it is a
        // subresource: `v1/Pod/status`, `apps/v1/Deployment/scale`.
        if let Some((head, last)) = s.rsplit_once('/')
            && last.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && head
                .rsplit('/')
                .next()
                .is_some_and(|k| k.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        {
            let kind = head.parse::<Gvk>()?;
            return Ok(Self {
                kind,
                subresource: Some(last.to_owned()),
            });
        }
        let kind = s.parse::<Gvk>()?;
        Ok(Self {
            kind,
            subresource: None,
        })
    }
}

/// A verb of a write grant on a kind (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(try_from = "String")]
pub enum Verb {
    Create,
    Patch,
    Delete,
}

impl Verb {
    /// Every verb: what a kind gets when `writeVerbs` does not name it.
    pub(crate) const ALL: [Verb; 3] = [Verb::Create, Verb::Patch, Verb::Delete];

    /// The RBAC verb.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<String> for Verb {
    type Error = NotAVerb;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        match s.as_str() {
            "create" => Ok(Verb::Create),
            "patch" => Ok(Verb::Patch),
            "delete" => Ok(Verb::Delete),
            "update" | "apply" => Err(NotAVerb::Apply(s)),
            _ => Err(NotAVerb::Unknown(s)),
        }
    }
}

/// A `writeVerbs` entry that is not a verb the host writes with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAVerb {
    #[error(
        "`{0}` is not a verb here: the host writes by server-side apply, which the API server authorizes as `patch` (and as `create` when it creates the object); grant those"
    )]
    Apply(String),
    #[error("unknown verb `{0}`: one of create, patch, delete")]
    Unknown(String),
}

/// `writeVerbs:`: the verbs per kind, each list checked when the configuration is read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WriteVerbs(BTreeMap<Gvk, BTreeSet<Verb>>);

impl WriteVerbs {
    /// Whether a grant with these verbs and `write` targets lets `verb` through on `kind` (a
    /// subresource's one write is `patch`).
    pub(crate) fn allow(
        &self,
        write: &BTreeSet<WriteTarget>,
        kind: &Gvk,
        subresource: Option<&str>,
        verb: Verb,
    ) -> bool {
        // Compared in place: this runs on every write a guest makes, and building a
        // `WriteTarget` to look up would copy four strings.
        let listed = write
            .iter()
            .any(|t| t.kind == *kind && t.subresource.as_deref() == subresource);
        listed && (subresource.is_some() || self.of(kind).contains(&verb))
    }

    /// The verbs of `kind`: every one unless `writeVerbs` names it.
    pub(crate) fn of(&self, kind: &Gvk) -> BTreeSet<Verb> {
        self.0
            .get(kind)
            .cloned()
            .unwrap_or_else(|| Verb::ALL.into())
    }

    /// The verbs of each target in `write` (a subresource's: `patch`), for RBAC.
    pub(crate) fn each(&self, write: &BTreeSet<WriteTarget>) -> Vec<(WriteTarget, Vec<Verb>)> {
        write
            .iter()
            .map(|target| {
                let verbs = match target.subresource {
                    Some(_) => vec![Verb::Patch],
                    None => self.of(&target.kind).into_iter().collect(),
                };
                (target.clone(), verbs)
            })
            .collect()
    }

    /// What a grant of `write` with these verbs asks beyond `ceiling` (of `ceiling_write`):
    /// each verb of a kind both list, named as `VERB KIND`.
    pub(crate) fn beyond(
        &self,
        write: &BTreeSet<WriteTarget>,
        ceiling: &WriteVerbs,
        ceiling_write: &BTreeSet<WriteTarget>,
    ) -> Vec<String> {
        let mut beyond = Vec::new();
        for target in write.iter().filter(|t| t.subresource.is_none()) {
            let kind_target = |t: &WriteTarget| t.kind == target.kind && t.subresource.is_none();
            if !ceiling_write.iter().any(kind_target) {
                continue; // `write KIND` is beyond it already.
            }
            let allowed = ceiling.of(&target.kind);
            beyond.extend(
                self.of(&target.kind)
                    .difference(&allowed)
                    .map(|verb| format!("writeVerbs {verb} {}", target.kind)),
            );
        }
        beyond
    }

    /// Why these verbs do not fit `write`, if they do not: every kind named must be a kind
    /// `write` lists.
    pub(crate) fn check(&self, write: &BTreeSet<WriteTarget>) -> Result<(), UnlistedKind> {
        for kind in self.0.keys() {
            if !write
                .iter()
                .any(|t| t.kind == *kind && t.subresource.is_none())
            {
                return Err(UnlistedKind(kind.to_string()));
            }
        }
        Ok(())
    }
}

/// `writeVerbs` names a kind `write` does not list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("writeVerbs names {0}, which write does not list: add it to write, or drop it here")]
pub(crate) struct UnlistedKind(String);

impl<'de> Deserialize<'de> for WriteVerbs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let written = BTreeMap::<String, Vec<Verb>>::deserialize(deserializer)?;
        let mut verbs = BTreeMap::new();
        for (target, list) in written {
            let parsed = WriteTarget::try_from(target.clone()).map_err(D::Error::custom)?;
            if parsed.subresource.is_some() {
                return Err(D::Error::custom(format!(
                    "writeVerbs {target}: a subresource has one write (its patch) and takes no verbs; list it under write alone"
                )));
            }
            let set: BTreeSet<Verb> = list.into_iter().collect();
            if set.is_empty() {
                return Err(D::Error::custom(format!(
                    "writeVerbs {target}: no verb; to write nothing of the kind, drop it from write"
                )));
            }
            if set.contains(&Verb::Create) && !set.contains(&Verb::Patch) {
                return Err(D::Error::custom(format!(
                    "writeVerbs {target}: create without patch; the host creates by server-side apply, a PATCH the API server authorizes as patch and create, so create needs patch"
                )));
            }
            verbs.insert(parsed.kind, set);
        }
        Ok(Self(verbs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(list: &[&str]) -> BTreeSet<WriteTarget> {
        list.iter()
            .map(|t| WriteTarget::try_from((*t).to_owned()).unwrap())
            .collect()
    }

    fn verbs(yaml: &str) -> Result<WriteVerbs, String> {
        serde_yaml::from_str(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn a_kind_writeverbs_leaves_out_keeps_every_verb_and_a_named_one_only_its_own() {
        let write = targets(&["apps/v1/Deployment", "v1/ConfigMap", "v1/Pod/status"]);
        let named = verbs("{apps/v1/Deployment: [patch]}").unwrap();
        named.check(&write).unwrap();
        let deployment = Gvk::new("apps", "v1", "Deployment");
        let config_map = Gvk::new("", "v1", "ConfigMap");
        assert!(named.allow(&write, &deployment, None, Verb::Patch));
        assert!(!named.allow(&write, &deployment, None, Verb::Create));
        assert!(!named.allow(&write, &deployment, None, Verb::Delete));
        for verb in Verb::ALL {
            assert!(named.allow(&write, &config_map, None, verb), "{verb}");
        }
        let pod = Gvk::new("", "v1", "Pod");
        assert!(named.allow(&write, &pod, Some("status"), Verb::Patch));
        assert!(!named.allow(&write, &pod, None, Verb::Patch));
        let each: Vec<(String, Vec<&str>)> = named
            .each(&write)
            .into_iter()
            .map(|(t, v)| (t.to_string(), v.into_iter().map(Verb::as_str).collect()))
            .collect();
        assert_eq!(
            each,
            [
                ("v1/ConfigMap".to_owned(), vec!["create", "patch", "delete"]),
                ("v1/Pod/status".to_owned(), vec!["patch"]),
                ("apps/v1/Deployment".to_owned(), vec!["patch"]),
            ]
        );
    }

    #[test]
    fn verbs_written_wrong_are_refused_with_what_to_write() {
        for (yaml, says) in [
            ("{apps/v1/Deployment: [update]}", "authorizes as `patch`"),
            ("{apps/v1/Deployment: [apply]}", "authorizes as `patch`"),
            ("{apps/v1/Deployment: [get]}", "unknown verb `get`"),
            ("{apps/v1/Deployment: []}", "no verb"),
            ("{apps/v1/Deployment: [create]}", "create needs patch"),
            ("{v1/Pod/status: [patch]}", "takes no verbs"),
            ("{Deployment: [patch]}", "Deployment"),
        ] {
            let error = verbs(yaml).unwrap_err();
            assert!(error.contains(says), "{yaml}: {error}");
        }
        let error = verbs("{v1/Secret: [patch]}")
            .unwrap()
            .check(&targets(&["v1/ConfigMap"]))
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("writeVerbs names v1/Secret, which write does not list")
        );
    }

    #[test]
    fn verbs_beyond_a_ceiling_are_named_each() {
        let write = targets(&["apps/v1/Deployment", "v1/ConfigMap"]);
        let ceiling =
            verbs("{apps/v1/Deployment: [patch], v1/ConfigMap: [patch, delete]}").unwrap();
        // Unnamed: every verb, so create and delete of Deployments and create of ConfigMaps.
        let beyond = WriteVerbs::default().beyond(&write, &ceiling, &write);
        assert_eq!(
            beyond,
            [
                "writeVerbs create v1/ConfigMap",
                "writeVerbs create apps/v1/Deployment",
                "writeVerbs delete apps/v1/Deployment",
            ]
        );
        let within = verbs("{apps/v1/Deployment: [patch], v1/ConfigMap: [delete]}").unwrap();
        assert!(within.beyond(&write, &ceiling, &write).is_empty());
        // A kind the ceiling does not list at all is reported as `write KIND` elsewhere.
        let narrow = targets(&["v1/ConfigMap"]);
        assert_eq!(
            WriteVerbs::default().beyond(&write, &ceiling, &narrow),
            ["writeVerbs create v1/ConfigMap"]
        );
    }
}
