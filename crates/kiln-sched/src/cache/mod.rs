//! The on-disk cache of compiled work (shared libraries, autotune results), keyed by a
//! [`CacheKey`] and safe to share between threads and processes.
//!
//! Layout: `<dir>/<kind>/<sha256 of the key>/<file>` plus `<file>.sum` (the file's length and
//! SHA-256, written after the file) and `<file>.lock`. Every write goes to a unique temp name
//! in the same folder, is fsynced and renamed into place, so a reader sees an old file or a
//! new one, never half of one. A hit is verified against the sidecar; a file that does not
//! match (truncated, flipped bits, no sidecar) is logged and rebuilt. Builders of one key take
//! the entry's lock, so concurrent builders wait and then find the entry built.
//!
//! The folder is `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `$HOME/.cache/kiln`. A
//! folder that cannot be written is an [`Error::Io`] the caller can report as a warning before
//! falling back to [`DiskCache::temp`].

mod entry;
mod key;

pub use key::CacheKey;

use entry::State;
use kiln_ir::{Error, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The name under which [`DiskCache::put_bytes`] stores a blob in its entry folder.
const BLOB: &str = "blob.bin";

/// How [`DiskCache::get_or_build`] got its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A valid entry was there (possibly just built by another thread or process).
    Hit,
    /// No entry: built now.
    Miss,
    /// An entry was there but corrupt (`reason`): rebuilt now.
    Rebuilt { reason: String },
}

/// A cache folder (see the module docs).
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    /// True for [`DiskCache::temp`] folders, deleted when the cache is dropped.
    remove_on_drop: bool,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Io(format!("{what} {}: {e}", path.display()))
}

impl DiskCache {
    /// The cache folder of this user: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else
    /// `$HOME/.cache/kiln` (created if needed). Errors when none is set or it is not writable.
    pub fn open_default() -> Result<DiskCache> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let dir = var("KILN_CACHE_DIR")
            .or_else(|| var("XDG_CACHE_HOME").filter(|p| p.is_absolute()).map(|p| p.join("kiln")))
            .or_else(|| var("HOME").map(|h| h.join(".cache").join("kiln")))
            .ok_or_else(|| {
                Error::Io("no cache directory: none of KILN_CACHE_DIR, XDG_CACHE_HOME, HOME is set; set KILN_CACHE_DIR".into())
            })?;
        DiskCache::open(dir)
    }

    /// The cache in folder `dir`, created if needed. Checks that it can be written (by
    /// creating and removing a probe file), so an unusable folder is reported once, here.
    pub fn open(dir: impl Into<PathBuf>) -> Result<DiskCache> {
        let dir = dir.into();
        let unusable = |e: std::io::Error| {
            Error::Io(format!(
                "cache directory {} is not usable ({e}); set KILN_CACHE_DIR to a writable directory, \
                 or build without a cache (DiskCache::temp)",
                dir.display()
            ))
        };
        fs::create_dir_all(&dir).map_err(unusable)?;
        let probe = entry::unique_tmp(&dir, "probe");
        fs::write(&probe, b"").map_err(unusable)?;
        let _ = fs::remove_file(&probe);
        Ok(DiskCache {
            dir,
            remove_on_drop: false,
        })
    }

    /// A cache in a fresh folder under the system temp folder, deleted when this value is
    /// dropped: the fallback when the user's cache folder is unusable. Paths it returns are
    /// valid only while it lives (a library already loaded from one stays loaded).
    pub fn temp() -> Result<DiskCache> {
        let dir = entry::unique_tmp(&std::env::temp_dir(), "kiln-cache");
        let mut cache = DiskCache::open(dir)?;
        cache.remove_on_drop = true;
        Ok(cache)
    }

    /// The cache's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of `key`'s entry.
    pub fn entry_dir(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(key.kind_dir()).join(key.hex())
    }

    /// The path of `key`'s file `file_name`, building it when there is no valid entry:
    /// `build` gets a temp path in the entry's folder and must write the file there (e.g. pass
    /// it to `cc -o`); it is then fsynced, renamed into place and its sidecar written. A build
    /// error is returned as is (nothing is left behind).
    pub fn get_or_build(
        &self,
        key: &CacheKey,
        file_name: &str,
        build: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<(PathBuf, CacheOutcome)> {
        check_file_name(file_name)?;
        let edir = self.entry_dir(key);
        let file = edir.join(file_name);
        if let State::Valid = entry::check(&file, None) {
            tracing::info!(target: "kiln::cache", "cache hit {} ({})", key.label(), file.display());
            return Ok((file, CacheOutcome::Hit));
        }
        fs::create_dir_all(&edir)
            .map_err(|e| io_err("cannot create cache entry folder", &edir, e))?;
        let _lock = entry::lock(&file).map_err(|e| io_err("cannot lock cache entry", &file, e))?;
        // Another builder may have finished while this one waited for the lock.
        let outcome = match entry::check(&file, None) {
            State::Valid => {
                tracing::info!(target: "kiln::cache", "cache hit {} ({}, built concurrently)", key.label(), file.display());
                return Ok((file, CacheOutcome::Hit));
            }
            State::Missing => CacheOutcome::Miss,
            State::Corrupt(reason) => {
                tracing::warn!(target: "kiln::cache", "cache entry {} ({}) is corrupt ({reason}), rebuilding", key.label(), file.display());
                CacheOutcome::Rebuilt { reason }
            }
        };
        let tmp = entry::unique_tmp(&edir, file_name);
        let built = build(&tmp).and_then(|()| {
            if tmp.is_file() {
                Ok(())
            } else {
                Err(Error::Io(format!(
                    "building cache entry {} did not write its file {}",
                    key.label(),
                    tmp.display()
                )))
            }
        });
        if let Err(e) = built {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        if let Err(e) = entry::publish(&tmp, &file) {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("cannot write cache entry", &file, e));
        }
        entry::write_sidecar(&file)
            .map_err(|e| io_err("cannot write the checksum of cache entry", &file, e))?;
        tracing::info!(target: "kiln::cache", "cache {} {} ({})", outcome_word(&outcome), key.label(), file.display());
        Ok((file, outcome))
    }

    /// The blob stored under `key` by [`DiskCache::put_bytes`], or `None` when there is none or
    /// it does not verify (logged; the caller recomputes and puts it again).
    pub fn get_bytes(&self, key: &CacheKey) -> Option<Vec<u8>> {
        let file = self.entry_dir(key).join(BLOB);
        let read = |file: &Path| match fs::read(file) {
            Ok(b) => {
                let state = entry::check(file, Some(&b));
                (b, state)
            }
            Err(_) => (Vec::new(), entry::check(file, None)),
        };
        let (mut bytes, mut state) = read(&file);
        if let State::Corrupt(_) = state {
            // A writer may be between the file and its sidecar: look again once it is done.
            if let Ok(_lock) = entry::lock(&file) {
                (bytes, state) = read(&file);
            }
        }
        match state {
            State::Valid => {
                tracing::info!(target: "kiln::cache", "cache hit {} ({} bytes)", key.label(), bytes.len());
                Some(bytes)
            }
            State::Missing => {
                tracing::info!(target: "kiln::cache", "cache miss {}", key.label());
                None
            }
            State::Corrupt(reason) => {
                tracing::warn!(target: "kiln::cache", "cache entry {} ({}) is corrupt ({reason}), ignoring it", key.label(), file.display());
                None
            }
        }
    }

    /// Stores `bytes` under `key` (replacing any old blob), atomically and with a checksum.
    pub fn put_bytes(&self, key: &CacheKey, bytes: &[u8]) -> Result<()> {
        let edir = self.entry_dir(key);
        let file = edir.join(BLOB);
        fs::create_dir_all(&edir)
            .map_err(|e| io_err("cannot create cache entry folder", &edir, e))?;
        let _lock = entry::lock(&file).map_err(|e| io_err("cannot lock cache entry", &file, e))?;
        entry::write_atomic(&file, bytes)
            .map_err(|e| io_err("cannot write cache entry", &file, e))?;
        entry::write_sidecar_for(&file, bytes)
            .map_err(|e| io_err("cannot write the checksum of cache entry", &file, e))?;
        tracing::info!(target: "kiln::cache", "cache store {} ({} bytes)", key.label(), bytes.len());
        Ok(())
    }
}

impl Drop for DiskCache {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn outcome_word(o: &CacheOutcome) -> &'static str {
    match o {
        CacheOutcome::Hit => "hit",
        CacheOutcome::Miss => "miss (built)",
        CacheOutcome::Rebuilt { .. } => "entry rebuilt",
    }
}

/// Entry file names are plain names: no folders, and no leading `.` (temp files use it).
fn check_file_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && !name.ends_with(".sum")
        && !name.ends_with(".lock")
        && name != BLOB;
    if ok {
        Ok(())
    } else {
        Err(Error::Value(format!(
            "cache file name {name:?} is not a plain file name (no '/', no leading '.', not ending in .sum or .lock, not {BLOB:?})"
        )))
    }
}
