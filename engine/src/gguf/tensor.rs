//! Tensor infos: name, shape, element type and where the bytes lie in the data section.

use std::fmt;

/// A tensor element type (`ggml_type`): every type llama.cpp writes, so a file parses and its
/// tensors are sized whatever they hold; which ones can be *computed* with is `quant`'s
/// business (it refuses the rest naming type and tensor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
    // Types whose layout is known (so files holding them parse and are sized) but which
    // `quant` refuses: the importance-matrix "IQ" families, the ternary and FP4 types.
    IQ2XXS,
    IQ2XS,
    IQ3XXS,
    IQ1S,
    IQ4NL,
    IQ3S,
    IQ2S,
    IQ4XS,
    IQ1M,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
}

impl GgmlType {
    /// The type with on-disk id `id`, if its layout is known.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            15 => Self::Q8K,
            24 => Self::I8,
            25 => Self::I16,
            26 => Self::I32,
            27 => Self::I64,
            28 => Self::F64,
            30 => Self::BF16,
            16 => Self::IQ2XXS,
            17 => Self::IQ2XS,
            18 => Self::IQ3XXS,
            19 => Self::IQ1S,
            20 => Self::IQ4NL,
            21 => Self::IQ3S,
            22 => Self::IQ2S,
            23 => Self::IQ4XS,
            29 => Self::IQ1M,
            34 => Self::TQ1_0,
            35 => Self::TQ2_0,
            39 => Self::MXFP4,
            40 => Self::NVFP4,
            41 => Self::Q1_0,
            _ => return None,
        })
    }

    /// Elements per block.
    pub fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 | Self::I8 | Self::I16 => 1,
            Self::I32 | Self::I64 | Self::F64 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 | Self::Q8_1 => 32,
            Self::IQ4NL | Self::MXFP4 => 32,
            Self::NVFP4 => 64,
            Self::Q1_0 => 128,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K | Self::Q8K => 256,
            Self::IQ2XXS | Self::IQ2XS | Self::IQ3XXS | Self::IQ1S | Self::IQ3S => 256,
            Self::IQ2S | Self::IQ4XS | Self::IQ1M | Self::TQ1_0 | Self::TQ2_0 => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::I8 => 1,
            Self::F16 | Self::BF16 | Self::I16 => 2,
            Self::F32 | Self::I32 => 4,
            Self::I64 | Self::F64 => 8,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q8_1 => 36,
            Self::Q2K => 84,
            Self::Q3K => 110,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
            Self::Q8K => 292,
            Self::IQ2XXS => 66,
            Self::IQ2XS => 74,
            Self::IQ3XXS => 98,
            Self::IQ1S => 50,
            Self::IQ4NL => 18,
            Self::IQ3S => 110,
            Self::IQ2S => 82,
            Self::IQ4XS => 136,
            Self::IQ1M => 56,
            Self::TQ1_0 => 54,
            Self::TQ2_0 => 66,
            Self::MXFP4 => 17,
            Self::NVFP4 => 36,
            Self::Q1_0 => 18,
        }
    }

    /// Bytes taken by `elements` elements, or `None` when `elements` is not a whole number of
    /// blocks or the size overflows.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        let block_len = self.block_len() as u64;
        if !elements.is_multiple_of(block_len) {
            return None;
        }
        (elements / block_len).checked_mul(self.block_bytes() as u64)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q8_1 => "Q8_1",
            Self::Q2K => "Q2_K",
            Self::Q3K => "Q3_K",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::Q8K => "Q8_K",
            Self::I8 => "I8",
            Self::I16 => "I16",
            Self::I32 => "I32",
            Self::I64 => "I64",
            Self::F64 => "F64",
            Self::BF16 => "BF16",
            Self::IQ2XXS => "IQ2_XXS",
            Self::IQ2XS => "IQ2_XS",
            Self::IQ3XXS => "IQ3_XXS",
            Self::IQ1S => "IQ1_S",
            Self::IQ4NL => "IQ4_NL",
            Self::IQ3S => "IQ3_S",
            Self::IQ2S => "IQ2_S",
            Self::IQ4XS => "IQ4_XS",
            Self::IQ1M => "IQ1_M",
            Self::TQ1_0 => "TQ1_0",
            Self::TQ2_0 => "TQ2_0",
            Self::MXFP4 => "MXFP4",
            Self::NVFP4 => "NVFP4",
            Self::Q1_0 => "Q1_0",
        };
        f.write_str(name)
    }
}

/// One tensor's description from the file header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// GGUF order: `dims[0]` is the innermost (contiguous) dimension, so a `[rows, cols]`
    /// matrix is stored as `dims = [cols, rows]`.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the first byte from the start of the data section.
    pub offset: u64,
    /// Size of the tensor's bytes (validated against the file at parse time).
    pub size_bytes: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn num_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// `(rows, cols)` of a matrix (`dims = [cols, rows]`); a vector is one row.
    pub fn matrix_shape(&self) -> Option<(usize, usize)> {
        match self.dims.as_slice() {
            [cols] => Some((1, usize::try_from(*cols).ok()?)),
            [cols, rows] => Some((usize::try_from(*rows).ok()?, usize::try_from(*cols).ok()?)),
            _ => None,
        }
    }
}
