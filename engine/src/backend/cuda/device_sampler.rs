//! Serving's sampling on the device: the wanted rows the runtime hands over are sampled by
//! the shared specification (`sampling::spec`, kernels `apply_logit_edits` and `sample_rows`)
//! where the logits are, so only their ids (and the logprobs a request asked for, kernel
//! `row_logprobs` on a copy of the raw rows) come back; the rows left to the host sampler come
//! back as logits. Every copy back goes through page-locked (pinned) host buffers.

use cudarc::driver::{CudaSlice, PinnedHostSlice};

use super::device::Gpu;
use super::launch::MAX_TOP_LOGPROBS;
use super::{Error, Result, launch};
use crate::backend::DeviceRow;
use crate::sampling::TokenLogprob;
use crate::sampling::spec::{Edit, RowSampling};

/// The device buffers and pinned host buffers of serving's sampling, sized for `max_rows`
/// logits rows; the edit and logits staging buffers grow on demand.
pub struct DeviceSampler {
    settings: CudaSlice<RowSampling>, // [max_rows]
    offsets: CudaSlice<i32>,          // [max_rows + 1]
    edits: CudaSlice<Edit>,           // [capacity]
    sampled: CudaSlice<i32>,          // [max_rows]
    ids: PinnedHostSlice<i32>,        // [max_rows]
    staging: Option<PinnedHostSlice<f32>>,
    logprobs: LogprobBuffers,
}

/// The buffers of the rows that ask for logprobs: their raw logits (copied before edits and
/// sampling rewrite them), where they were sampled, and the results.
struct LogprobBuffers {
    raw: CudaSlice<f32>,     // [capacity rows, vocab], grown on demand
    rows_of: CudaSlice<i32>, // [max_rows]
    n_top: CudaSlice<i32>,   // [max_rows]
    lp: CudaSlice<f32>,      // [max_rows, 1 + MAX_TOP_LOGPROBS]
    ids: CudaSlice<i32>,     // [max_rows, MAX_TOP_LOGPROBS]
    lp_host: PinnedHostSlice<f32>,
    ids_host: PinnedHostSlice<i32>,
}

/// What a step's sampling returns: `(batch index, token)` per sampled row, and `(batch index,
/// logprob, alternatives)` per sampled row that asked for logprobs.
pub type Sampled = (Vec<(usize, i32)>, Vec<(usize, f32, Vec<TokenLogprob>)>);

/// What one step uploads: a setting per logits row (greedy for rows nobody samples there)
/// and the rows' edits, concatenated, with `offsets[r]..offsets[r + 1]` row `r`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub settings: Vec<RowSampling>,
    pub offsets: Vec<i32>,
    pub edits: Vec<Edit>,
    /// `(logits row, batch index, alternatives)` of the rows that ask for logprobs.
    pub logprobs: Vec<(usize, usize, u32)>,
}

/// Lays out the device rows of a step: `rows` is `(logits row, batch index)` of every wanted
/// row, `device[batch index]` the ones sampled here, `computed` the logits rows the head
/// produced. Returns the layout and the `(logits row, batch index)` pairs sampled.
pub fn layout(
    rows: &[(usize, usize)],
    device: &[Option<DeviceRow>],
    computed: usize,
) -> (Layout, Vec<(usize, usize)>) {
    layout_by(rows, computed, |seq, _| {
        device.get(seq).and_then(Option::as_ref)
    })
}

/// Like [`layout`] for a step whose batch entries may want several rows (a speculative verify
/// chunk: its decode row, then a row per draft token): the `j`-th wanted row of batch entry
/// `s`, in token order, is sampled with `device[s][j]`; an entry with fewer device rows than
/// wanted rows leaves the rest to the host.
pub fn layout_rows(
    rows: &[(usize, usize)],
    device: &[Vec<DeviceRow>],
    computed: usize,
) -> (Layout, Vec<(usize, usize)>) {
    layout_by(rows, computed, |seq, j| {
        device.get(seq).and_then(|d| d.get(j))
    })
}

/// The layout, with `pick(batch index, j)` the device row of that entry's `j`-th wanted row.
fn layout_by<'a>(
    rows: &[(usize, usize)],
    computed: usize,
    pick: impl Fn(usize, usize) -> Option<&'a DeviceRow>,
) -> (Layout, Vec<(usize, usize)>) {
    let mut per_row: Vec<Option<&DeviceRow>> = vec![None; computed];
    let mut taken = Vec::new();
    let mut logprobs = Vec::new();
    let mut seen = std::collections::HashMap::<usize, usize>::new();
    for &(row, seq) in rows {
        let j = seen.entry(seq).or_insert(0);
        let device = pick(seq, *j);
        *j += 1;
        if let (Some(d), Some(slot)) = (device, per_row.get_mut(row)) {
            *slot = Some(d);
            taken.push((row, seq));
            logprobs.extend(d.logprobs.map(|n| (row, seq, n)));
        }
    }
    let mut out = Layout {
        settings: Vec::with_capacity(computed),
        offsets: vec![0],
        edits: Vec::new(),
        logprobs,
    };
    for d in per_row {
        out.settings.push(d.map(|d| d.settings).unwrap_or_default());
        out.edits
            .extend(d.iter().flat_map(|d| d.edits.iter().copied()));
        out.offsets.push(out.edits.len() as i32);
    }
    (out, taken)
}

/// Page-locked host memory of `len` elements (plain: read by the host, so not write-combined).
fn pinned<T: cudarc::driver::DeviceRepr>(gpu: &Gpu, len: usize) -> Result<PinnedHostSlice<T>> {
    // SAFETY: the contents are unset until a copy fills them; every read goes through a slice
    // the copy of this step wrote first (`as_slice` waits for it).
    Ok(unsafe {
        gpu.stream
            .context()
            .alloc_pinned_with_flags::<T>(len.max(1), 0)
    }?)
}

impl DeviceSampler {
    pub fn new(gpu: &Gpu, max_rows: usize) -> Result<Self> {
        let st = &gpu.stream;
        Ok(Self {
            settings: st.alloc_zeros(max_rows.max(1))?,
            offsets: st.alloc_zeros(max_rows + 1)?,
            edits: st.alloc_zeros(1)?,
            sampled: st.alloc_zeros(max_rows.max(1))?,
            ids: pinned(gpu, max_rows)?,
            staging: None,
            logprobs: LogprobBuffers {
                raw: st.alloc_zeros(1)?,
                rows_of: st.alloc_zeros(max_rows.max(1))?,
                n_top: st.alloc_zeros(max_rows.max(1))?,
                lp: st.alloc_zeros(max_rows.max(1) * (1 + MAX_TOP_LOGPROBS))?,
                ids: st.alloc_zeros(max_rows.max(1) * MAX_TOP_LOGPROBS)?,
                lp_host: pinned(gpu, max_rows * (1 + MAX_TOP_LOGPROBS))?,
                ids_host: pinned(gpu, max_rows * MAX_TOP_LOGPROBS)?,
            },
        })
    }

    /// Copies logits rows `first .. first + count` (of `vocab`) to the host through pinned
    /// memory.
    pub fn logits_rows(
        &mut self,
        gpu: &Gpu,
        logits: &CudaSlice<f32>,
        first: usize,
        count: usize,
        vocab: usize,
    ) -> Result<Vec<f32>> {
        let len = count * vocab;
        if len == 0 {
            return Ok(Vec::new());
        }
        if self.staging.as_ref().is_none_or(|s| s.len() < len) {
            self.staging = Some(pinned(gpu, len)?);
        }
        let staging = self
            .staging
            .as_mut()
            .ok_or_else(|| Error::Step("no staging buffer".into()))?;
        let src = logits.slice(first * vocab..(first + count) * vocab);
        gpu.stream.memcpy_dtoh(&src, staging)?;
        Ok(staging.as_slice()?[..len].to_vec())
    }

    /// Samples the laid-out rows on the device (`logits` rows become weights) and returns
    /// `(batch index, token)` for each of `taken`, with the logprobs of those that asked.
    pub fn sample(
        &mut self,
        gpu: &Gpu,
        logits: &mut CudaSlice<f32>,
        plan: &Layout,
        taken: &[(usize, usize)],
        vocab: usize,
    ) -> Result<Sampled> {
        let rows = plan.settings.len();
        if taken.is_empty() || rows == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        if rows > self.sampled.len() {
            return Err(Error::Step(format!(
                "{rows} sampled rows exceed the buffers of {}",
                self.sampled.len()
            )));
        }
        let st = &gpu.stream;
        if self.edits.len() < plan.edits.len() {
            self.edits = st.alloc_zeros(plan.edits.len().next_power_of_two())?;
        }
        st.memcpy_htod(&plan.settings, &mut self.settings)?;
        st.memcpy_htod(&plan.offsets, &mut self.offsets)?;
        if !plan.edits.is_empty() {
            st.memcpy_htod(&plan.edits, &mut self.edits)?;
        }
        self.keep_raw_rows(gpu, logits, plan, vocab)?;
        let total = plan.edits.len();
        launch::apply_logit_edits(gpu, logits, &self.edits, &self.offsets, total, rows, vocab)?;
        launch::sample_rows(gpu, logits, &self.settings, &mut self.sampled, rows, vocab)?;
        let logprobs = self.logprobs_of(gpu, plan, vocab)?;
        st.memcpy_dtoh(&self.sampled.slice(0..rows), &mut self.ids)?;
        let ids = self.ids.as_slice()?;
        let tokens = taken.iter().map(|&(row, seq)| (seq, ids[row])).collect();
        Ok((tokens, logprobs))
    }

    /// Copies the raw logits of the rows that ask for logprobs aside, before edits and
    /// sampling rewrite them.
    fn keep_raw_rows(
        &mut self,
        gpu: &Gpu,
        logits: &CudaSlice<f32>,
        plan: &Layout,
        vocab: usize,
    ) -> Result<()> {
        let (st, b) = (&gpu.stream, &mut self.logprobs);
        let need = plan.logprobs.len() * vocab;
        if need == 0 {
            return Ok(());
        }
        if b.raw.len() < need {
            b.raw = st.alloc_zeros(need)?;
        }
        for (k, &(row, _, _)) in plan.logprobs.iter().enumerate() {
            let src = logits.slice(row * vocab..(row + 1) * vocab);
            let mut dst = b.raw.slice_mut(k * vocab..(k + 1) * vocab);
            st.memcpy_dtod(&src, &mut dst)?;
        }
        Ok(())
    }

    /// Runs `row_logprobs` on the rows kept aside and brings the results back.
    fn logprobs_of(
        &mut self,
        gpu: &Gpu,
        plan: &Layout,
        vocab: usize,
    ) -> Result<Vec<(usize, f32, Vec<TokenLogprob>)>> {
        let (st, b) = (&gpu.stream, &mut self.logprobs);
        let k = plan.logprobs.len();
        if k == 0 {
            return Ok(Vec::new());
        }
        let rows_of: Vec<i32> = plan.logprobs.iter().map(|l| l.0 as i32).collect();
        let n_top: Vec<i32> = plan.logprobs.iter().map(|l| l.2 as i32).collect();
        st.memcpy_htod(&rows_of, &mut b.rows_of)?;
        st.memcpy_htod(&n_top, &mut b.n_top)?;
        let buffers = launch::LogprobRows {
            raw: &b.raw,
            rows_of: &b.rows_of,
            chosen: &self.sampled,
            n_top: &b.n_top,
            lp: &mut b.lp,
            ids: &mut b.ids,
        };
        launch::row_logprobs(gpu, buffers, k, vocab)?;
        let width = 1 + MAX_TOP_LOGPROBS;
        st.memcpy_dtoh(&b.lp.slice(0..k * width), &mut b.lp_host)?;
        st.memcpy_dtoh(&b.ids.slice(0..k * MAX_TOP_LOGPROBS), &mut b.ids_host)?;
        let (lp, ids) = (b.lp_host.as_slice()?, b.ids_host.as_slice()?);
        Ok(plan
            .logprobs
            .iter()
            .enumerate()
            .map(|(k, &(_, seq, n))| (seq, lp[k * width], alternatives(lp, ids, k, n)))
            .collect())
    }
}

/// Row `k`'s `n` alternatives from `row_logprobs`' outputs (fewer at an id −1: the row had
/// fewer tokens that are not NaN).
fn alternatives(lp: &[f32], ids: &[i32], k: usize, n: u32) -> Vec<TokenLogprob> {
    let width = 1 + MAX_TOP_LOGPROBS;
    let ids = &ids[k * MAX_TOP_LOGPROBS..][..MAX_TOP_LOGPROBS];
    let lps = &lp[k * width + 1..][..MAX_TOP_LOGPROBS];
    ids.iter()
        .zip(lps)
        .take(n as usize)
        .map_while(|(&id, &logprob)| {
            let token_id = u32::try_from(id).ok()?;
            Some(TokenLogprob { token_id, logprob })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(top_k: u32, edit_ids: &[u32]) -> Option<DeviceRow> {
        let edit = |id| Edit {
            id,
            bias: 1.0,
            repetition: 1.0,
            subtract: 0.0,
        };
        Some(DeviceRow {
            settings: RowSampling {
                inv_t: 1.0,
                top_k,
                ..RowSampling::default()
            },
            edits: edit_ids.iter().map(|&id| edit(id)).collect(),
            logprobs: (top_k == 5).then_some(3),
        })
    }

    #[test]
    fn rows_land_at_their_logits_rows_and_the_rest_stay_greedy() {
        // A padded decode graph: 4 logits rows; batch 0 and 2 sampled here, batch 1 on the
        // host, row 3 padding.
        let device = [row(5, &[7, 9]), None, row(0, &[])];
        let wanted = [(0, 0), (1, 1), (2, 2)];
        let (plan, taken) = layout(&wanted, &device, 4);
        assert_eq!(taken, [(0, 0), (2, 2)]);
        assert_eq!(plan.offsets, [0, 2, 2, 2, 2]);
        let ks: Vec<u32> = plan.settings.iter().map(|s| s.top_k).collect();
        assert_eq!(ks, [5, 0, 0, 0]);
        assert_eq!(plan.settings[1], RowSampling::default());
        assert_eq!(plan.edits.iter().map(|e| e.id).collect::<Vec<_>>(), [7, 9]);
        // Batch 0 asked for 3 alternatives: its raw row is logits row 0.
        assert_eq!(plan.logprobs, [(0, 0, 3)]);
    }

    #[test]
    fn a_prefill_step_maps_compacted_rows_to_their_batch_entries() {
        // Prefill: logits rows are compacted; batch entry 1 wants none.
        let device = [row(1, &[3]), None, row(2, &[4, 5])];
        let (plan, taken) = layout(&[(0, 0), (1, 2)], &device, 2);
        assert_eq!(taken, [(0, 0), (1, 2)]);
        assert_eq!(plan.offsets, [0, 1, 3]);
        assert_eq!(plan.settings.len(), 2);
        assert!(plan.logprobs.is_empty());
    }

    #[test]
    fn a_verify_chunk_samples_each_row_with_its_own_setting() {
        // Batch 0 decodes one row on the host; batch 1 verifies a 2-token draft: its three
        // rows (logits rows 1..4, token order) take its three device rows in order.
        let rows_1: Vec<DeviceRow> = [row(1, &[3]), row(2, &[]), row(5, &[4, 6])]
            .into_iter()
            .flatten()
            .collect();
        let device = [Vec::new(), rows_1];
        let wanted = [(0, 0), (1, 1), (2, 1), (3, 1)];
        let (plan, taken) = layout_rows(&wanted, &device, 4);
        assert_eq!(taken, [(1, 1), (2, 1), (3, 1)]);
        let ks: Vec<u32> = plan.settings.iter().map(|s| s.top_k).collect();
        assert_eq!(ks, [0, 1, 2, 5]);
        assert_eq!(plan.offsets, [0, 0, 1, 1, 3]);
        assert_eq!(plan.logprobs, [(3, 1, 3)]);
        // One device row for three wanted rows: the other two stay with the host.
        let short = [Vec::new(), device[1][..1].to_vec()];
        assert_eq!(layout_rows(&wanted, &short, 4).1, [(1, 1)]);
    }

    #[test]
    fn alternatives_stop_at_the_count_asked_or_the_first_missing_id() {
        let width = 1 + MAX_TOP_LOGPROBS;
        let mut lp = vec![0.0f32; 2 * width];
        let mut ids = vec![7i32; 2 * MAX_TOP_LOGPROBS];
        lp[width + 1..width + 4].copy_from_slice(&[-0.5, -1.0, -2.0]);
        ids[MAX_TOP_LOGPROBS..MAX_TOP_LOGPROBS + 3].copy_from_slice(&[4, 2, -1]);
        let got = alternatives(&lp, &ids, 1, 5);
        let pairs: Vec<(u32, f32)> = got.iter().map(|t| (t.token_id, t.logprob)).collect();
        assert_eq!(pairs, [(4, -0.5), (2, -1.0)]);
        // Entries past the count asked are a previous step's: never read.
        assert_eq!(alternatives(&lp, &ids, 0, 1).len(), 1);
    }
}
