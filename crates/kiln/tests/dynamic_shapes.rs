//! Size-generic code under dynamic dims: a compiled function's new sizes run on one C library
//! whose kernels take the sizes as arguments (no C compile per size), and equal eager.

mod support;

use support::capture::{assert_close, rand};
use kiln::capture::{CaptureOptions, Explanation, GenericInfo};
use kiln::compile::{CompileOptions, Mode};
use kiln::nn::{LayerNorm, Linear, Module, VarBuilder};
use kiln::zoo::{Model, bert, gpt2, resnet};
use kiln::{DType, Result, Tensor};
use std::path::{Path, PathBuf};

/// Compiled mode with a fresh cache directory (so its libraries can be counted).
fn opts(name: &str) -> (CaptureOptions, PathBuf) {
    let dir = std::env::temp_dir().join(format!("kiln-test-dynamic-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let compile = CompileOptions { mode: Mode::Default, cache_dir: Some(dir.clone()), ..CompileOptions::default() };
    (CaptureOptions { compile, ..CaptureOptions::default() }, dir)
}

/// Shared libraries the C compiler built into the cache at `dir`.
fn libraries(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("cpu-lib")).map(|d| d.count()).unwrap_or(0)
}


/// The entry's size-generic kernels: (symbols, sizes run on them, C source).
fn generic(e: &Explanation) -> (String, usize, String) {
    match &e.entries[0].generic {
        Some(GenericInfo::Built { symbols, sizes, source, .. }) => (symbols.clone(), *sizes, source.clone()),
        other => panic!("no size-generic kernels: {other:?}\n{e}"),
    }
}

/// Why the entry has no size-generic kernels.
fn refused(e: &Explanation) -> String {
    match &e.entries[0].generic {
        Some(GenericInfo::Refused(why)) => why.clone(),
        other => panic!("size-generic kernels where none were expected: {other:?}\n{e}"),
    }
}

/// An MLP block: linear, GELU, linear, residual, layer norm, softmax.
struct Block {
    up: Linear,
    down: Linear,
    norm: LayerNorm,
}

impl Module for Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.down.forward(&self.up.forward(x)?.gelu()?)?;
        self.norm.forward(&h.add(x)?)?.softmax(-1)
    }
}

fn block() -> Block {
    let vb = VarBuilder::random(5, DType::F32);
    Block {
        up: Linear::new(vb.pp("up"), 16, 24, true).unwrap(),
        down: Linear::new(vb.pp("down"), 24, 16, true).unwrap(),
        norm: LayerNorm::new(vb.pp("norm"), 16, 1e-5).unwrap(),
    }
}

#[test]
fn new_batch_sizes_run_on_one_library_whose_kernels_take_the_size() {
    let (o, dir) = opts("block");
    let m = block();
    let fast = kiln::compile_module(&m).options(o).mark_dynamic(0, 0);
    let sizes = [4, 2, 3, 5, 17, 64, 4, 3];
    for (i, b) in sizes.into_iter().enumerate() {
        let x = rand(&[b, 16], i as u64);
        assert_close(&fast.call(&x).unwrap(), &m.forward(&x).unwrap(), 1e-5);
    }
    let e = fast.explain();
    let (symbols, served, source) = generic(&e);
    assert_eq!(symbols, "s0 = input 0 dim 0");
    // Six distinct sizes, all on the generic library; the C compiler ran once.
    assert_eq!((e.recompiles.len(), e.specialisations, served, e.entries[0].sizes), (0, 0, 6, 6), "{e}");
    assert_eq!(libraries(&dir), 1, "{e}");
    // The kernels read the size and loop to a multiple of it.
    assert!(source.contains("const int64_t s0 = sizes[0];"), "{source}");
    assert!(source.contains("(s0*16)"), "{source}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_dim_seen_with_two_sizes_moves_to_the_generic_library() {
    let (o, dir) = opts("auto");
    let f = |x: &Tensor| x.mul_scalar(3.0)?.exp()?.sum(&[1], false);
    let fast = kiln::compile(f).options(o);
    for b in [2, 3, 4, 9, 2] {
        let x = rand(&[b, 8], b as u64);
        assert_close(&fast.call(&x).unwrap(), &f(&x).unwrap(), 1e-5);
    }
    let e = fast.explain();
    assert_eq!(e.recompiles.len(), 1, "{e}");
    // Size 2's own library, then one generic library for 3, 4 and 9.
    let (_, served, _) = generic(&e);
    assert_eq!((served, e.specialisations, libraries(&dir)), (3, 0, 2), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn size_one_and_sizes_off_the_template_compile_on_their_own_and_stay_correct() {
    let (o, dir) = opts("one");
    // Broadcasting a [b, 1] column against [1, b]: at b = 1 the scheduler sees a size-1 view.
    let f = |x: &Tensor| x.unsqueeze(1)?.sub(&x.unsqueeze(0)?)?.abs()?.sum(&[1], false);
    let fast = kiln::compile(f).options(o).mark_dynamic(0, 0);
    for b in [3, 1, 6, 2] {
        let x = rand(&[b], b as u64);
        assert_close(&fast.call(&x).unwrap(), &f(&x).unwrap(), 1e-5);
    }
    let e = fast.explain();
    let (_, served, source) = generic(&e);
    // The quadratic [b, b] loop: its extent is s0*s0 or a loop per symbol, never a literal.
    assert!(served + e.specialisations == 4 && served >= 3, "{e}\n{source}");
    assert_eq!(libraries(&dir), 1 + e.specialisations, "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_function_that_reads_data_has_no_generic_library_and_stays_correct() {
    let (o, _dir) = opts("break");
    let f = |x: &Tensor| -> Result<Tensor> {
        let m = x.max(&[0], false)?.item()?;
        x.add_scalar(-m)
    };
    let fast = kiln::compile(f).options(o).mark_dynamic(0, 0);
    for b in [3, 5] {
        let x = rand(&[b], b as u64);
        assert_close(&fast.call(&x).unwrap(), &f(&x).unwrap(), 1e-6);
    }
    let why = refused(&fast.explain());
    assert!(why.contains("placeholders"), "{why}");
}

fn tiny_resnet() -> resnet::ResNetConfig {
    resnet::ResNetConfig { block: resnet::BlockKind::Bottleneck, layers: [1, 1, 1, 1], base_width: 8, num_classes: 7, image_size: 32 }
}

/// `m.forward` compiled with every input dim dynamic, called at `shapes` (one input set each):
/// equal to eager, every size after the first on the generic library.
fn check_zoo(m: &dyn Model, calls: &[(usize, usize)], inputs: impl Fn(usize, usize, u64) -> Vec<Tensor>, want_symbols: &str) {
    let (o, dir) = opts(m.name());
    let fast = kiln::compile_many(|xs: &[Tensor]| m.forward(xs)).options(o).dynamic(true);
    for (i, &(a, b)) in calls.iter().enumerate() {
        let xs = inputs(a, b, i as u64);
        let (got, want) = (fast.call_many(&xs).unwrap(), m.forward(&xs).unwrap());
        for (g, w) in got.iter().zip(&want) {
            assert_close(g, w, 1e-4);
        }
    }
    let e = fast.explain();
    let (symbols, served, _) = generic(&e);
    assert_eq!(symbols, want_symbols, "{}: {e}", m.name());
    assert_eq!((e.recompiles.len(), e.specialisations, served, libraries(&dir)), (0, 0, calls.len(), 1), "{}: {e}", m.name());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn zoo_models_run_every_batch_and_sequence_on_one_library() {
    let rn = resnet::ResNet::new(VarBuilder::random(1, DType::F32), &tiny_resnet(), 2).unwrap();
    check_zoo(&rn, &[(2, 0), (3, 0), (5, 0)], |b, _, s| vec![kiln::zoo::random_normal(&[b, 3, 32, 32], DType::F32, s).unwrap()], "s0 = input 0 dim 0");
    let gpt = gpt2::Gpt2::new(VarBuilder::random(1, DType::F32), &gpt2::Gpt2Config::tiny(), 2, 5).unwrap();
    check_zoo(&gpt, &[(2, 5), (3, 5), (2, 9), (4, 7)], |b, t, s| vec![kiln::zoo::random_ids(&[b, t], 100, s).unwrap()], "s0 = input 0 dim 0; s1 = input 0 dim 1");
    let bert = bert::Bert::new(VarBuilder::random(1, DType::F32), &bert::BertConfig::tiny(), 2, 7).unwrap();
    check_zoo(&bert, &[(2, 7), (3, 4), (5, 11)], |b, t, s| vec![kiln::zoo::random_ids(&[b, t], 100, s).unwrap()], "s0 = input 0 dim 0; s1 = input 0 dim 1");
}

#[test]
fn a_function_that_panics_at_other_sizes_keeps_its_dim_fixed() {
    let (o, _dir) = opts("panics");
    // Only even batches are valid to this function; the probe at an odd size must not crash.
    let f = |x: &Tensor| -> Result<Tensor> {
        assert!(x.shape()[1] % 2 == 0, "even widths only");
        x.mul_scalar(2.0)
    };
    let fast = kiln::compile(f).options(o).mark_dynamic(0, 1);
    for w in [4, 6] {
        let x = rand(&[3, w], w as u64);
        assert_close(&fast.call(&x).unwrap(), &f(&x).unwrap(), 1e-6);
    }
    let why = refused(&fast.explain());
    assert!(why.contains("can change size on its own"), "{why}");
}

#[test]
fn eager_mode_has_no_generic_library_and_says_why() {
    let (o, _dir) = opts("eager");
    let f = |x: &Tensor| x.exp();
    let fast = kiln::compile(f).options(o).mode(Mode::Eager).mark_dynamic(0, 0);
    for b in [2, 3] {
        let x = rand(&[b], b as u64);
        assert_close(&fast.call(&x).unwrap(), &f(&x).unwrap(), 1e-6);
    }
    let why = refused(&fast.explain());
    assert!(why.contains("for the CPU in default mode (not cpu in eager mode)"), "{why}");
}
