//! Items that carry their own grant, as `Reconciler` objects do, held in memory: what the
//! guest set loads and what it tells the source.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use reconciler_host::config::Grant;
use reconciler_host::supply::guest_set::{
    Artefact, Changes, GuestSource, Origin, OriginKind, SourceError, Verdict,
};

type Items = BTreeMap<String, (i64, Grant, Vec<u8>)>;

#[derive(Default, Clone)]
pub struct Objects {
    /// name → (generation, grant, component bytes)
    pub items: Arc<Mutex<Items>>,
    pub verdicts: Arc<Mutex<Vec<(String, i64, Verdict)>>>,
}

impl GuestSource for Objects {
    fn list(&self) -> Result<Vec<Origin>, SourceError> {
        Ok(self
            .items
            .lock()
            .iter()
            .map(|(name, (generation, grant, _))| {
                Origin::reconciler(name, *generation, grant.clone())
            })
            .collect())
    }

    fn read(&self, origin: &Origin) -> Result<Artefact, SourceError> {
        let items = self.items.lock();
        let (_, _, bytes) = &items[origin.stem()];
        Ok(Artefact {
            origin: origin.clone(),
            bytes: bytes.clone(),
            hash: reconciler_host::sandbox::runtime::content_hash(bytes),
            signed_by: None,
        })
    }

    fn watch(&self) -> Result<Box<dyn Changes>, SourceError> {
        Err(SourceError::Stopped {
            what: "an in-memory source".into(),
        })
    }

    fn holds(&self, origin: &Origin) -> bool {
        matches!(origin.kind(), OriginKind::Reconciler { .. })
    }

    fn judged(&self, origin: &Origin, verdict: &Verdict) {
        let OriginKind::Reconciler { generation, .. } = origin.kind() else {
            return;
        };
        let name = origin.stem().to_owned();
        self.verdicts
            .lock()
            .push((name, *generation, verdict.clone()));
    }
}
