//! Pulled modules by digest: `<cache>/oci/blobs/sha256/<hex>` for manifests, configs and
//! layers, `<cache>/oci/tags/<sha256 of registry/repo:tag>` for the digest a tag last resolved
//! to. Every blob is verified against its name when read, so a corrupted or tampered file is
//! a miss, never a load. Files are written to a temporary name and renamed into place.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::ModuleRef;
use super::artifact::{parse_manifest, sha256_digest};

#[derive(Debug, Clone)]
pub struct ModuleCache {
    root: PathBuf,
}

impl ModuleCache {
    pub fn new(cache_dir: &Path) -> Self {
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
    pub fn blob(&self, digest: &str) -> std::io::Result<Option<Vec<u8>>> {
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
    pub fn load(&self, digest: &str) -> std::io::Result<Option<Vec<u8>>> {
        let Some(manifest) = self.blob(digest)? else {
            return Ok(None);
        };
        let Ok(parts) = parse_manifest(&manifest) else {
            return Ok(None);
        };
        self.blob(&parts.layer.digest)
    }

    /// Stores a verified pull: each blob under the digest it was verified against.
    pub fn store(&self, blobs: &[(&str, &[u8])]) -> std::io::Result<()> {
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
    pub fn remember(&self, module: &ModuleRef, digest: &str) -> std::io::Result<()> {
        write_atomically(&self.tag_path(module), digest.as_bytes())
    }

    /// The digest `module`'s tag last resolved to.
    pub fn resolved(&self, module: &ModuleRef) -> std::io::Result<Option<String>> {
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
}
