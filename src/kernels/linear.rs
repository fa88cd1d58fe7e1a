//! [`QuantizedLinear`]: a linear layer `y[m, n] = x[m, k] · W[k, n]` with a low-precision
//! weight, quantized and re-laid-out once on the host.
//!
//! ```no_run
//! use half::f16;
//! use tilus::kernels::linear::QuantizedLinear;
//! use tilus::quant::Group;
//! use tilus::DType;
//! let (k, n) = (512, 256);
//! let w: Vec<f32> = (0..k * n).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect();
//! let layer = QuantizedLinear::new(&w, k, n, DType::UInt(4), Group::Rows(128), DType::F16)?;
//! let x = vec![f16::from_f32(0.5); 3 * k];
//! let y = layer.forward_cpu(&x, 3)?; // 3 x 256 f16
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On the GPU, [`QuantizedLinear::to_gpu`] (or [`GpuQuantizedLinear::new`]) gives a layer whose
//! `forward` autotunes on first use per `m` bucket; see [`super::linear_gpu`].

use super::qmatmul::size_product;
use super::qmatmul::{
    build, decode_half, encode_half, prepare, PreparedWeight, QMatmulConfig, QMatmulError,
    QMatmulKernel,
};
use crate::checkpoint::ImportedLayer;
use crate::element::Activation;
use crate::quant::{Group, QuantizedWeight};
use crate::DType;

pub use super::linear_gpu::{GpuQuantizedLinear, LinearPlan};

/// A quantized linear layer. See the module documentation.
#[derive(Clone, Debug)]
pub struct QuantizedLinear {
    quantized: QuantizedWeight,
    kernel: QMatmulKernel,
    weight: PreparedWeight,
    /// Act-order checkpoints: the layer computes `x[:, perm] · W`.
    input_perm: Option<Vec<u32>>,
}

impl QuantizedLinear {
    /// Quantize row-major `weight[k * n]` to `wdtype` (unsigned types get per-group zero
    /// points, the others are symmetric), pick tiles for the shape, build the kernel and
    /// re-lay-out the weight. Errors name the argument at fault.
    pub fn new(
        weight: &[f32],
        k: usize,
        n: usize,
        wdtype: DType,
        group: Group,
        adtype: DType,
    ) -> Result<QuantizedLinear, QMatmulError> {
        if !matches!(adtype, DType::F16 | DType::BF16) {
            return Err(QMatmulError::Shape {
                arg: "adtype",
                reason: format!("activations are f16 or bf16, not {adtype}"),
            });
        }
        let unsigned = matches!(wdtype, DType::UInt(_));
        let q = QuantizedWeight::quantize(weight, k, n, wdtype, group, adtype, unsigned)?;
        let group_rows = match group {
            Group::PerChannel => None,
            Group::Rows(g) => Some(g),
        };
        let config = QMatmulConfig::for_shape(wdtype, adtype, group_rows, q.zeros.is_some(), n, k)?;
        QuantizedLinear::from_quantized(q, config)
    }

    /// A layer from an already quantized weight and an explicit configuration.
    pub fn from_quantized(
        quantized: QuantizedWeight,
        config: QMatmulConfig,
    ) -> Result<QuantizedLinear, QMatmulError> {
        let kernel = build(&config)?;
        let weight = prepare(&quantized, &config)?;
        Ok(QuantizedLinear {
            quantized,
            kernel,
            weight,
            input_perm: None,
        })
    }

    /// A layer from an imported checkpoint layer ([`crate::checkpoint`]): the configuration
    /// picked for the shape, activations in the weight's scale dtype (the kernels hold scales
    /// in the activation type, so another one would round them), and the layer's input
    /// permutation if it has one.
    pub fn from_imported(layer: ImportedLayer) -> Result<QuantizedLinear, QMatmulError> {
        let ImportedLayer { weight, input_perm } = layer;
        let group_rows = match weight.group {
            Group::PerChannel => None,
            Group::Rows(g) => Some(g),
        };
        let config = QMatmulConfig::for_shape(
            weight.dtype,
            weight.scale_dtype,
            group_rows,
            weight.zeros.is_some(),
            weight.n,
            weight.k,
        )?;
        let layer = QuantizedLinear::from_quantized(weight, config)?;
        match input_perm {
            Some(perm) => layer.with_input_perm(perm),
            None => Ok(layer),
        }
    }

    /// This layer computing `x[:, perm] · W` (`perm` a permutation of `0..k`; an error naming
    /// `perm` otherwise): the input permutation of a GPTQ act-order checkpoint.
    pub fn with_input_perm(mut self, perm: Vec<u32>) -> Result<QuantizedLinear, QMatmulError> {
        let k = self.k();
        crate::checkpoint::format::validate_perm("perm", &perm, k).map_err(|e| {
            QMatmulError::Shape {
                arg: "perm",
                reason: e.to_string(),
            }
        })?;
        if k > i32::MAX as usize {
            return Err(QMatmulError::Shape {
                arg: "perm",
                reason: format!("k = {k} does not fit an i32"),
            });
        }
        self.input_perm = Some(perm);
        Ok(self)
    }

    /// The input permutation, if the layer has one.
    pub fn input_perm(&self) -> Option<&[u32]> {
        self.input_perm.as_deref()
    }

    pub fn k(&self) -> usize {
        self.weight.k
    }

    pub fn n(&self) -> usize {
        self.weight.n
    }

    pub fn config(&self) -> &QMatmulConfig {
        &self.kernel.config
    }

    pub fn kernel(&self) -> &QMatmulKernel {
        &self.kernel
    }

    /// The quantized weight (row-major codes, scales, zero points): `dequantize()` is the
    /// exact weight the layer multiplies with.
    pub fn quantized(&self) -> &QuantizedWeight {
        &self.quantized
    }

    /// The operands the kernel reads (re-laid-out codes, encoded scales and zero points).
    pub fn prepared(&self) -> &PreparedWeight {
        &self.weight
    }

    /// `y = x · W` for `x` of `m` rows, on the CPU interpreter. `T` must be the layer's
    /// activation type.
    pub fn forward_cpu<T: Activation>(&self, x: &[T], m: usize) -> Result<Vec<T>, QMatmulError> {
        let adtype = self.kernel.config.adtype;
        if T::DTYPE != adtype {
            return Err(QMatmulError::Shape {
                arg: "x",
                reason: format!("the layer computes in {adtype}, but x holds {}", T::DTYPE),
            });
        }
        let (k, n) = (self.k(), self.n());
        // The shape first (m fits the VM's i32), then sizes by checked products: a huge `m`
        // overflowed `m * k * 2` here in debug builds.
        self.kernel.config.check_shape(m, n, k)?;
        let x_len = size_product("m", &[("m", m), ("k", k)])?;
        if x.len() != x_len {
            return Err(QMatmulError::Buffer {
                arg: "x",
                expected: x_len.saturating_mul(2),
                got: x.len().saturating_mul(2),
                what: format!("{m} x {k} {adtype}"),
            });
        }
        let values: Vec<f32> = match &self.input_perm {
            // x' = x[:, perm], row by row.
            Some(perm) => x
                .chunks_exact(k)
                .flat_map(|row| perm.iter().map(move |&p| row[p as usize].to_f32()))
                .collect(),
            None => x.iter().map(|v| v.to_f32()).collect(),
        };
        let a = encode_half(&values, adtype);
        let mut c = vec![0u8; size_product("m", &[("m", m), ("n", n), ("2 bytes", 2)])?];
        self.kernel.run_cpu(m, &a, &self.weight, &mut c)?;
        Ok(decode_half(&c, adtype)
            .into_iter()
            .map(T::from_f32)
            .collect())
    }
}
