//! One cache file on disk: atomic publication (unique temp name in the same folder, fsync,
//! rename), its checksum sidecar, verification, and the per-entry lock that makes concurrent
//! builders of one key wait for each other instead of racing.

use super::key::to_hex;
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const SIDECAR_HEADER: &str = "kiln-cache-entry v1";

/// What a look at an entry found.
pub(crate) enum State {
    /// Neither the file nor its sidecar exists.
    Missing,
    /// The file matches its sidecar.
    Valid,
    /// Something exists but does not verify; the reason, for the warning.
    Corrupt(String),
}

/// The sidecar of `file`: `<file>.sum`, holding the file's length and SHA-256.
pub(crate) fn sidecar_of(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".sum");
    PathBuf::from(s)
}

/// A fresh path in `dir` for building `name` before it is renamed into place: process id,
/// a process-wide counter and random bits, so threads and processes never collide.
pub(crate) fn unique_tmp(dir: &Path, name: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // RandomState is seeded per process from the OS; mixing in the time guards against a
    // platform where it is not.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    dir.join(format!(
        ".tmp-{}-{n}-{:016x}-{name}",
        std::process::id(),
        h.finish()
    ))
}

/// Makes `tmp` durable and renames it to `dst` (atomically replacing any old file), then
/// syncs the folder so the rename itself survives a crash.
pub(crate) fn publish(tmp: &Path, dst: &Path) -> io::Result<()> {
    File::open(tmp)?.sync_all()?;
    fs::rename(tmp, dst)?;
    if let Some(dir) = dst.parent() {
        // Not every filesystem can sync a folder; the entry is still valid without it.
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Writes `bytes` to `dst` atomically (temp file, fsync, rename).
pub(crate) fn write_atomic(dst: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = dst.parent().unwrap_or(Path::new("."));
    let name = dst.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = unique_tmp(dir, name);
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        drop(f);
        publish(&tmp, dst)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Length and SHA-256 (hex) of a file, read in blocks.
fn digest_file(path: &Path) -> io::Result<(u64, String)> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        len += n as u64;
    }
    Ok((len, to_hex(&h.finalize())))
}

fn sidecar_text(len: u64, sha: &str) -> String {
    format!("{SIDECAR_HEADER}\nlen {len}\nsha256 {sha}\n")
}

/// Writes the sidecar of `file` (already in place) from its current contents.
pub(crate) fn write_sidecar(file: &Path) -> io::Result<()> {
    let (len, sha) = digest_file(file)?;
    write_atomic(&sidecar_of(file), sidecar_text(len, &sha).as_bytes())
}

/// Writes the sidecar of a file whose contents are `bytes`.
pub(crate) fn write_sidecar_for(file: &Path, bytes: &[u8]) -> io::Result<()> {
    let sha = to_hex(&Sha256::digest(bytes));
    write_atomic(
        &sidecar_of(file),
        sidecar_text(bytes.len() as u64, &sha).as_bytes(),
    )
}

/// The (length, sha256) a sidecar records, or why it cannot be read.
fn read_sidecar(file: &Path) -> Result<Option<(u64, String)>, String> {
    let text = match fs::read_to_string(sidecar_of(file)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("its checksum sidecar cannot be read: {e}")),
    };
    let mut lines = text.lines();
    let parsed = (|| {
        (lines.next()? == SIDECAR_HEADER).then_some(())?;
        let len = lines.next()?.strip_prefix("len ")?.parse().ok()?;
        let sha = lines.next()?.strip_prefix("sha256 ")?;
        (sha.len() == 64).then(|| (len, sha.to_string()))
    })();
    parsed
        .map(Some)
        .ok_or_else(|| "its checksum sidecar is malformed".to_string())
}

/// Compares what is on disk with its sidecar. `contents` is the file's bytes when the caller
/// already read them (small blobs), so the file is not read twice.
pub(crate) fn check(file: &Path, contents: Option<&[u8]>) -> State {
    let meta = match fs::metadata(file) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return State::Corrupt(format!("the file cannot be read: {e}")),
    };
    let expected = match read_sidecar(file) {
        Ok(s) => s,
        Err(reason) => return State::Corrupt(reason),
    };
    let (meta, (len, sha)) = match (meta, expected) {
        (None, None) => return State::Missing,
        (None, Some(_)) => {
            return State::Corrupt("the file is missing but its checksum sidecar is there".into());
        }
        (Some(_), None) => return State::Corrupt("its checksum sidecar is missing".into()),
        (Some(m), Some(e)) => (m, e),
    };
    if meta.len() != len {
        return State::Corrupt(format!(
            "the file is {} bytes, its sidecar says {len}",
            meta.len()
        ));
    }
    let actual = match contents {
        Some(b) => to_hex(&Sha256::digest(b)),
        None => match digest_file(file) {
            Ok((_, s)) => s,
            Err(e) => return State::Corrupt(format!("the file cannot be read: {e}")),
        },
    };
    if actual != sha {
        return State::Corrupt("its sha256 does not match its sidecar".into());
    }
    State::Valid
}

/// Holds the exclusive lock of one entry until dropped (the OS releases it with the file).
pub(crate) struct EntryLock(#[allow(dead_code)] Option<File>);

/// Takes the exclusive lock of entry file `file` (`<file>.lock`), blocking while another thread
/// or process holds it. On a filesystem without locks it returns an empty guard: builders may
/// then race, which stays safe (each build is renamed into place whole) but may build twice.
pub(crate) fn lock(file: &Path) -> io::Result<EntryLock> {
    let mut p = file.as_os_str().to_owned();
    p.push(".lock");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(PathBuf::from(p))?;
    match f.lock() {
        Ok(()) => Ok(EntryLock(Some(f))),
        Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(EntryLock(None)),
        Err(e) => Err(e),
    }
}
