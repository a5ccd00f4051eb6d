//! Incremental block-table uploads (pure): the host keeps what the device's block-table
//! matrix holds, and a step uploads only the entries that changed since the last one (blocks
//! appended, sequences finished, replaced or moved to another row), not the whole matrix.

use std::ops::Range;

/// Unchanged entries between two changed runs up to which one copy covers both (a copy has a
/// fixed cost, a few hundred bytes more do not).
const MERGE_GAP: usize = 64;
/// Most copies per step; beyond it the changed span goes in one copy.
const MAX_RUNS: usize = 16;

/// What the device's block-table buffer holds, entry for entry (zero-filled at allocation, as
/// the device buffer is).
#[derive(Debug, Clone, Default)]
pub struct TableMirror {
    held: Vec<i32>,
}

impl TableMirror {
    /// A mirror of a zeroed device buffer of `len` entries.
    pub fn new(len: usize) -> Self {
        Self { held: vec![0; len] }
    }

    /// Forgets what the device holds (after a failed upload): the next step uploads every
    /// entry it uses.
    pub fn invalidate(&mut self) {
        self.held.fill(i32::MIN);
    }

    /// The ranges of `table` (the step's matrix, from entry 0) to upload so the device holds
    /// it, recorded as uploaded: changed runs, merged across short gaps, at most
    /// [`MAX_RUNS`]. Entries past `table.len()` keep what they held (rows no step reads).
    pub fn changes(&mut self, table: &[i32]) -> Vec<Range<usize>> {
        if self.held.len() < table.len() {
            self.held.resize(table.len(), 0);
        }
        let mut runs: Vec<Range<usize>> = Vec::new();
        for (i, (held, &new)) in self.held.iter_mut().zip(table).enumerate() {
            if *held == new {
                continue;
            }
            *held = new;
            match runs.last_mut() {
                Some(run) if i - run.end <= MERGE_GAP => run.end = i + 1,
                _ => runs.push(i..i + 1),
            }
        }
        if runs.len() > MAX_RUNS {
            let span = runs[0].start..runs[runs.len() - 1].end;
            runs = vec![span];
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `changes` as `(start, end)` pairs.
    fn spans(mirror: &mut TableMirror, table: &[i32]) -> Vec<(usize, usize)> {
        let runs = mirror.changes(table);
        runs.into_iter().map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn the_first_step_uploads_its_nonzero_entries_and_a_repeat_uploads_nothing() {
        let mut mirror = TableMirror::new(8);
        let table = [3, 4, 0, 0, 7, 0, 0, 0];
        assert_eq!(spans(&mut mirror, &table), [(0, 5)]);
        assert!(mirror.changes(&table).is_empty());
    }

    #[test]
    fn an_appended_block_uploads_one_entry() {
        let width = 100;
        let mut table = vec![0; 3 * width];
        table[..2].copy_from_slice(&[5, 6]);
        table[width..width + 1].copy_from_slice(&[9]);
        let mut mirror = TableMirror::new(table.len());
        mirror.changes(&table);
        // Sequence 1 grows into a second block.
        table[width + 1] = 11;
        assert_eq!(spans(&mut mirror, &table), [(width + 1, width + 2)]);
    }

    #[test]
    fn nearby_changes_merge_and_many_runs_become_one_span() {
        let mut mirror = TableMirror::new(4000);
        let mut table = vec![0; 4000];
        table[10] = 1;
        table[60] = 2; // within the gap of 10: one copy
        table[1000] = 3;
        assert_eq!(spans(&mut mirror, &table), [(10, 61), (1000, 1001)]);
        // A reshuffle touching entries far apart everywhere: one span.
        for i in 0..40 {
            table[i * 100 + 5] = 7 + i as i32;
        }
        assert_eq!(spans(&mut mirror, &table), [(5, 3906)]);
        assert!(mirror.changes(&table).is_empty());
    }

    #[test]
    fn after_a_failed_upload_everything_goes_again() {
        let mut mirror = TableMirror::new(4);
        mirror.changes(&[1, 0, 0, 0]);
        mirror.invalidate();
        assert_eq!(spans(&mut mirror, &[1, 0, 0, 0]), [(0, 4)]);
    }

    #[test]
    fn a_finished_sequence_replaced_by_another_uploads_its_row() {
        let width = 4;
        let mut mirror = TableMirror::new(2 * width);
        mirror.changes(&[1, 2, 3, 0, 4, 5, 0, 0]);
        // Row 0 now holds another sequence: its entries change, row 1's do not.
        assert_eq!(spans(&mut mirror, &[8, 2, 0, 0, 4, 5, 0, 0]), [(0, 3)]);
    }
}
