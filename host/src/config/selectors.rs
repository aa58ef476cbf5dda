//! `readSelectors`: the label selector that bounds a guest's cache of a kind.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::cluster::objects::Gvk;

/// A label selector per kind (`readSelectors`), each checked when the configuration is read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReadSelectors(BTreeMap<Gvk, String>);

impl ReadSelectors {
    /// The selector for `kind`, if one is set.
    pub(crate) fn get(&self, kind: &Gvk) -> Option<&str> {
        self.0.get(kind).map(String::as_str)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Gvk, &str)> {
        self.0.iter().map(|(k, v)| (k, v.as_str()))
    }

    /// `selector` with this kind's requirement added (both as written when either is unset).
    pub(crate) fn narrow(&self, kind: &Gvk, selector: Option<&str>) -> Option<String> {
        match (self.get(kind), selector) {
            (Some(mine), Some(theirs)) => Some(format!("{mine},{theirs}")),
            (Some(one), None) | (None, Some(one)) => Some(one.to_owned()),
            (None, None) => None,
        }
    }
}

impl<'de> Deserialize<'de> for ReadSelectors {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let written = BTreeMap::<String, String>::deserialize(deserializer)?;
        let mut selectors = BTreeMap::new();
        for (kind, selector) in written {
            let kind: Gvk = kind.parse().map_err(serde::de::Error::custom)?;
            crate::cluster::selector::parse_selector(&selector)
                .map_err(|e| serde::de::Error::custom(format!("readSelectors {kind}: {e}")))?;
            selectors.insert(kind, selector);
        }
        Ok(Self(selectors))
    }
}

/// Whether selector `inner` selects only objects `outer` selects: it carries each of
/// `outer`'s requirements (the parser sorts and removes repeats, so adding `outer`'s to
/// `inner`'s changes nothing exactly then).
pub(crate) fn selector_within(inner: &str, outer: &str) -> bool {
    let parse = crate::cluster::selector::parse_selector;
    match (parse(&format!("{inner},{outer}")), parse(inner)) {
        (Ok(both), Ok(inner)) => both == inner,
        _ => false,
    }
}
