//! [`CacheKey`]: what a cache entry depends on, as named parts hashed into one SHA-256.

use sha2::{Digest, Sha256};

/// The identity of a cache entry: a kind (`"cpu-lib"`, `"autotune"`) and named parts (the
/// graph hash, kiln's version, the compiler's identity, flags...). Any change to a part's
/// name or value gives a different key, so stale entries are never read, only left behind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    kind: String,
    parts: Vec<(String, Vec<u8>)>,
}

impl CacheKey {
    /// A key of kind `kind` with no parts yet; the kind also names the entry's folder.
    pub fn new(kind: impl Into<String>) -> CacheKey {
        CacheKey {
            kind: kind.into(),
            parts: Vec::new(),
        }
    }

    /// The key with one more part: `value` is raw bytes (a hash) or text (a version).
    pub fn part(mut self, name: impl Into<String>, value: impl AsRef<[u8]>) -> CacheKey {
        self.parts.push((name.into(), value.as_ref().to_vec()));
        self
    }

    /// The kind given to [`CacheKey::new`].
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The parts' names, in order (for logs).
    pub fn part_names(&self) -> Vec<&str> {
        self.parts.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The SHA-256 of the kind and the parts, as 64 lowercase hex digits. Every field is
    /// length-prefixed, so moving bytes between a name and a value changes the hash.
    pub fn hex(&self) -> String {
        let mut h = Sha256::new();
        let mut field = |b: &[u8]| {
            h.update((b.len() as u64).to_le_bytes());
            h.update(b);
        };
        field(b"kiln-cache-key v1");
        field(self.kind.as_bytes());
        for (name, value) in &self.parts {
            field(name.as_bytes());
            field(value);
        }
        to_hex(&h.finalize())
    }

    /// The first 12 hex digits of [`CacheKey::hex`], enough to tell entries apart in logs.
    pub fn short(&self) -> String {
        self.hex()[..12].to_string()
    }

    /// The kind as a folder name: ASCII letters, digits, `-` and `_` kept, others `_`.
    pub(crate) fn kind_dir(&self) -> String {
        let s: String = self
            .kind
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if s.is_empty() { "entry".to_string() } else { s }
    }

    /// `kind[part,part,..] shorthash`, how logs name the key.
    pub(crate) fn label(&self) -> String {
        format!(
            "{}[{}] {}",
            self.kind,
            self.part_names().join(","),
            self.short()
        )
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
