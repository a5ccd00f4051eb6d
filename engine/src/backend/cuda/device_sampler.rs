//! Serving's sampling on the device: the wanted rows the runtime hands over are sampled by
//! the shared specification (`sampling::spec`, kernels `apply_logit_edits` and `sample_rows`)
//! where the logits are, so only their ids come back; the rows left to the host sampler come
//! back as logits. Both copies go through page-locked (pinned) host buffers.

use cudarc::driver::{CudaSlice, PinnedHostSlice};

use super::device::Gpu;
use super::{Error, Result, launch};
use crate::backend::DeviceRow;
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
}

/// What one step uploads: a setting per logits row (greedy for rows nobody samples there)
/// and the rows' edits, concatenated, with `offsets[r]..offsets[r + 1]` row `r`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub settings: Vec<RowSampling>,
    pub offsets: Vec<i32>,
    pub edits: Vec<Edit>,
}

/// Lays out the device rows of a step: `rows` is `(logits row, batch index)` of every wanted
/// row, `device[batch index]` the ones sampled here, `computed` the logits rows the head
/// produced. Returns the layout and the `(logits row, batch index)` pairs sampled.
pub fn layout(
    rows: &[(usize, usize)],
    device: &[Option<DeviceRow>],
    computed: usize,
) -> (Layout, Vec<(usize, usize)>) {
    let mut per_row: Vec<Option<&DeviceRow>> = vec![None; computed];
    let mut taken = Vec::new();
    for &(row, seq) in rows {
        if let (Some(Some(d)), Some(slot)) = (device.get(seq), per_row.get_mut(row)) {
            *slot = Some(d);
            taken.push((row, seq));
        }
    }
    let mut out = Layout {
        settings: Vec::with_capacity(computed),
        offsets: vec![0],
        edits: Vec::new(),
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
    /// `(batch index, token)` for each of `taken`.
    pub fn sample(
        &mut self,
        gpu: &Gpu,
        logits: &mut CudaSlice<f32>,
        plan: &Layout,
        taken: &[(usize, usize)],
        vocab: usize,
    ) -> Result<Vec<(usize, i32)>> {
        let rows = plan.settings.len();
        if taken.is_empty() || rows == 0 {
            return Ok(Vec::new());
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
        let total = plan.edits.len();
        launch::apply_logit_edits(gpu, logits, &self.edits, &self.offsets, total, rows, vocab)?;
        launch::sample_rows(gpu, logits, &self.settings, &mut self.sampled, rows, vocab)?;
        st.memcpy_dtoh(&self.sampled.slice(0..rows), &mut self.ids)?;
        let ids = self.ids.as_slice()?;
        Ok(taken.iter().map(|&(row, seq)| (seq, ids[row])).collect())
    }
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
    }

    #[test]
    fn a_prefill_step_maps_compacted_rows_to_their_batch_entries() {
        // Prefill: logits rows are compacted; batch entry 1 wants none.
        let device = [row(1, &[3]), None, row(2, &[4, 5])];
        let (plan, taken) = layout(&[(0, 0), (1, 2)], &device, 2);
        assert_eq!(taken, [(0, 0), (1, 2)]);
        assert_eq!(plan.offsets, [0, 1, 3]);
        assert_eq!(plan.settings.len(), 2);
    }
}
