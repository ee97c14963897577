//! The algorithms cuDNN's heuristic offers for a conv (`cudnnGetConvolutionForwardAlgorithm_v7`,
//! with their workspaces), remembered by the conv's signature: in the process, where ResNet-50's
//! 53 convs repeat 20 signatures, and in the disk cache, so a warm start asks cuDNN nothing.
//! The cache entry is one blob per device and cuDNN version holding every signature this
//! machine has planned; a process adds what it asked cuDNN for. Two processes adding at once
//! may drop one's additions: they are asked for again next time, never wrong.

use super::conv::MAX_WORKSPACE;
use crate::device::Gpu;
use cudarc::cudnn::sys::cudnnConvolutionFwdAlgo_t as Algo;
use kiln_ir::Result;
use kiln_sched::{CacheKey, DiskCache};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// An algorithm and the workspace bytes it needs, as the heuristic ranked them.
pub(crate) type Ranked = Vec<(Algo, usize)>;

#[derive(Default)]
struct Memo {
    /// Signature → the heuristic's ranking.
    map: HashMap<String, Ranked>,
    /// The cache entries already read into `map` (by folder and key).
    loaded: Vec<String>,
}

fn memo() -> std::sync::MutexGuard<'static, Memo> {
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    MEMO.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// The cache key of this device's rankings: they depend on the GPU and cuDNN (and on the
/// workspace limit the rankings were filtered by).
fn key(gpu: &Gpu) -> CacheKey {
    CacheKey::new("cudnn-conv-algos")
        .part("kiln", env!("CARGO_PKG_VERSION"))
        .part("device", format!("{} sm_{}", gpu.name(), gpu.sm()))
        .part("libraries", gpu.library_versions())
        .part("max-workspace", MAX_WORKSPACE.to_string())
}

/// Reads the rankings stored for `gpu` into the process's memo (once per cache entry).
pub(crate) fn load(cache: &DiskCache, gpu: &Gpu) {
    let key = key(gpu);
    let id = format!("{}:{}", cache.dir().display(), key.hex());
    if memo().loaded.contains(&id) {
        return;
    }
    let bytes = cache.get_bytes(&key);
    let mut m = memo();
    m.loaded.push(id);
    for (sig, ranked) in bytes.as_deref().map(parse).unwrap_or_default() {
        m.map.entry(sig).or_insert(ranked);
    }
}

/// Writes the memo back for `gpu` when it knows signatures the stored entry lacks (merged
/// with what another process may have stored meanwhile; a damaged entry is replaced). A failed
/// write is only logged: the rankings are asked for again next time.
pub(crate) fn store(cache: &DiskCache, gpu: &Gpu) {
    let key = key(gpu);
    let stored = cache.get_bytes(&key).as_deref().map(parse).unwrap_or_default();
    let text = {
        let mut m = memo();
        if m.map.keys().all(|sig| stored.iter().any(|(s, _)| s == sig)) {
            return;
        }
        for (sig, ranked) in stored {
            m.map.entry(sig).or_insert(ranked);
        }
        render(&m.map)
    };
    if let Err(e) = cache.put_bytes(&key, text.as_bytes()) {
        tracing::warn!(target: "kiln::cache", "could not store cuDNN's conv algorithms ({e}); they are asked for again next time");
    }
}

/// The ranking for `signature`: remembered, else `ask()`'s (then remembered).
pub(crate) fn ranked(signature: &str, ask: impl FnOnce() -> Result<Ranked>) -> Result<Ranked> {
    if let Some(r) = memo().map.get(signature) {
        return Ok(r.clone());
    }
    let r = ask()?;
    memo().map.insert(signature.to_string(), r.clone());
    Ok(r)
}

/// One line per signature: `signature \t algo:bytes algo:bytes ...`, sorted.
fn render(map: &HashMap<String, Ranked>) -> String {
    let mut lines: Vec<String> = map
        .iter()
        .map(|(sig, r)| {
            let algos: Vec<String> = r.iter().map(|(a, bytes)| format!("{}:{bytes}", *a as u32)).collect();
            format!("{sig}\t{}", algos.join(" "))
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// The lines [`render`] wrote; a line that does not read back (another kiln's format, a
/// damaged file that still passed its checksum) is skipped and asked for again.
fn parse(bytes: &[u8]) -> Vec<(String, Ranked)> {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .filter_map(|line| {
            let (sig, algos) = line.split_once('\t')?;
            let ranked = algos
                .split(' ')
                .map(|a| {
                    let (algo, bytes) = a.split_once(':')?;
                    Some((algo_of(algo.parse().ok()?)?, bytes.parse().ok()?))
                })
                .collect::<Option<Ranked>>()?;
            (!ranked.is_empty()).then(|| (sig.to_string(), ranked))
        })
        .collect()
}

/// The algorithm numbered `n` by cuDNN's `cudnnConvolutionFwdAlgo_t`.
fn algo_of(n: u32) -> Option<Algo> {
    use Algo::*;
    Some(match n {
        0 => CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        1 => CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        2 => CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
        3 => CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
        4 => CUDNN_CONVOLUTION_FWD_ALGO_FFT,
        5 => CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
        6 => CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
        7 => CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rankings_read_back_as_written_and_bad_lines_are_skipped() {
        let mut map = HashMap::new();
        map.insert("f32 x[1,2]".to_string(), vec![(Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, 4096), (Algo::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, 0)]);
        map.insert("f16 x[3]".to_string(), vec![(Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 0)]);
        let text = render(&map);
        let back: HashMap<String, Ranked> = parse(text.as_bytes()).into_iter().collect();
        assert_eq!(back, map);
        // An unknown algorithm, a missing size, no tab, an empty ranking: each line skipped.
        let damaged = format!("{text}\nsig a\t9:0\nsig b\t1:\nno tab here\nsig c\t");
        let back: HashMap<String, Ranked> = parse(damaged.as_bytes()).into_iter().collect();
        assert_eq!(back, map);
    }

    #[test]
    fn a_remembered_ranking_is_not_asked_again() {
        let sig = "test-only signature: a_remembered_ranking_is_not_asked_again";
        let first = ranked(sig, || Ok(vec![(Algo::CUDNN_CONVOLUTION_FWD_ALGO_GEMM, 7)])).unwrap();
        let second = ranked(sig, || panic!("asked cuDNN again for a remembered signature")).unwrap();
        assert_eq!(first, second);
        // An error is not remembered: the next ask runs.
        let sig2 = "test-only signature: errors are not remembered";
        assert!(ranked(sig2, || Err(kiln_ir::Error::Device("no".into()))).is_err());
        assert_eq!(ranked(sig2, || Ok(vec![(Algo::CUDNN_CONVOLUTION_FWD_ALGO_FFT, 1)])).unwrap().len(), 1);
    }
}
