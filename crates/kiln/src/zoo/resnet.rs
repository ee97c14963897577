//! torchvision ResNet (v1.5: the stride sits on the 3×3 conv of a bottleneck), with
//! torchvision's parameter names and init.

use super::{InputSpec, Model, expect_inputs, random_normal};
use crate::nn::{BatchNorm2d, Conv2d, Conv2dConfig, Init, Linear, VarBuilder};
use crate::{DType, Result, Tensor};

const BN_EPS: f64 = 1e-5;

/// Which residual block a ResNet stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// Two 3×3 convs (ResNet-18/34), expansion 1.
    Basic,
    /// 1×1, 3×3, 1×1 convs (ResNet-50/101/152), expansion 4.
    Bottleneck,
}

impl BlockKind {
    fn expansion(self) -> usize {
        match self {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        }
    }
}

/// The shape of a ResNet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResNetConfig {
    /// Residual block type.
    pub block: BlockKind,
    /// Blocks in each of the four stages.
    pub layers: [usize; 4],
    /// Width of the first stage (64 in torchvision); stages double it.
    pub base_width: usize,
    /// Number of output classes.
    pub num_classes: usize,
    /// Input image side (224 for ImageNet); only the example inputs and traces use it.
    pub image_size: usize,
}

impl ResNetConfig {
    /// torchvision `resnet18` (11,689,512 parameters).
    pub fn resnet18() -> ResNetConfig {
        ResNetConfig { block: BlockKind::Basic, layers: [2, 2, 2, 2], base_width: 64, num_classes: 1000, image_size: 224 }
    }

    /// torchvision `resnet50` (25,557,032 parameters).
    pub fn resnet50() -> ResNetConfig {
        ResNetConfig {
            block: BlockKind::Bottleneck,
            layers: [3, 4, 6, 3],
            base_width: 64,
            num_classes: 1000,
            image_size: 224,
        }
    }
}

/// A bias-free convolution with torchvision's ResNet init (kaiming normal, fan out).
fn conv(vb: VarBuilder, cin: usize, cout: usize, k: usize, stride: usize) -> Result<Conv2d> {
    let cfg = Conv2dConfig { stride: [stride; 2], padding: [k / 2; 2], bias: false, ..Default::default() };
    Conv2d::with_init(vb, cin, cout, k, cfg, Init::KaimingNormalFanOut)
}

/// A convolution followed by its batch norm (`convN`/`bnN`, or `downsample.0`/`.1`).
struct ConvBn {
    conv: Conv2d,
    bn: BatchNorm2d,
}

impl ConvBn {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.bn.forward(&self.conv.forward(x)?)
    }
}

/// One residual block: its conv/bn pairs in order, and the optional projection shortcut.
struct Block {
    convs: Vec<ConvBn>,
    downsample: Option<ConvBn>,
}

impl Block {
    fn new(vb: VarBuilder, kind: BlockKind, cin: usize, planes: usize, stride: usize) -> Result<Block> {
        // (in, out, kernel, stride) of each conv, numbered conv1.. as torchvision does.
        let out = planes * kind.expansion();
        let specs = match kind {
            BlockKind::Basic => vec![(cin, planes, 3, stride), (planes, planes, 3, 1)],
            BlockKind::Bottleneck => vec![(cin, planes, 1, 1), (planes, planes, 3, stride), (planes, out, 1, 1)],
        };
        let convs = specs
            .into_iter()
            .enumerate()
            .map(|(i, (a, b, k, s))| {
                Ok(ConvBn {
                    conv: conv(vb.pp(&format!("conv{}", i + 1)), a, b, k, s)?,
                    bn: BatchNorm2d::new(vb.pp(&format!("bn{}", i + 1)), b, BN_EPS)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let downsample = if stride != 1 || cin != out {
            let d = vb.pp("downsample");
            Some(ConvBn { conv: conv(d.pp("0"), cin, out, 1, stride)?, bn: BatchNorm2d::new(d.pp("1"), out, BN_EPS)? })
        } else {
            None
        };
        Ok(Block { convs, downsample })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        let last = self.convs.len() - 1;
        for (i, cb) in self.convs.iter().enumerate() {
            h = cb.forward(&h)?;
            if i != last {
                h = h.relu()?;
            }
        }
        let identity = match &self.downsample {
            Some(d) => d.forward(x)?,
            None => x.clone(),
        };
        h.add(&identity)?.relu()
    }
}

/// A torchvision ResNet: image `[B, 3, H, W]` → logits `[B, num_classes]`.
pub struct ResNet {
    name: String,
    stem: ConvBn,
    stages: Vec<Vec<Block>>,
    fc: Linear,
    batch: usize,
    image_size: usize,
    dtype: DType,
    num_parameters: usize,
}

impl ResNet {
    /// Builds `cfg` from `vb` (names `conv1.weight`, `layer1.0.bn1.running_mean`, `fc.bias`, ...);
    /// `batch` is the batch size of [`Model::inputs`].
    pub fn new(vb: VarBuilder, cfg: &ResNetConfig, batch: usize) -> Result<ResNet> {
        let before = vb.num_parameters();
        let w = cfg.base_width;
        let stem = ConvBn { conv: conv(vb.pp("conv1"), 3, w, 7, 2)?, bn: BatchNorm2d::new(vb.pp("bn1"), w, BN_EPS)? };
        let mut cin = w;
        let mut stages = Vec::with_capacity(4);
        for (s, &n) in cfg.layers.iter().enumerate() {
            let planes = w << s;
            let stage_vb = vb.pp(&format!("layer{}", s + 1));
            let mut blocks = Vec::with_capacity(n);
            for b in 0..n {
                let stride = if s > 0 && b == 0 { 2 } else { 1 };
                blocks.push(Block::new(stage_vb.pp(&b.to_string()), cfg.block, cin, planes, stride)?);
                cin = planes * cfg.block.expansion();
            }
            stages.push(blocks);
        }
        let fc = Linear::new(vb.pp("fc"), cin, cfg.num_classes, true)?;
        let name = match (cfg.block, cfg.layers) {
            (BlockKind::Basic, [2, 2, 2, 2]) => "resnet18".to_string(),
            (BlockKind::Bottleneck, [3, 4, 6, 3]) => "resnet50".to_string(),
            (_, l) => format!("resnet-{:?}-{}", cfg.block, l.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("-")),
        };
        Ok(ResNet {
            name,
            stem,
            stages,
            fc,
            batch,
            image_size: cfg.image_size,
            dtype: vb.dtype(),
            num_parameters: vb.num_parameters() - before,
        })
    }

    /// Logits `[B, num_classes]` of images `x` `[B, 3, H, W]`.
    pub fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.stem.forward(x)?.relu()?.max_pool2d([3, 3], [2, 2], [1, 1], false)?;
        for block in self.stages.iter().flatten() {
            h = block.forward(&h)?;
        }
        let pooled = h.adaptive_avg_pool2d_1()?.flatten(1, -1)?;
        self.fc.forward(&pooled)
    }
}

impl Model for ResNet {
    fn name(&self) -> &str {
        &self.name
    }

    fn inputs(&self) -> Vec<InputSpec> {
        let s = self.image_size;
        vec![InputSpec { name: "input".into(), dtype: self.dtype, shape: vec![self.batch, 3, s, s] }]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = &expect_inputs(&self.name, inputs, 1)?[0];
        Ok(vec![self.logits(x)?])
    }

    fn num_parameters(&self) -> usize {
        self.num_parameters
    }

    fn example_inputs(&self, seed: u64) -> Result<Vec<Tensor>> {
        let s = self.image_size;
        Ok(vec![random_normal(&[self.batch, 3, s, s], self.dtype, seed)?])
    }
}
