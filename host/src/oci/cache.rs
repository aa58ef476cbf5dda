//! Pulled modules by digest: `<cache>/oci/blobs/sha256/<hex>` for manifests, configs and
//! layers, `<cache>/oci/tags/<sha256 of registry/repo:tag>` for the digest a tag last resolved
//! to, `<cache>/oci/pulled/<hex of a manifest digest>` for who pulled it (one line per
//! registry, repository and pull Secret, hashed). Every blob is verified against its name when
//! read, so a corrupted or tampered file is a miss, never a load. Files are written to a
//! temporary name and renamed into place.
//!
//! Bounded: [`ModuleCache::store_bounded`] evicts modules no guest uses, least recently
//! loaded first (a manifest's modification time is touched on each load), until the new one
//! fits, and refuses it if it cannot.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::artifact::{parse_manifest, sha256_digest};
use super::reference::ModuleRef;

#[derive(Debug, Clone)]
pub(crate) struct ModuleCache {
    root: PathBuf,
}

/// Why a pull was not stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("the cache holds {in_use} bytes in use and needs {needed} more, over its {max}")]
    Full { in_use: u64, needed: u64, max: u64 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl ModuleCache {
    pub(crate) fn new(cache_dir: &Path) -> Self {
        Self {
            root: cache_dir.join("oci"),
        }
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        let hex = digest.strip_prefix("sha256:")?;
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| self.root.join("blobs/sha256").join(hex))
    }

    /// A blob whose content still hashes to `digest`; `None` if absent or altered.
    pub(crate) fn blob(&self, digest: &str) -> std::io::Result<Option<Vec<u8>>> {
        let Some(path) = self.blob_path(digest) else {
            return Ok(None);
        };
        match std::fs::read(&path) {
            Ok(bytes) if sha256_digest(&bytes) == digest => Ok(Some(bytes)),
            Ok(_) => {
                tracing::warn!(path = %path.display(), "a cached module blob no longer matches its digest; ignoring it");
                Ok(None)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The component of the module whose manifest has `digest`, if the manifest and its layer
    /// are both cached intact.
    pub(crate) fn load(&self, digest: &str) -> std::io::Result<Option<Vec<u8>>> {
        let Some(manifest) = self.blob(digest)? else {
            return Ok(None);
        };
        let Ok(parts) = parse_manifest(&manifest) else {
            return Ok(None);
        };
        let layer = self.blob(&parts.layer.digest)?;
        if layer.is_some()
            && let Some(path) = self.blob_path(digest)
        {
            // Recency for eviction; a cache that cannot record it still serves.
            let _ = std::fs::File::options()
                .append(true)
                .open(path)
                .and_then(|f| f.set_modified(SystemTime::now()));
        }
        Ok(layer)
    }

    /// Stores a verified pull (as [`Self::store`]) so that the cache stays within `max` bytes:
    /// modules whose manifest digest is not in `in_use` are evicted, least recently loaded
    /// first, until the new blobs fit; if they cannot, nothing is stored.
    pub(crate) fn store_bounded(
        &self,
        blobs: &[(&str, &[u8])],
        in_use: &BTreeSet<String>,
        max: u64,
    ) -> Result<(), StoreError> {
        let needed: u64 = blobs
            .iter()
            .filter(|(digest, _)| self.blob_path(digest).is_none_or(|p| !p.exists()))
            .map(|(_, bytes)| bytes.len() as u64)
            .sum();
        let mut sizes = self.sizes()?;
        let mut total: u64 = sizes.values().sum();
        if total + needed > max {
            let keep: BTreeSet<&str> = blobs.iter().map(|(d, _)| *d).collect();
            let groups = self.eviction_order(in_use, &keep, &sizes)?;
            let size =
                |group: &Vec<String>| -> u64 { group.iter().filter_map(|d| sizes.get(d)).sum() };
            let evictable: u64 = groups.iter().map(size).sum();
            // Nothing goes for a module that would not fit anyway.
            if total - evictable.min(total) + needed > max {
                return Err(StoreError::Full {
                    in_use: total - evictable.min(total),
                    needed,
                    max,
                });
            }
            for group in groups {
                if total + needed <= max {
                    break;
                }
                for victim in group {
                    if let Some(path) = self.blob_path(&victim) {
                        match std::fs::remove_file(&path) {
                            Ok(()) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    let _ = std::fs::remove_file(self.pulled_path(&victim));
                    total -= sizes.remove(&victim).unwrap_or(0);
                    tracing::info!(blob = %victim, "module cache: evicted to stay within registries.cacheMaxBytes");
                }
            }
        }
        self.store(blobs)?;
        Ok(())
    }

    /// Blobs that may go, in groups that go together, in the order they go: first those no
    /// module references (left by a module evicted before, or an older cache), then each
    /// unused module's manifest with the blobs only it references, least recently loaded
    /// module first.
    fn eviction_order(
        &self,
        in_use: &BTreeSet<String>,
        keep: &BTreeSet<&str>,
        sizes: &BTreeMap<String, u64>,
    ) -> std::io::Result<Vec<Vec<String>>> {
        // manifest digest → (last loaded, the blobs it names)
        let mut modules: BTreeMap<String, (SystemTime, Vec<String>)> = BTreeMap::new();
        for digest in sizes.keys() {
            let Some(path) = self.blob_path(digest) else {
                continue;
            };
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            if let Ok(parts) = parse_manifest(&bytes) {
                let used = std::fs::metadata(&path)?.modified()?;
                modules.insert(
                    digest.clone(),
                    (used, vec![parts.config.digest, parts.layer.digest]),
                );
            }
        }
        let held = |digest: &str| keep.contains(digest) || in_use.contains(digest);
        let mut referenced: BTreeMap<&str, usize> = BTreeMap::new();
        for (manifest, (_, names)) in &modules {
            for name in names.iter().map(String::as_str).chain([manifest.as_str()]) {
                *referenced.entry(name).or_default() += 1;
            }
        }
        let mut order: Vec<Vec<String>> = sizes
            .keys()
            .filter(|d| !held(d) && !referenced.contains_key(d.as_str()))
            .map(|d| vec![d.clone()])
            .collect();
        let mut unused: Vec<(&SystemTime, &String, &Vec<String>)> = modules
            .iter()
            .filter(|(manifest, _)| !held(manifest))
            .map(|(manifest, (used, names))| (used, manifest, names))
            .collect();
        unused.sort();
        // A blob another remaining module names stays until that module goes too.
        let mut remaining = referenced.clone();
        for (_, manifest, names) in unused {
            let mut group = Vec::new();
            // The manifest first: a module half evicted is a miss, never a load.
            for name in [manifest.as_str()]
                .into_iter()
                .chain(names.iter().map(String::as_str))
            {
                let count = remaining.entry(name).or_default();
                *count = count.saturating_sub(1);
                if *count == 0 && !held(name) {
                    group.push(name.to_owned());
                }
            }
            order.push(group);
        }
        Ok(order)
    }

    /// Every blob's size, by digest.
    fn sizes(&self) -> std::io::Result<BTreeMap<String, u64>> {
        let entries = match std::fs::read_dir(self.root.join("blobs/sha256")) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(e),
        };
        let mut sizes = BTreeMap::new();
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Temporary files of a write in progress are not blobs.
            if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
                sizes.insert(format!("sha256:{name}"), entry.metadata()?.len());
            }
        }
        Ok(sizes)
    }

    /// Notes that `module` (its registry and repository), asked with pull Secret `secret`,
    /// was served manifest `digest`.
    pub(crate) fn note_pull(
        &self,
        digest: &str,
        module: &ModuleRef,
        secret: Option<&str>,
    ) -> std::io::Result<()> {
        if self.pulled_by(digest, module, secret)? {
            return Ok(());
        }
        let path = self.pulled_path(digest);
        let mut lines = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        lines.push_str(&requester(module, secret));
        lines.push('\n');
        write_atomically(&path, lines.as_bytes())
    }

    /// Whether `module` with pull Secret `secret` was served manifest `digest` before.
    pub(crate) fn pulled_by(
        &self,
        digest: &str,
        module: &ModuleRef,
        secret: Option<&str>,
    ) -> std::io::Result<bool> {
        let wanted = requester(module, secret);
        match std::fs::read_to_string(self.pulled_path(digest)) {
            Ok(text) => Ok(text.lines().any(|line| line == wanted)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Keeps the signatures found for manifest `digest`, to verify again at loads with the
    /// registry down.
    pub(super) fn keep_signatures(
        &self,
        digest: &str,
        found: &[super::signatures::Found],
    ) -> std::io::Result<()> {
        let json = serde_json::to_vec(found).map_err(std::io::Error::other)?;
        write_atomically(&self.signatures_path(digest), &json)
    }

    /// The signatures kept for `digest` (none if none were), to be verified by the caller.
    pub(super) fn signatures(
        &self,
        digest: &str,
    ) -> std::io::Result<Vec<super::signatures::Found>> {
        match std::fs::read(self.signatures_path(digest)) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_default()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    fn signatures_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        let safe: String = hex.chars().filter(char::is_ascii_hexdigit).collect();
        self.root.join("signatures").join(format!("{safe}.json"))
    }

    fn pulled_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        let safe: String = hex.chars().filter(char::is_ascii_hexdigit).collect();
        self.root.join("pulled").join(safe)
    }

    /// Stores a verified pull: each blob under the digest it was verified against.
    pub(crate) fn store(&self, blobs: &[(&str, &[u8])]) -> std::io::Result<()> {
        for &(digest, bytes) in blobs {
            let Some(path) = self.blob_path(digest) else {
                continue;
            };
            // Content-addressed: an intact copy is these bytes already, stored once.
            if path.exists() && self.blob(digest)?.is_some() {
                continue;
            }
            write_atomically(&path, bytes)?;
        }
        Ok(())
    }

    /// Remembers the digest a tag resolved to.
    pub(crate) fn remember(&self, module: &ModuleRef, digest: &str) -> std::io::Result<()> {
        write_atomically(&self.tag_path(module), digest.as_bytes())
    }

    /// The digest `module`'s tag last resolved to.
    pub(crate) fn resolved(&self, module: &ModuleRef) -> std::io::Result<Option<String>> {
        match std::fs::read_to_string(self.tag_path(module)) {
            Ok(digest) => Ok(Some(digest.trim().to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn tag_path(&self, module: &ModuleRef) -> PathBuf {
        let key = sha256_digest(module.tagged_name().as_bytes());
        self.root.join("tags").join(&key["sha256:".len()..])
    }

    #[cfg(test)]
    fn blobs(&self) -> std::io::Result<usize> {
        match std::fs::read_dir(self.root.join("blobs/sha256")) {
            Ok(entries) => Ok(entries.count()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }
}

/// One line of a `pulled` file: the registry, repository and Secret, hashed (no Secret name
/// or repository lands in the cache directory in clear).
fn requester(module: &ModuleRef, secret: Option<&str>) -> String {
    let who = format!(
        "{}/{}\n{}",
        module.registry().to_ascii_lowercase(),
        module.reference().repository(),
        secret.unwrap_or("")
    );
    sha256_digest(who.as_bytes())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::artifact::{ComponentInterfaces, config, manifest};
    use super::*;

    #[test]
    fn a_stored_module_loads_by_digest_once_and_an_altered_blob_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::new(dir.path());
        let layer = b"component bytes".to_vec();
        let layer_digest = sha256_digest(&layer);
        let config = config(&layer_digest, &ComponentInterfaces::default());
        let raw = manifest(
            (&sha256_digest(&config), config.len()),
            (&layer_digest, layer.len()),
            "module.wasm",
        );
        let digest = sha256_digest(&raw);
        assert_eq!(cache.load(&digest).unwrap(), None);
        let config_digest = sha256_digest(&config);
        let blobs: [(&str, &[u8]); 3] = [
            (&digest, &raw),
            (&config_digest, &config),
            (&layer_digest, &layer),
        ];
        cache.store(&blobs).unwrap();
        cache.store(&blobs).unwrap();
        assert_eq!(cache.load(&digest).unwrap(), Some(layer.clone()));
        assert_eq!(
            cache.blobs().unwrap(),
            3,
            "manifest, config, layer, each once"
        );

        let path = cache.blob_path(&layer_digest).unwrap();
        std::fs::write(&path, b"tampered").unwrap();
        assert_eq!(cache.load(&digest).unwrap(), None);

        let module: ModuleRef = "oci://127.0.0.1:5000/g:v1".parse().unwrap();
        assert_eq!(cache.resolved(&module).unwrap(), None);
        cache.remember(&module, &digest).unwrap();
        assert_eq!(cache.resolved(&module).unwrap(), Some(digest));
    }

    /// A module with a layer of `size` bytes: its three blobs, manifest first.
    fn module(size: usize, fill: u8) -> Vec<(String, Vec<u8>)> {
        let layer = vec![fill; size];
        let layer_digest = sha256_digest(&layer);
        let config = config(&layer_digest, &ComponentInterfaces::default());
        let raw = manifest(
            (&sha256_digest(&config), config.len()),
            (&layer_digest, layer.len()),
            "module.wasm",
        );
        vec![
            (sha256_digest(&raw), raw),
            (sha256_digest(&config), config),
            (layer_digest, layer),
        ]
    }

    fn store(
        cache: &ModuleCache,
        m: &[(String, Vec<u8>)],
        in_use: &[&str],
        max: u64,
    ) -> Result<(), StoreError> {
        let blobs: Vec<(&str, &[u8])> = m.iter().map(|(d, b)| (d.as_str(), b.as_slice())).collect();
        let in_use = in_use.iter().map(|d| (*d).to_owned()).collect();
        cache.store_bounded(&blobs, &in_use, max)
    }

    /// The cache stays within its bound: modules no guest uses go, least recently loaded
    /// first, with the blobs only they name; one that cannot fit beside the modules in use is
    /// refused and nothing of it is stored.
    #[test]
    fn the_cache_evicts_unused_modules_least_recently_loaded_first_and_refuses_past_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::new(dir.path());
        let (a, b, c, d) = (
            module(1000, 1),
            module(1000, 2),
            module(1000, 3),
            module(2000, 4),
        );
        let max = 3400;
        store(&cache, &a, &[], max).unwrap();
        store(&cache, &b, &[], max).unwrap();
        // a loaded after b: b is the least recently used.
        let past = SystemTime::now() - std::time::Duration::from_mins(1);
        for m in [&a, &b] {
            std::fs::File::options()
                .append(true)
                .open(cache.blob_path(&m[0].0).unwrap())
                .unwrap()
                .set_modified(past)
                .unwrap();
        }
        assert!(cache.load(&a[0].0).unwrap().is_some());
        store(&cache, &c, &[], max).unwrap();
        assert!(cache.load(&b[0].0).unwrap().is_none(), "b went first");
        assert!(cache.load(&a[0].0).unwrap().is_some());
        assert!(cache.load(&c[0].0).unwrap().is_some());
        let total = |cache: &ModuleCache| cache.sizes().unwrap().values().sum::<u64>();
        assert!(total(&cache) <= max, "{}", total(&cache));
        assert_eq!(
            cache.blobs().unwrap(),
            6,
            "b's config and layer went with it"
        );

        // With a and c in use, d (2000 bytes) cannot fit: refused, nothing of it stored.
        let err = store(&cache, &d, &[&a[0].0, &c[0].0], max).unwrap_err();
        assert!(matches!(err, StoreError::Full { .. }), "{err}");
        assert!(cache.load(&d[0].0).unwrap().is_none());
        assert!(cache.load(&a[0].0).unwrap().is_some() && cache.load(&c[0].0).unwrap().is_some());
        // With only a in use, d does not fit beside a either: refused, and c stays (nothing
        // is evicted for a module that would not fit).
        assert!(store(&cache, &d, &[&a[0].0], max).is_err());
        assert!(cache.load(&c[0].0).unwrap().is_some());
        // Nothing in use: room is made.
        store(&cache, &d, &[], max).unwrap();
        assert!(cache.load(&d[0].0).unwrap().is_some());
        assert!(total(&cache) <= max);
    }
}
