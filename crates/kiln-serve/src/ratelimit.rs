//! Per-key rate limits: a token bucket per client (API key, or address without keys) that
//! holds up to one second's worth of requests and refills at the configured rate.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Token buckets by client.
pub struct RateLimiter {
    rate: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

/// Most clients tracked; past this, buckets idle for over a minute are dropped, so memory
/// stays bounded whatever addresses connect.
const MAX_CLIENTS: usize = 10_000;

impl RateLimiter {
    /// `rate` requests per second per client, bursts of up to `max(rate, 1)`.
    pub fn new(rate: f64) -> RateLimiter {
        RateLimiter { rate, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes a token for `client`: `Ok`, or `Err(seconds)` to wait before retrying (at least 1).
    pub fn take(&self, client: &str) -> Result<(), u64> {
        let now = Instant::now();
        let burst = self.rate.max(1.0);
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_CLIENTS && !buckets.contains_key(client) {
            buckets.retain(|_, (_, t)| now.duration_since(*t).as_secs() < 60);
        }
        let (tokens, last) = buckets.entry(client.to_string()).or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * self.rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *tokens) / self.rate).ceil().max(1.0) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_says_when_to_retry() {
        let l = RateLimiter::new(2.0);
        assert!(l.take("a").is_ok() && l.take("a").is_ok());
        assert_eq!(l.take("a"), Err(1));
        assert!(l.take("b").is_ok(), "clients have their own buckets");
        let slow = RateLimiter::new(0.1);
        assert!(slow.take("a").is_ok());
        assert_eq!(slow.take("a"), Err(10));
    }
}
