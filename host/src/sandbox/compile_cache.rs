//! The on-disk cache of compiled guests: an entry is native code the host will run, so the
//! cache trusts only what it wrote itself.
//!
//! Trust rules:
//! - The directory is created mode 0700 when missing. An existing one is used only when it is
//!   owned by this process's effective uid and not writable by group or others; otherwise
//!   [`CompileCache::open`] refuses it, naming the fix (`chmod go-w DIR`, or another directory).
//! - `DIR/.key` holds a random 32-byte secret, created mode 0600 and never replaced (it appears
//!   whole or not at all, so concurrent hosts agree on it). A key file owned by another uid, open
//!   to group or others, or of the wrong size refuses the directory.
//! - Each entry is a header (magic, then an HMAC-SHA256 under the key over the entry's file name
//!   and its artefact) followed by the artefact, as `Component::serialize` wrote it. An entry is
//!   read whole into memory and its tag checked there, and only those bytes are handed to
//!   wasmtime, so the file cannot change between the check and its use. Binding the name means an
//!   entry cannot be passed off as another guest's either.
//! - An entry file owned by another uid or writable by group or others is not read, even with a
//!   good tag. An entry that fails any check is reported (the runtime warns and compiles again,
//!   and the fresh entry replaces it).
//!
//! Writes go through a uniquely named temporary file (mode 0600) and a rename, so a reader never
//! sees a half-written entry and concurrent writers never share a file.
//!
//! Cost: a cache hit reads the whole artefact and hashes it once (for a Rust guest, well under
//! a millisecond; the ~18 MB Python guest, tens of milliseconds), instead of mapping the file.

use std::fs::{DirBuilder, File};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The key file's name in the cache directory.
pub(crate) const KEY_FILE: &str = ".key";
const KEY_LEN: usize = 32;
/// Starts every entry; the format's version is its last byte.
const MAGIC: &[u8; 8] = b"rhcache1";
const TAG_LEN: usize = 32;
const HEADER_LEN: usize = MAGIC.len() + TAG_LEN;
/// The other way out of a refused directory.
const ELSEWHERE: &str =
    "use another directory (`--cache-dir`, or `XDG_CACHE_HOME` for the default)";

/// A cache directory that cannot be trusted or used. The host then compiles in memory.
#[derive(Debug, thiserror::Error)]
#[error("compile cache {}: {problem}; {fix}", .dir.display())]
pub(crate) struct OpenError {
    pub dir: PathBuf,
    pub problem: String,
    pub fix: String,
}

/// An entry that is present but was not loaded.
#[derive(Debug, thiserror::Error)]
#[error("compile cache entry {}: {problem}", .path.display())]
pub(crate) struct EntryError {
    pub path: PathBuf,
    pub problem: String,
}

/// A trusted compile cache directory and its key.
pub(crate) struct CompileCache {
    dir: PathBuf,
    key: [u8; KEY_LEN],
    uid: u32,
}

impl std::fmt::Debug for CompileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileCache")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// An entry's artefact, read into memory and authenticated.
pub(crate) struct Verified(Vec<u8>);

impl Verified {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0[HEADER_LEN..]
    }
}

impl CompileCache {
    /// Opens (creating when missing) the cache in `dir` and its key, under the trust rules of
    /// the module docs.
    pub(crate) fn open(dir: &Path) -> Result<Self, OpenError> {
        let refuse = |problem: String, fix: &str| OpenError {
            dir: dir.to_owned(),
            problem,
            fix: fix.to_owned(),
        };
        let created = DirBuilder::new().recursive(true).mode(0o700).create(dir);
        let meta = std::fs::metadata(dir).map_err(|e| {
            let e = created.err().unwrap_or(e);
            refuse(format!("cannot create it: {e}"), ELSEWHERE)
        })?;
        if !meta.is_dir() {
            return Err(refuse("is not a directory".into(), ELSEWHERE));
        }
        let uid = nix::unistd::geteuid().as_raw();
        if meta.uid() != uid {
            return Err(refuse(
                format!(
                    "is owned by uid {}, not this process's uid {uid}, so its owner could make the host run code of their choosing",
                    meta.uid()
                ),
                &format!("chown {uid} {} (as root), or {ELSEWHERE}", dir.display()),
            ));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refuse(
                format!(
                    "is writable by group or others (mode {:04o}), so they could make the host run code of their choosing",
                    meta.mode() & 0o7777
                ),
                &format!("chmod go-w {}", dir.display()),
            ));
        }
        let key = read_or_create_key(dir, uid).map_err(|(problem, fix)| refuse(problem, &fix))?;
        Ok(Self {
            dir: dir.to_owned(),
            key,
            uid,
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artefact stored under `name` (a plain file name), if there is one this cache wrote.
    /// `Ok(None)`: no such entry. `Err`: an entry is there but fails a trust rule or cannot be
    /// read; compile again and [`CompileCache::put`] the result, which replaces it.
    pub(crate) fn get(&self, name: &str) -> Result<Option<Verified>, EntryError> {
        debug_assert!(is_entry_name(name), "{name:?} is not a cache entry name");
        let path = self.dir.join(name);
        let problem = |problem: String| EntryError {
            path: path.clone(),
            problem,
        };
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(problem(format!("cannot be opened: {e}"))),
        };
        // Checked on the open file, so they hold for the bytes read below.
        let meta = file
            .metadata()
            .map_err(|e| problem(format!("cannot be read: {e}")))?;
        if !meta.is_file() {
            return Err(problem("is not a regular file".into()));
        }
        if meta.uid() != self.uid {
            return Err(problem(format!(
                "is owned by uid {}, not this process's uid {}",
                meta.uid(),
                self.uid
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(problem(format!(
                "is writable by group or others (mode {:04o})",
                meta.mode() & 0o7777
            )));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.read_to_end(&mut bytes)
            .map_err(|e| problem(format!("cannot be read: {e}")))?;
        if bytes.len() < HEADER_LEN || &bytes[..MAGIC.len()] != MAGIC {
            return Err(problem(
                "was not written by this cache (no header; an older host's or someone else's)"
                    .into(),
            ));
        }
        let expected = self.tag(name, &bytes[HEADER_LEN..]);
        if !constant_time_eq(&bytes[MAGIC.len()..HEADER_LEN], &expected) {
            return Err(problem(
                "its tag does not match: written under another key, renamed, or altered".into(),
            ));
        }
        Ok(Some(Verified(bytes)))
    }

    /// Stores `artefact` under `name` (a plain file name), atomically replacing any entry there.
    pub(crate) fn put(&self, name: &str, artefact: &[u8]) -> std::io::Result<()> {
        debug_assert!(is_entry_name(name), "{name:?} is not a cache entry name");
        let mut header = [0u8; HEADER_LEN];
        header[..MAGIC.len()].copy_from_slice(MAGIC);
        header[MAGIC.len()..].copy_from_slice(&self.tag(name, artefact));
        write_atomically(&self.dir, &self.dir.join(name), &[&header, artefact])
    }

    fn tag(&self, name: &str, artefact: &[u8]) -> [u8; TAG_LEN] {
        // A file name holds no NUL, so name and artefact cannot be shifted into each other.
        hmac_sha256(&self.key, &[name.as_bytes(), &[0], artefact])
    }
}

fn is_entry_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\0'])
}

/// Reads `DIR/.key`, or creates it when missing. Errors are (problem, fix).
fn read_or_create_key(dir: &Path, uid: u32) -> Result<[u8; KEY_LEN], (String, String)> {
    let path = dir.join(KEY_FILE);
    let shown = path.display();
    let start_over = format!("delete {shown} (cached guests are then compiled again)");
    // Two attempts: a concurrent host may create the key between our read and our create.
    for _ in 0..2 {
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => match create_key(dir, &path) {
                Ok(key) => return Ok(key),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err((
                        format!("cannot create its key {shown}: {e}"),
                        format!(
                            "make the directory writable by this process's user, or {ELSEWHERE}"
                        ),
                    ));
                }
            },
            Err(e) => {
                return Err((format!("cannot open its key {shown}: {e}"), start_over));
            }
        };
        let meta = file.metadata().map_err(|e| {
            (
                format!("cannot read its key {shown}: {e}"),
                start_over.clone(),
            )
        })?;
        if meta.uid() != uid {
            return Err((
                format!(
                    "its key {shown} is owned by uid {}, not this process's uid {uid}",
                    meta.uid()
                ),
                start_over,
            ));
        }
        if meta.mode() & 0o077 != 0 {
            return Err((
                format!(
                    "its key {shown} is open to group or others (mode {:04o}), so entries could be forged",
                    meta.mode() & 0o7777
                ),
                format!("{start_over}, or chmod 600 {shown} if nobody else could have read it"),
            ));
        }
        let mut key = Vec::with_capacity(KEY_LEN + 1);
        let read = (&mut file).take(KEY_LEN as u64 + 1).read_to_end(&mut key);
        return match <[u8; KEY_LEN]>::try_from(key) {
            Ok(key) if meta.is_file() && read.is_ok() => Ok(key),
            _ => Err((
                format!("its key {shown} is not a file of {KEY_LEN} bytes"),
                start_over,
            )),
        };
    }
    Err((
        format!("its key {shown} keeps disappearing"),
        "make sure nothing else manages this directory".into(),
    ))
}

/// Writes a fresh key through a temporary file (mode 0600) linked into place only if no key
/// exists (`AlreadyExists` otherwise), so readers see a whole key or none.
fn create_key(dir: &Path, path: &Path) -> std::io::Result<[u8; KEY_LEN]> {
    let mut key = [0u8; KEY_LEN];
    getrandom::fill(&mut key).map_err(std::io::Error::other)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(&key)?;
    tmp.as_file().sync_all()?;
    tmp.persist_noclobber(path).map_err(|e| e.error)?;
    Ok(key)
}

/// Writes `parts` to `path` through a uniquely named temporary file (mode 0600) in `dir` and a
/// rename, so a concurrent reader never sees a half-written file and concurrent writers (two
/// loads of the same content) never share a temporary file.
fn write_atomically(dir: &Path, path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    for part in parts {
        tmp.write_all(part)?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts`, for keys of at most one block. Written
/// out over `sha2` because the `hmac` crate turns on `digest`'s `mac` feature, which would
/// rebuild `sha2` and, with it, Cranelift and wasmtime.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    const BLOCK: usize = 64;
    assert!(
        key.len() <= BLOCK,
        "HMAC keys longer than a block are not needed here"
    );
    let mut ipad = [0x36u8; BLOCK];
    let mut opad = [0x5cu8; BLOCK];
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let mut inner = Sha256::new();
    inner.update(ipad);
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(opad);
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Compares without stopping at the first difference, so timing tells nothing about a tag.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const NAME: &str = "0123abcd-feed.cwasm";

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    fn hex(bytes: &[u8]) -> String {
        use std::fmt::Write as _;
        bytes
            .iter()
            .fold(String::with_capacity(2 * bytes.len()), |mut out, b| {
                let _ = write!(out, "{b:02x}");
                out
            })
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1 and 2.
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], &[b"Hi There"])),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(
                b"Jefe",
                &[b"what do ya want ", b"for nothing?"]
            )),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_missing_directory_is_created_private_with_a_private_key() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/cache");
        CompileCache::open(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let key = dir.join(KEY_FILE);
        assert_eq!(mode(&key), 0o600);
        assert_eq!(std::fs::read(&key).unwrap().len(), KEY_LEN);
    }

    #[test]
    fn an_entry_roundtrips_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::open(dir.path()).unwrap();
        assert!(cache.get(NAME).unwrap().is_none());
        cache.put(NAME, b"artefact").unwrap();
        assert_eq!(cache.get(NAME).unwrap().unwrap().bytes(), b"artefact");
        assert_eq!(mode(&dir.path().join(NAME)), 0o600);
        let reopened = CompileCache::open(dir.path()).unwrap();
        assert_eq!(reopened.get(NAME).unwrap().unwrap().bytes(), b"artefact");
        // Replacing an entry leaves one file besides the key: no temporary files behind.
        reopened.put(NAME, b"newer").unwrap();
        assert_eq!(cache.get(NAME).unwrap().unwrap().bytes(), b"newer");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn hosts_opening_a_fresh_directory_at_once_agree_on_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let caches: Vec<CompileCache> = std::thread::scope(|s| {
            let opens: Vec<_> = (0..8)
                .map(|_| s.spawn(|| CompileCache::open(dir.path())))
                .collect();
            opens
                .into_iter()
                .map(|o| o.join().unwrap().unwrap())
                .collect()
        });
        caches[0].put(NAME, b"artefact").unwrap();
        for cache in &caches {
            assert_eq!(cache.get(NAME).unwrap().unwrap().bytes(), b"artefact");
        }
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        for unsafe_mode in [0o777, 0o770, 0o1777] {
            let dir = tempfile::tempdir().unwrap();
            chmod(dir.path(), unsafe_mode);
            let e = CompileCache::open(dir.path()).unwrap_err().to_string();
            assert!(e.contains("writable by group or others"), "{e}");
            assert!(
                e.contains(&format!("chmod go-w {}", dir.path().display())),
                "{e}"
            );
            assert!(!dir.path().join(KEY_FILE).exists());
        }
        // Readable by others is fine: only writing lets someone plant an entry.
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o755);
        CompileCache::open(dir.path()).unwrap();
    }

    #[test]
    fn a_file_in_place_of_the_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cache");
        std::fs::write(&file, b"").unwrap();
        let e = CompileCache::open(&file).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}: is not a directory", file.display())),
            "{e}"
        );
    }

    #[test]
    fn a_key_file_others_can_access_is_refused() {
        for (bad_mode, what) in [(0o644, "read"), (0o620, "write")] {
            let dir = tempfile::tempdir().unwrap();
            CompileCache::open(dir.path()).unwrap();
            let key = dir.path().join(KEY_FILE);
            chmod(&key, bad_mode);
            let e = CompileCache::open(dir.path()).unwrap_err().to_string();
            assert!(e.contains("open to group or others"), "{what}: {e}");
            assert!(e.contains(&format!("delete {}", key.display())), "{e}");
        }
    }

    #[test]
    fn a_key_file_of_the_wrong_size_is_refused() {
        for content in [&b""[..], &[7; KEY_LEN - 1], &[7; KEY_LEN + 1]] {
            let dir = tempfile::tempdir().unwrap();
            let key = dir.path().join(KEY_FILE);
            std::fs::write(&key, content).unwrap();
            chmod(&key, 0o600);
            let e = CompileCache::open(dir.path()).unwrap_err().to_string();
            assert!(e.contains("not a file of 32 bytes"), "{e}");
        }
    }

    #[test]
    fn an_entry_this_cache_did_not_write_is_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::open(dir.path()).unwrap();
        let entry = dir.path().join(NAME);
        // A bare artefact, as earlier hosts wrote them, or anything else dropped there.
        std::fs::write(&entry, b"\x7fELF not ours").unwrap();
        let e = cache.get(NAME).err().unwrap().to_string();
        assert!(e.contains("was not written by this cache"), "{e}");
        // A well-formed entry written under another cache's key.
        let other = tempfile::tempdir().unwrap();
        CompileCache::open(other.path())
            .unwrap()
            .put(NAME, b"artefact")
            .unwrap();
        std::fs::copy(other.path().join(NAME), &entry).unwrap();
        let e = cache.get(NAME).err().unwrap().to_string();
        assert!(e.contains("tag does not match"), "{e}");
        // Something that is not a file at all.
        std::fs::remove_file(&entry).unwrap();
        std::fs::create_dir(&entry).unwrap();
        assert!(cache.get(NAME).is_err());
    }

    #[test]
    fn a_tampered_entry_is_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::open(dir.path()).unwrap();
        cache.put(NAME, b"artefact").unwrap();
        let entry = dir.path().join(NAME);
        let good = std::fs::read(&entry).unwrap();
        for tampered in [
            {
                let mut b = good.clone();
                *b.last_mut().unwrap() ^= 1;
                b
            },
            [&good[..], b"appended"].concat(),
            good[..good.len() - 1].to_vec(),
            {
                let mut b = good.clone();
                b[MAGIC.len()] ^= 1;
                b
            },
        ] {
            std::fs::write(&entry, &tampered).unwrap();
            let e = cache.get(NAME).err().unwrap().to_string();
            assert!(e.contains("tag does not match"), "{e}");
        }
        // A good entry under another guest's name: the tag covers the name.
        std::fs::write(&entry, &good).unwrap();
        std::fs::rename(&entry, dir.path().join("other-feed.cwasm")).unwrap();
        assert!(cache.get("other-feed.cwasm").is_err());
    }

    #[test]
    fn an_entry_others_can_write_is_not_loaded_even_with_a_good_tag() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::open(dir.path()).unwrap();
        cache.put(NAME, b"artefact").unwrap();
        chmod(&dir.path().join(NAME), 0o666);
        let e = cache.get(NAME).err().unwrap().to_string();
        assert!(e.contains("writable by group or others"), "{e}");
    }

    /// Files owned by someone else can only be made as root; elsewhere this test checks nothing.
    #[test]
    fn files_owned_by_another_user_are_refused() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let nobody = Some(65534);
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::open(dir.path()).unwrap();
        cache.put(NAME, b"artefact").unwrap();
        let entry = dir.path().join(NAME);
        std::os::unix::fs::chown(&entry, nobody, None).unwrap();
        let e = cache.get(NAME).err().unwrap().to_string();
        assert!(e.contains("owned by uid 65534"), "{e}");

        std::os::unix::fs::chown(dir.path().join(KEY_FILE), nobody, None).unwrap();
        let e = CompileCache::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("key") && e.contains("owned by uid 65534"), "{e}");

        std::os::unix::fs::chown(dir.path(), nobody, None).unwrap();
        let e = CompileCache::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("owned by uid 65534, not this process's uid 0"),
            "{e}"
        );
    }
}
