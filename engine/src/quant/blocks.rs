//! In-memory block layouts (ggml's, with `f32` scales instead of `f16`).

/// Elements per block for every block format here.
pub const QK: usize = 32;

/// Q4_1 weights: `x[j] = d * q[j] + m`, `q` in 0..16; `qs[j]` holds `q[j]` (low nibble) and
/// `q[j + 16]` (high nibble).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: f32,
    pub m: f32,
    pub qs: [u8; 16],
}

/// Q4_0 weights: `x[j] = d * (q[j] - 8)`, nibbles packed as in [`BlockQ4_1`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ4_0 {
    pub d: f32,
    pub qs: [u8; 16],
}

/// Q8_0 weights: `x[j] = d * qs[j]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: f32,
    pub qs: [i8; 32],
}

/// Quantised activations: `x[j] ≈ d * qs[j]`, and `s = d * Σ qs[j]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ8 {
    pub d: f32,
    pub s: f32,
    pub qs: [i8; 32],
}

impl BlockQ4_1 {
    /// The 32 values this block encodes.
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        for (j, &byte) in self.qs.iter().enumerate() {
            out[j] = f32::from(byte & 0x0F) * self.d + self.m;
            out[j + 16] = f32::from(byte >> 4) * self.d + self.m;
        }
    }
}

impl BlockQ4_0 {
    /// The 32 values this block encodes.
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        for (j, &byte) in self.qs.iter().enumerate() {
            out[j] = (f32::from(byte & 0x0F) - 8.0) * self.d;
            out[j + 16] = (f32::from(byte >> 4) - 8.0) * self.d;
        }
    }
}

impl BlockQ8_0 {
    /// The 32 values this block encodes.
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = f32::from(q) * self.d;
        }
    }
}
