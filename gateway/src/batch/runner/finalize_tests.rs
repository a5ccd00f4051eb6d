//! Finalizer: whose turn it is to write a batch's files, and the ended record it writes.

use super::*;
use crate::batch::types::tests::sample;

const LEASE_MS: u64 = 30_000;

fn held_by(pod: &str, until_ms: u64) -> BatchRecord {
    let mut batch = sample();
    batch.status = BatchStatus::Finalizing;
    batch.version = 3;
    batch.finalizer = Some((pod.to_string(), until_ms));
    batch
}

/// The turn that takes a `held_by` batch over at `now_ms`: one lease from then, and a new
/// version, so two pods taking it at once cannot both win.
fn taken_at(now_ms: u64) -> Turn {
    let mut taken = held_by("me", now_ms + LEASE_MS);
    taken.version = 4;
    Turn::Take(Box::new(taken))
}

#[test]
fn nobody_holding_the_lease_means_this_pod_takes_it_for_one_lease() {
    let mut batch = sample();
    batch.version = 3;
    let mut expected = batch.clone();
    // A new version, so two pods taking it at once cannot both win.
    expected.version = 4;
    expected.finalizer = Some(("me".to_string(), 31_000));
    assert_eq!(
        turn(&batch, "me", true, 1_000, LEASE_MS),
        Turn::Take(Box::new(expected))
    );
}

#[test]
fn this_pods_own_lease_is_used_as_it_is() {
    let batch = held_by("me", 500);
    // Even lapsed: nobody else took it, and the files this pod writes are the same.
    assert_eq!(turn(&batch, "me", true, 1_000, LEASE_MS), Turn::Mine);
}

#[test]
fn a_live_peers_lease_is_left_alone_and_a_lapsed_one_is_taken_over() {
    let live = held_by("peer", 2_000);
    assert_eq!(turn(&live, "me", true, 1_000, LEASE_MS), Turn::Elsewhere);
    let lapsed = held_by("peer", 1_000);
    assert_eq!(turn(&lapsed, "me", true, 1_000, LEASE_MS), taken_at(1_000));
}

#[test]
fn on_a_local_store_another_name_is_a_previous_run_and_is_taken_over_at_once() {
    let batch = held_by("killed-run", 90_000);
    assert_eq!(turn(&batch, "me", false, 1_000, LEASE_MS), taken_at(1_000));
}

#[test]
fn the_ended_record_carries_its_files_counts_and_the_closings_status_and_time() {
    let progress = Progress {
        completed: 2,
        failed: 1,
        ..Progress::default()
    };
    let cases = [
        (Closing::Completed, BatchStatus::Completed),
        (Closing::Expired, BatchStatus::Expired),
        (Closing::Cancelled, BatchStatus::Cancelled),
    ];
    for (closing, status) in cases {
        let stored = Stored {
            output_id: "file-out".into(),
            error_id: Some("file-err".into()),
            progress,
        };
        let done = ended(held_by("me", 9), closing, stored, 77);
        assert_eq!(done.status, status, "{closing:?}");
        assert_eq!(done.version, 4);
        assert_eq!(done.finalizer, None);
        assert_eq!(done.progress, progress);
        assert_eq!(done.output_file_id.as_deref(), Some("file-out"));
        assert_eq!(done.error_file_id.as_deref(), Some("file-err"));
        let at = [done.completed_at, done.expired_at, done.cancelled_at];
        let expected_at = match closing {
            Closing::Completed => [Some(77), None, None],
            Closing::Expired => [None, Some(77), None],
            Closing::Cancelled => [None, None, Some(77)],
        };
        assert_eq!(at, expected_at, "{closing:?}");
    }
}

#[test]
fn a_batch_with_no_failed_line_has_no_error_file() {
    let stored = Stored {
        output_id: "file-out".into(),
        error_id: None,
        progress: Progress::default(),
    };
    let done = ended(held_by("me", 9), Closing::Completed, stored, 1);
    assert_eq!(done.error_file_id, None);
    assert_eq!(done.output_file_id.as_deref(), Some("file-out"));
}
