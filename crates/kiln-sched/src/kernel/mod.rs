//! The kernel IR: one fused kernel at loop level.
//!
//! A [`Kernel`] reads and writes flat buffers ([`Arg`]s, element-indexed, dense). Its
//! iteration domain is a nest of `outer` loops, whose points are independent (a renderer may
//! run them in parallel, in any order); at each outer point the [`Stage`]s run in order, each
//! over its own inner loops: a [`Stage::Reduce`] folds a value into a local scalar, a
//! [`Stage::Store`] writes a value to a buffer. Values are a DAG of scalar [`Expr`]s held in
//! [`Kernel::exprs`]; indices are integer [`Idx`] expressions over loop variables.
//!
//! Shapes of this IR cover every fusion the scheduler makes:
//! - pointwise chain: outer = output dims, one `Store` stage without inner loops;
//! - siblings fused horizontally: several `Store` stages over the same outer domain;
//! - reduction with producers: outer = kept dims, `Reduce` over the reduced dims, then `Store`
//!   of the local (and consumers of it, as later stages over their own loops);
//! - softmax / layer norm in one kernel: outer = rows, `Reduce` max, `Reduce` sum, `Store`
//!   over the row.
//!
//! Semantics: an expression's value is computed in its [`ExprNode::dtype`] exactly as the
//! graph op it came from (`kiln_ir::Op` docs); [`Expr::Where`] evaluates only the branch it
//! picks (so a guarded [`Expr::Load`] may hold an out-of-range index on the other branch).

mod idx;

pub use idx::Idx;
use kiln_ir::{BinaryOp, DType, ReduceOp, UnaryOp};

/// A loop variable, unique within a kernel.
pub type VarId = u32;

/// Index of an expression in [`Kernel::exprs`].
pub type ExprId = u32;

/// One loop: `var` runs over `0..extent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loop {
    pub var: VarId,
    pub extent: usize,
}

/// A buffer the kernel reads or writes: `len` dense elements of `dtype`, bound by position
/// (argument `i` of the kernel is `args[i]` of the step that launches it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Arg {
    pub dtype: DType,
    pub len: usize,
    /// True when the kernel writes this buffer (it may also read it: in-place).
    pub written: bool,
}

/// A literal value of an [`Expr::Const`]. Integers (any width, signed or not) fit `Int`;
/// bools are `Int(0)` / `Int(1)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Literal {
    Float(f64),
    Int(i128),
}

/// One scalar expression. Operand ids are smaller than the expression's own id.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// `args[arg][index]`.
    Load { arg: u32, index: Idx },
    /// A literal of the node's dtype.
    Const(Literal),
    /// As [`kiln_ir::Op::Unary`] (`IsNan`/`IsInf` yield bool).
    Unary { op: UnaryOp, x: ExprId },
    /// As [`kiln_ir::Op::Binary`] (both operands of one dtype; comparisons yield bool).
    /// Integer division or modulo by zero has no defined result here: the scheduler only
    /// fuses integer `Div`/`Rem`/`Mod` when the divisor is a nonzero constant.
    Binary { op: BinaryOp, a: ExprId, b: ExprId },
    /// `cond ? a : b`, evaluating only the branch taken.
    Where { cond: ExprId, a: ExprId, b: ExprId },
    /// As [`kiln_ir::Op::Cast`] to the node's dtype.
    Cast { x: ExprId },
    /// Bool: `lo <= index < hi`.
    InRange { index: Idx, lo: i64, hi: i64 },
    /// The value of an index expression, as the node's (integer) dtype.
    Index(Idx),
    /// The result of the [`Stage::Reduce`] with this `local`, at the current outer point.
    Local(u32),
}

impl Expr {
    /// The expressions this one reads (none for a load, literal, range test, index or local).
    pub fn operands(&self) -> Vec<ExprId> {
        match self {
            Expr::Unary { x, .. } | Expr::Cast { x } => vec![*x],
            Expr::Binary { a, b, .. } => vec![*a, *b],
            Expr::Where { cond, a, b } => vec![*cond, *a, *b],
            Expr::Load { .. } | Expr::Const(_) | Expr::InRange { .. } | Expr::Index(_) | Expr::Local(_) => Vec::new(),
        }
    }
}

/// An expression with its result dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct ExprNode {
    pub expr: Expr,
    pub dtype: DType,
}

/// One step of the body run at each outer point.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// `local = op over loops of value`, accumulated in `dtype` (the value's dtype, or f32
    /// for f16/bf16 values, which the value then is cast to). `op` is Sum, Prod, Max or Min
    /// (Mean is lowered to Sum and a multiply). Max/Min: NaN wins; the empty reduction gives
    /// the identity of [`kiln_ir::Op::Reduce`].
    Reduce { loops: Vec<Loop>, op: ReduceOp, value: ExprId, local: u32, dtype: DType },
    /// `args[arg][index] = value` for every point of `loops` (value in the arg's dtype).
    Store { loops: Vec<Loop>, arg: u32, index: Idx, value: ExprId },
}

/// One fused kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// A C identifier, unique within its program (`k3_add_relu`).
    pub name: String,
    pub args: Vec<Arg>,
    /// The parallel iteration domain, outermost first (may be empty: one point).
    pub outer: Vec<Loop>,
    pub stages: Vec<Stage>,
    pub exprs: Vec<ExprNode>,
}

impl Kernel {
    /// An empty kernel named `name`.
    pub fn new(name: impl Into<String>) -> Kernel {
        Kernel { name: name.into(), args: Vec::new(), outer: Vec::new(), stages: Vec::new(), exprs: Vec::new() }
    }

    /// Appends an expression and returns its id.
    pub fn push(&mut self, expr: Expr, dtype: DType) -> ExprId {
        self.exprs.push(ExprNode { expr, dtype });
        self.exprs.len() as ExprId - 1
    }

    /// The expression `id`.
    pub fn expr(&self, id: ExprId) -> &ExprNode {
        &self.exprs[id as usize]
    }

    /// Number of points of the outer domain.
    pub fn outer_points(&self) -> usize {
        self.outer.iter().map(|l| l.extent).product()
    }
}
