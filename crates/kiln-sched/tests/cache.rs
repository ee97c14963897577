//! The on-disk cache: hits after misses, corruption detected and rebuilt, concurrent builders
//! (threads and processes) of one key, key sensitivity, unusable folders.

use kiln_ir::Error;
use kiln_sched::{CacheKey, CacheOutcome, DiskCache};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

/// Set in child processes spawned by `two_processes_and_eight_threads_build_one_key`.
const CHILD_ENV: &str = "KILN_CACHE_TEST_CHILD_DIR";

/// A fresh folder under the system temp folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let p = std::env::temp_dir().join(format!(
            "kiln-cache-test-{tag}-{}-{n}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn key() -> CacheKey {
    CacheKey::new("cpu-lib")
        .part("graph", [7u8; 32])
        .part("kiln", env!("CARGO_PKG_VERSION"))
        .part("cc", "gcc 14")
}

/// The content every builder of [`key`] writes: big enough to span several read blocks.
fn payload() -> Vec<u8> {
    (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn write_payload(p: &Path) -> kiln_ir::Result<()> {
    std::fs::write(p, payload()).map_err(Error::from)
}

fn build_counting(cache: &DiskCache, calls: &AtomicUsize) -> (PathBuf, CacheOutcome) {
    cache
        .get_or_build(&key(), "lib.so", |p| {
            calls.fetch_add(1, Ordering::SeqCst);
            write_payload(p)
        })
        .unwrap()
}

#[test]
fn hit_after_miss_does_not_build_again() {
    let dir = TempDir::new("hit");
    let cache = DiskCache::open(&dir.0).unwrap();
    let calls = AtomicUsize::new(0);
    let (path, outcome) = build_counting(&cache, &calls);
    assert_eq!(outcome, CacheOutcome::Miss);
    assert_eq!(std::fs::read(&path).unwrap(), payload());
    assert!(path.starts_with(&dir.0) && path.ends_with("lib.so"));
    let (again, outcome) = build_counting(&cache, &calls);
    assert_eq!((again, outcome), (path.clone(), CacheOutcome::Hit));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // A second handle on the same folder (another process, later) hits too.
    let (_, outcome) = build_counting(&DiskCache::open(&dir.0).unwrap(), &calls);
    assert_eq!(outcome, CacheOutcome::Hit);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // No temp files are left behind.
    let names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with(".tmp")), "{names:?}");
}

fn assert_rebuilt(cache: &DiskCache, damage: impl FnOnce(&Path), reason_has: &str) {
    let calls = AtomicUsize::new(0);
    let (path, _) = build_counting(cache, &calls);
    damage(&path);
    let (path, outcome) = build_counting(cache, &calls);
    match outcome {
        CacheOutcome::Rebuilt { reason } => assert!(reason.contains(reason_has), "{reason}"),
        other => panic!("expected a rebuild, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), payload());
    let (_, outcome) = build_counting(cache, &calls);
    assert_eq!(outcome, CacheOutcome::Hit, "the rebuilt entry verifies");
}

#[test]
fn corrupt_entries_are_detected_and_rebuilt() {
    let dir = TempDir::new("corrupt");
    let cache = DiskCache::open(&dir.0).unwrap();
    let sidecar = |p: &Path| PathBuf::from(format!("{}.sum", p.display()));
    assert_rebuilt(
        &cache,
        |p| std::fs::write(p, &payload()[..1000]).unwrap(),
        "bytes",
    );
    assert_rebuilt(
        &cache,
        |p| {
            let mut b = std::fs::read(p).unwrap();
            b[123_456] ^= 0x10;
            std::fs::write(p, b).unwrap();
        },
        "sha256",
    );
    assert_rebuilt(
        &cache,
        |p| std::fs::remove_file(sidecar(p)).unwrap(),
        "sidecar is missing",
    );
    assert_rebuilt(
        &cache,
        |p| std::fs::write(sidecar(p), "garbage").unwrap(),
        "malformed",
    );
    assert_rebuilt(
        &cache,
        |p| std::fs::remove_file(p).unwrap(),
        "file is missing",
    );
    assert_rebuilt(&cache, |p| std::fs::write(p, b"").unwrap(), "bytes");
}

#[test]
fn failed_build_leaves_nothing_and_is_retried() {
    let dir = TempDir::new("fail");
    let cache = DiskCache::open(&dir.0).unwrap();
    let err = cache
        .get_or_build(&key(), "lib.so", |_| {
            Err(Error::Unsupported("cc failed".into()))
        })
        .unwrap_err();
    assert!(err.to_string().contains("cc failed"));
    // A build that "succeeds" without writing its file is an error too.
    let err = cache
        .get_or_build(&key(), "lib.so", |_| Ok(()))
        .unwrap_err();
    assert!(err.to_string().contains("did not write"), "{err}");
    let calls = AtomicUsize::new(0);
    assert_eq!(build_counting(&cache, &calls).1, CacheOutcome::Miss);
}

#[test]
fn bad_file_names_are_refused() {
    let dir = TempDir::new("names");
    let cache = DiskCache::open(&dir.0).unwrap();
    for name in [
        "",
        "../x.so",
        "a/b.so",
        ".hidden",
        "lib.so.sum",
        "lib.so.lock",
    ] {
        let r = cache.get_or_build(&key(), name, write_payload);
        assert!(matches!(r, Err(Error::Value(_))), "{name:?}: {r:?}");
    }
}

/// In a child process: build [`key`] in the folder named by [`CHILD_ENV`] and verify it.
#[test]
fn child_process_entry() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let cache = DiskCache::open(PathBuf::from(dir)).unwrap();
    let (path, _) = cache.get_or_build(&key(), "lib.so", write_payload).unwrap();
    assert_eq!(std::fs::read(path).unwrap(), payload());
}

#[test]
fn two_processes_and_eight_threads_build_one_key() {
    let dir = TempDir::new("race");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "child_process_entry", "--test-threads=1"])
                .env(CHILD_ENV, &dir.0)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (dir, calls, barrier) = (dir.0.clone(), calls.clone(), barrier.clone());
            std::thread::spawn(move || {
                let cache = DiskCache::open(&dir).unwrap();
                barrier.wait();
                let (path, outcome) = cache
                    .get_or_build(&key(), "lib.so", |p| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        // Slow builder: the others must wait or race, never see half a file.
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        write_payload(p)
                    })
                    .unwrap();
                assert_eq!(std::fs::read(&path).unwrap(), payload());
                outcome
            })
        })
        .collect();
    let outcomes: Vec<CacheOutcome> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a child builder failed");
    }
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, CacheOutcome::Hit | CacheOutcome::Miss)),
        "{outcomes:?}"
    );
    // The entry lock serialises builders: at most one build per process.
    assert!(calls.load(Ordering::SeqCst) <= 1);
    let cache = DiskCache::open(&dir.0).unwrap();
    let (_, outcome) = cache
        .get_or_build(&key(), "lib.so", |_| panic!("the entry must verify"))
        .unwrap();
    assert_eq!(outcome, CacheOutcome::Hit);
}

#[test]
fn key_changes_with_every_part() {
    let base = || {
        CacheKey::new("cpu-lib")
            .part("graph", [1u8, 2, 3])
            .part("kiln", "0.1.0")
            .part("cc", "gcc")
    };
    let h = base().hex();
    assert_eq!(h, base().hex(), "deterministic");
    assert_eq!(h.len(), 64);
    assert!(
        h.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(base().short(), h[..12]);
    let variants = [
        CacheKey::new("cuda-lib")
            .part("graph", [1u8, 2, 3])
            .part("kiln", "0.1.0")
            .part("cc", "gcc"),
        CacheKey::new("cpu-lib")
            .part("graph", [1u8, 2, 4])
            .part("kiln", "0.1.0")
            .part("cc", "gcc"),
        CacheKey::new("cpu-lib")
            .part("graph", [1u8, 2, 3])
            .part("kiln", "0.1.1")
            .part("cc", "gcc"),
        CacheKey::new("cpu-lib")
            .part("graph", [1u8, 2, 3])
            .part("kiln", "0.1.0")
            .part("cc", "clang"),
        CacheKey::new("cpu-lib")
            .part("graph", [1u8, 2, 3])
            .part("kiln", "0.1.0")
            .part("CC", "gcc"),
        CacheKey::new("cpu-lib")
            .part("graph", [1u8, 2, 3])
            .part("kiln", "0.1.0"),
        base().part("flags", ""),
        // Bytes moved between a name and its value.
        CacheKey::new("cpu-lib")
            .part("graph", [1u8, 2, 3])
            .part("kiln", "0.1.0")
            .part("c", "cgcc"),
        // Parts in another order.
        CacheKey::new("cpu-lib")
            .part("kiln", "0.1.0")
            .part("graph", [1u8, 2, 3])
            .part("cc", "gcc"),
    ];
    let mut all: Vec<String> = variants.iter().map(CacheKey::hex).collect();
    all.push(h);
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "every variant gives its own key");
    assert_eq!(base().part_names(), ["graph", "kiln", "cc"]);
}

#[test]
fn different_keys_get_different_entries() {
    let dir = TempDir::new("keys");
    let cache = DiskCache::open(&dir.0).unwrap();
    let (a, _) = cache
        .get_or_build(&key(), "lib.so", |p| {
            std::fs::write(p, b"a").map_err(Error::from)
        })
        .unwrap();
    let other = key().part("opt", "O2");
    let (b, o) = cache
        .get_or_build(&other, "lib.so", |p| {
            std::fs::write(p, b"b").map_err(Error::from)
        })
        .unwrap();
    assert_eq!(o, CacheOutcome::Miss);
    assert_ne!(a, b);
    assert_eq!(std::fs::read(a).unwrap(), b"a");
    assert_eq!(std::fs::read(b).unwrap(), b"b");
}

#[test]
fn bytes_round_trip_and_verify() {
    let dir = TempDir::new("bytes");
    let cache = DiskCache::open(&dir.0).unwrap();
    let k = CacheKey::new("autotune")
        .part("kernel", "k3_add_relu")
        .part("cpu", "x86-64-v4");
    assert_eq!(cache.get_bytes(&k), None);
    cache.put_bytes(&k, b"tile=64").unwrap();
    assert_eq!(cache.get_bytes(&k).as_deref(), Some(&b"tile=64"[..]));
    cache.put_bytes(&k, b"").unwrap();
    assert_eq!(
        cache.get_bytes(&k).as_deref(),
        Some(&b""[..]),
        "an empty blob is a hit, not a miss"
    );
    cache.put_bytes(&k, b"tile=128").unwrap();
    assert_eq!(
        cache.get_bytes(&k).as_deref(),
        Some(&b"tile=128"[..]),
        "put replaces"
    );
    assert_eq!(cache.get_bytes(&k.clone().part("v", "2")), None);
    // Flip a byte: the blob no longer verifies and reads as absent.
    let blob = cache.entry_dir(&k).join("blob.bin");
    std::fs::write(&blob, b"tile=129").unwrap();
    assert_eq!(cache.get_bytes(&k), None);
    std::fs::write(&blob, b"tile=12").unwrap();
    assert_eq!(cache.get_bytes(&k), None);
    cache.put_bytes(&k, b"tile=32").unwrap();
    assert_eq!(cache.get_bytes(&k).as_deref(), Some(&b"tile=32"[..]));
    std::fs::remove_file(format!("{}.sum", blob.display())).unwrap();
    assert_eq!(cache.get_bytes(&k), None);
}

#[test]
fn unwritable_dir_is_a_clear_error_and_temp_works() {
    let dir = TempDir::new("ro");
    // A path under a regular file can never be created, even by root.
    let file = dir.0.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let err = DiskCache::open(file.join("cache")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Io(_)), "{msg}");
    assert!(
        msg.contains("not-a-dir")
            && msg.contains("KILN_CACHE_DIR")
            && msg.contains("DiskCache::temp"),
        "{msg}"
    );
    let tmp = DiskCache::temp().unwrap();
    let tdir = tmp.dir().to_path_buf();
    let calls = AtomicUsize::new(0);
    let (path, outcome) = build_counting(&tmp, &calls);
    assert_eq!(outcome, CacheOutcome::Miss);
    assert!(path.starts_with(&tdir));
    drop(tmp);
    assert!(!tdir.exists(), "the temp cache is removed when dropped");
}

#[cfg(unix)]
#[test]
fn read_only_dir_is_an_error_unless_root() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("perm");
    let ro = dir.0.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root ignores permissions; then there is nothing to test here.
    let root_can_write = std::fs::write(ro.join("probe"), b"").is_ok();
    if !root_can_write {
        let err = DiskCache::open(&ro).unwrap_err();
        assert!(err.to_string().contains("not usable"), "{err}");
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Set in child processes spawned by `default_dir_follows_the_environment`: the folder
/// `open_default` must pick under the environment the parent gave.
const EXPECT_ENV: &str = "KILN_CACHE_TEST_EXPECT_DIR";

/// In a child process: checks `DiskCache::open_default` against [`EXPECT_ENV`].
#[test]
fn default_dir_child() {
    let Some(expect) = std::env::var_os(EXPECT_ENV) else {
        return;
    };
    assert_eq!(DiskCache::open_default().unwrap().dir(), Path::new(&expect));
}

#[test]
fn default_dir_follows_the_environment() {
    // Each case runs in a child process, so no thread of this one sees the environment change.
    let dir = TempDir::new("env");
    let (explicit, xdg, home) = (
        dir.0.join("explicit"),
        dir.0.join("xdg"),
        dir.0.join("home"),
    );
    let cases: [(Vec<(&str, &Path)>, PathBuf); 4] = [
        (
            vec![
                ("KILN_CACHE_DIR", &explicit),
                ("XDG_CACHE_HOME", &xdg),
                ("HOME", &home),
            ],
            explicit.clone(),
        ),
        (
            vec![("XDG_CACHE_HOME", &xdg), ("HOME", &home)],
            xdg.join("kiln"),
        ),
        (
            vec![("KILN_CACHE_DIR", Path::new("")), ("HOME", &home)],
            home.join(".cache").join("kiln"),
        ),
        (
            vec![("XDG_CACHE_HOME", Path::new("relative")), ("HOME", &home)],
            home.join(".cache").join("kiln"),
        ),
    ];
    for (vars, expect) in cases {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "default_dir_child"])
            .stdout(std::process::Stdio::null());
        for v in ["KILN_CACHE_DIR", "XDG_CACHE_HOME", "HOME", CHILD_ENV] {
            cmd.env_remove(v);
        }
        for (k, v) in &vars {
            cmd.env(k, v);
        }
        cmd.env(EXPECT_ENV, &expect);
        assert!(
            cmd.status().unwrap().success(),
            "open_default under {vars:?} should pick {expect:?}"
        );
    }
}
