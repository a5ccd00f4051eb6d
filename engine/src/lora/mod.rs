//! LoRA adapters served beside the base model: PEFT folders read and checked against the base
//! (`peft`), the set loaded at a time with LRU eviction (`registry`), and the per-row delta
//! `y += B (A x) · scale` the forward adds for the rows of each adapter, unmerged (so requests
//! for different adapters share one batch, and a quantised base keeps its weights).

mod peft;
mod registry;

pub use peft::{LoraLimits, load_adapter};
pub use registry::{AdapterInfo, Lookup, LoraRegistry};

/// The adapters a server starts with and its bounds (`serve --lora`, `--max-loras`,
/// `--max-lora-rank`: vLLM's names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoraConfig {
    /// `(name, source)` of each `--lora NAME=SOURCE`, loaded before the server is ready.
    pub adapters: Vec<(String, String)>,
    /// Adapters whose weights stay in memory at a time; the least recently used goes first.
    pub max_loras: usize,
    /// Largest rank `r` an adapter may have.
    pub max_lora_rank: usize,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            adapters: Vec::new(),
            max_loras: 4,
            max_lora_rank: 16,
        }
    }
}

/// Why an adapter cannot be loaded, found or unloaded.
#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    /// The adapter's files do not fit the base model (or this engine), with the reason.
    #[error("LoRA adapter {name:?}: {reason}")]
    Invalid { name: String, reason: String },
    /// Its source could not be read or fetched.
    #[error("LoRA adapter {name:?}: cannot read {source_name}: {reason}")]
    Source {
        name: String,
        source_name: String,
        reason: String,
    },
    #[error("the LoRA adapter {0:?} has already been loaded")]
    Exists(String),
    #[error("the LoRA adapter {0:?} cannot be found")]
    NotFound(String),
    /// The backend computes no adapters (CUDA, sim).
    #[error("LoRA adapters are not supported by the {0} backend (serve with --backend cpu)")]
    Unsupported(&'static str),
}

/// The linear layers an adapter may target, as PEFT names them (`target_modules`).
pub const TARGET_MODULES: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// One low-rank pair: `A` `[rank, in_w]` and `B` `[out_w, rank]`, f32.
#[derive(Debug, Clone)]
pub struct Delta {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub rank: usize,
    pub in_w: usize,
    pub out_w: usize,
}

impl Delta {
    /// `out += scale · B (A x)` for one row `x` `[in_w]`, `out` `[out_w]`.
    fn add_row(&self, x: &[f32], scale: f32, out: &mut [f32]) {
        let mut ax = [0f32; MAX_RANK];
        for (j, a_row) in self.a.chunks_exact(self.in_w).enumerate() {
            ax[j] = dot(a_row, x) * scale;
        }
        let ax = &ax[..self.rank];
        for (o, b_row) in out.iter_mut().zip(self.b.chunks_exact(self.rank)) {
            *o += dot(b_row, ax);
        }
    }
}

/// `Σ a·b` in eight lanes (so the compiler vectorises it; a plain `sum` must keep its order).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The largest rank this engine computes (`--max-lora-rank` may only lower it).
pub const MAX_RANK: usize = 256;

/// The deltas of one transformer block, by target module (index into [`TARGET_MODULES`]).
#[derive(Debug, Clone, Default)]
pub struct LoraLayer {
    pub deltas: [Option<Delta>; 7],
}

/// The fused linear layers of the forward and which targets feed each one's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fused {
    /// `[q | k | v]`
    Qkv,
    O,
    /// `[gate | up]`
    GateUp,
    Down,
}

impl Fused {
    /// The target modules whose outputs this fused layer stacks, in column order.
    fn targets(self) -> &'static [usize] {
        match self {
            Fused::Qkv => &[0, 1, 2],
            Fused::O => &[3],
            Fused::GateUp => &[4, 5],
            Fused::Down => &[6],
        }
    }
}

/// A loaded adapter: its weights for every block of the base model.
#[derive(Debug)]
pub struct LoraAdapter {
    /// The name requests use in `model`.
    pub name: String,
    /// Unique per load, so a name loaded again with other weights never shares cached blocks.
    pub id: u64,
    /// `lora_alpha / r` (or `/ sqrt(r)` with `use_rslora`).
    pub scale: f32,
    pub rank: usize,
    pub layers: Vec<LoraLayer>,
    /// The base model's output width of each target module (columns in its fused layer).
    pub widths: [usize; 7],
}

impl LoraAdapter {
    /// The prefix-cache salt of a request for this adapter (its own `cache_salt` kept inside),
    /// so blocks computed with one adapter's weights are never reused by another's requests.
    pub fn cache_salt(&self, salt: Option<&str>) -> String {
        format!("lora#{}:{}|{}", self.id, self.name, salt.unwrap_or(""))
    }

    /// Adds this adapter's delta of block `layer`'s fused layer `fused` to one row: `x` is its
    /// input row, `out` its output row (every stacked target, in column order).
    pub fn add_row(&self, layer: usize, fused: Fused, x: &[f32], out: &mut [f32]) {
        let Some(l) = self.layers.get(layer) else {
            return;
        };
        let mut col = 0;
        for &t in fused.targets() {
            let width = self.widths[t];
            if let Some(d) = &l.deltas[t] {
                d.add_row(x, self.scale, &mut out[col..col + width]);
            }
            col += width;
        }
    }

    /// Whether block `layer` has a delta for any target of `fused`.
    pub fn touches(&self, layer: usize, fused: Fused) -> bool {
        self.layers
            .get(layer)
            .is_some_and(|l| fused.targets().iter().any(|&t| l.deltas[t].is_some()))
    }
}
