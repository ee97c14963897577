//! API keys: `Authorization: Bearer KEY`, compared in constant time. Keys are kept only as
//! SHA-256 digests, so comparing never depends on a key's length or content, and no key is
//! ever logged or echoed.

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{ServeError, ServeResult};

/// The accepted keys (as digests). Without keys every request is let through.
pub struct Auth {
    digests: Vec<[u8; 32]>,
}

fn digest(s: &[u8]) -> [u8; 32] {
    Sha256::digest(s).into()
}

impl Auth {
    /// Accepts `keys`; none means no authentication.
    pub fn new(keys: &[String]) -> Auth {
        Auth { digests: keys.iter().map(|k| digest(k.as_bytes())).collect() }
    }

    /// Whether keys are required.
    pub fn enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    /// Checks the request's bearer key. Returns which key it is (its index), `None` when
    /// authentication is off; every key is compared, so the time does not say which matched.
    pub fn check(&self, headers: &HeaderMap) -> ServeResult<Option<usize>> {
        if !self.enabled() {
            return Ok(None);
        }
        let given = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| ServeError::Unauthorized("missing API key: send the header 'Authorization: Bearer <key>'".into()))?;
        let d = digest(given.trim().as_bytes());
        let mut found: Option<usize> = None;
        for (i, k) in self.digests.iter().enumerate() {
            if bool::from(k.ct_eq(&d)) {
                found = Some(i);
            }
        }
        found.map(Some).ok_or_else(|| ServeError::Unauthorized("invalid API key".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(axum::http::header::AUTHORIZATION, v.parse().unwrap());
        h
    }

    #[test]
    fn bearer_keys_are_checked_and_never_echoed() {
        let a = Auth::new(&["k1".into(), "k2".into()]);
        assert_eq!(a.check(&headers("Bearer k2")), Ok(Some(1)));
        let e = a.check(&headers("Bearer wrong-key")).unwrap_err();
        assert!(!e.to_string().contains("wrong-key"));
        assert!(a.check(&headers("Basic k1")).is_err());
        assert!(a.check(&HeaderMap::new()).is_err());
        assert_eq!(Auth::new(&[]).check(&HeaderMap::new()), Ok(None));
    }
}
