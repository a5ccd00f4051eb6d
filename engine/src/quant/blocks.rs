//! In-memory block layouts (ggml's, with `f32` scales instead of `f16`).

/// Elements per block for every block format here.
pub const QK: usize = 32;

/// A block of 32 weights in one of the in-memory layouts below.
pub trait Block: Copy + Send + Sync {
    /// The 32 values this block encodes.
    fn dequantize(&self, out: &mut [f32; QK]);
}

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

impl Block for BlockQ4_1 {
    fn dequantize(&self, out: &mut [f32; QK]) {
        for (j, &byte) in self.qs.iter().enumerate() {
            out[j] = f32::from(byte & 0x0F) * self.d + self.m;
            out[j + 16] = f32::from(byte >> 4) * self.d + self.m;
        }
    }
}

impl Block for BlockQ4_0 {
    fn dequantize(&self, out: &mut [f32; QK]) {
        for (j, &byte) in self.qs.iter().enumerate() {
            out[j] = (f32::from(byte & 0x0F) - 8.0) * self.d;
            out[j + 16] = (f32::from(byte >> 4) - 8.0) * self.d;
        }
    }
}

impl Block for BlockQ8_0 {
    fn dequantize(&self, out: &mut [f32; QK]) {
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = f32::from(q) * self.d;
        }
    }
}

/// Q5_0 weights: `x[j] = d * (q[j] - 16)`, `q` in 0..32: the low four bits packed as in
/// [`BlockQ4_0`], bit 4 of `q[j]` in bit `j` of `qh`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ5_0 {
    pub d: f32,
    pub qh: u32,
    pub qs: [u8; 16],
}

/// Q5_1 weights (and Q5_K's 32-element sub-blocks): `x[j] = d * q[j] + m`, `q` packed as in
/// [`BlockQ5_0`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ5_1 {
    pub d: f32,
    pub m: f32,
    pub qh: u32,
    pub qs: [u8; 16],
}

/// Signed weights with a scale per half block: `x[j] = d[j / 16] * qs[j]`. Q6_K (`qs` in
/// −32..32) and Q3_K (−4..4) have 16-element sub-blocks, each with its own scale.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ8H {
    pub d: [f32; 2],
    pub qs: [i8; 32],
}

/// Q2_K's 16-element sub-blocks, two to a block: `x[j] = d[j / 16] * q[j] + m[j / 16]`, `q` in
/// 0..4; byte `i` of `qs` holds `q[i + 8 k]` in bits `2 k ..` (`k` < 4), so one 64-bit shift
/// per group of 8 unpacks them in order.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ2H {
    pub d: [f32; 2],
    pub m: [f32; 2],
    pub qs: [u8; 8],
}

/// The 5-bit values of a Q5 block, in element order.
fn q5_values(qs: &[u8; 16], qh: u32) -> [u8; QK] {
    std::array::from_fn(|j| {
        let nibble = if j < 16 {
            qs[j] & 0x0F
        } else {
            qs[j - 16] >> 4
        };
        nibble | ((((qh >> j) & 1) as u8) << 4)
    })
}

impl Block for BlockQ5_0 {
    fn dequantize(&self, out: &mut [f32; QK]) {
        for (o, q) in out.iter_mut().zip(q5_values(&self.qs, self.qh)) {
            *o = (f32::from(q) - 16.0) * self.d;
        }
    }
}

impl Block for BlockQ5_1 {
    fn dequantize(&self, out: &mut [f32; QK]) {
        for (o, q) in out.iter_mut().zip(q5_values(&self.qs, self.qh)) {
            *o = f32::from(q) * self.d + self.m;
        }
    }
}

impl BlockQ5_1 {
    /// The block holding `q` (each < 32) with scale `d` and offset `m`.
    pub fn pack(d: f32, m: f32, q: &[u8; QK]) -> Self {
        let (qs, qh) = pack_q5(q);
        Self { d, m, qh, qs }
    }
}

/// Packs 5-bit values into the low-nibble bytes and the high-bit word of a Q5 block.
pub(crate) fn pack_q5(q: &[u8; QK]) -> ([u8; 16], u32) {
    let qs = std::array::from_fn(|j| (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    let qh = q
        .iter()
        .enumerate()
        .fold(0u32, |h, (j, &v)| h | (u32::from(v >> 4 & 1) << j));
    (qs, qh)
}

/// Packs 4-bit values as [`BlockQ4_1`] holds them.
pub(crate) fn pack_q4(q: &[u8; QK]) -> [u8; 16] {
    std::array::from_fn(|j| (q[j] & 0x0F) | (q[j + 16] << 4))
}

impl Block for BlockQ8H {
    fn dequantize(&self, out: &mut [f32; QK]) {
        for (j, (o, &q)) in out.iter_mut().zip(&self.qs).enumerate() {
            *o = self.d[j / 16] * f32::from(q);
        }
    }
}

impl BlockQ2H {
    /// The 2-bit value of element `j`.
    pub fn q(&self, j: usize) -> u8 {
        (self.qs[j % 8] >> (2 * (j / 8))) & 3
    }

    /// The block holding `q` (each < 4).
    pub fn pack(d: [f32; 2], m: [f32; 2], q: &[u8; QK]) -> Self {
        let qs =
            std::array::from_fn(|i| (0..4).fold(0u8, |b, k| b | (q[i + 8 * k] & 3) << (2 * k)));
        Self { d, m, qs }
    }
}

impl Block for BlockQ2H {
    fn dequantize(&self, out: &mut [f32; QK]) {
        for (j, o) in out.iter_mut().enumerate() {
            *o = self.d[j / 16] * f32::from(self.q(j)) + self.m[j / 16];
        }
    }
}
