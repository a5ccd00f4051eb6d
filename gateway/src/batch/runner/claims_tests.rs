//! Claim book: exact running lines, tries and in-flight counts after each event of a line.

use super::*;

/// A book whose handles are plain names, so a test can see which ones it gets back.
type Book = ClaimBook<&'static str>;

fn in_flight(book: &Book) -> Vec<(&str, u64)> {
    book.in_flight_by_model().collect()
}

#[test]
fn a_new_book_runs_nothing() {
    let book = Book::default();
    assert_eq!(book.in_flight("m"), 0);
    assert_eq!(in_flight(&book), vec![]);
    assert!(!book.runs_lines_of("b"));
    assert_eq!(book.running("b"), Vec::<u32>::new());
    assert_eq!(book.running_by_batch(), vec![]);
    assert_eq!(book.tries("b", 0), 0);
    assert_eq!(book.handles("b"), Vec::<&str>::new());
}

#[test]
fn claims_count_per_model_and_list_per_batch_in_line_order() {
    let mut book = Book::default();
    book.claim("b1", "m", 7);
    book.claim("b1", "m", 2);
    book.claim("b2", "n", 0);
    assert_eq!(in_flight(&book), vec![("m", 2), ("n", 1)]);
    assert_eq!(book.running("b1"), vec![2, 7]);
    assert_eq!(
        book.running_by_batch(),
        vec![("b1".to_string(), vec![2, 7]), ("b2".to_string(), vec![0])]
    );
    assert!(book.runs_lines_of("b1") && book.runs_lines_of("b2"));
}

#[test]
fn a_claim_runs_before_its_task_is_attached_and_stops_once_it_is() {
    let mut book = Book::default();
    let claim = book.claim("b", "m", 3);
    // Counted from the claim on: the store already leased the line to this pod.
    assert_eq!(book.running("b"), vec![3]);
    assert_eq!(book.handles("b"), Vec::<&str>::new());
    assert_eq!(book.attach("b", 3, claim, "task-3"), None);
    assert_eq!(book.handles("b"), vec!["task-3"]);
}

#[test]
fn leaving_frees_the_line_and_the_models_count_which_stays_listed_at_zero() {
    let mut book = Book::default();
    let a = book.claim("b", "m", 0);
    let b = book.claim("b", "m", 1);
    book.left("b", "m", 0, a);
    assert_eq!(book.running("b"), vec![1]);
    assert_eq!(in_flight(&book), vec![("m", 1)]);
    book.left("b", "m", 1, b);
    assert!(!book.runs_lines_of("b"));
    assert_eq!(book.running_by_batch(), vec![]);
    // The gauge reads 0, not the last count.
    assert_eq!(in_flight(&book), vec![("m", 0)]);
    // A second leave cannot go below zero.
    book.left("b", "m", 1, b);
    assert_eq!(in_flight(&book), vec![("m", 0)]);
}

#[test]
fn an_old_claim_leaving_keeps_a_newer_claim_of_the_same_line() {
    let mut book = Book::default();
    let old = book.claim("b", "m", 4);
    assert_eq!(book.attach("b", 4, old, "old"), None);
    let new = book.claim("b", "m", 4);
    assert_ne!(old, new);
    assert_eq!(book.attach("b", 4, new, "new"), None);
    assert_eq!(in_flight(&book), vec![("m", 2)]);
    book.left("b", "m", 4, old);
    // The new run is still renewed and stoppable; both runs counted off one each.
    assert_eq!(book.running("b"), vec![4]);
    assert_eq!(book.handles("b"), vec!["new"]);
    assert_eq!(in_flight(&book), vec![("m", 1)]);
    book.left("b", "m", 4, new);
    assert_eq!(book.running("b"), Vec::<u32>::new());
    assert_eq!(in_flight(&book), vec![("m", 0)]);
}

#[test]
fn attaching_to_a_claim_no_longer_in_the_book_gives_the_handle_back() {
    let mut book = Book::default();
    let claim = book.claim("b", "m", 0);
    book.left("b", "m", 0, claim);
    assert_eq!(book.attach("b", 0, claim, "late"), Some("late"));
    assert_eq!(book.attach("other", 0, claim, "stray"), Some("stray"));
    assert_eq!(book.handles("b"), Vec::<&str>::new());
}

#[test]
fn refusals_give_a_line_back_until_the_last_try_then_give_it_up_and_start_over() {
    let mut book = Book::default();
    for n in 1..MAX_TRIES {
        assert_eq!(book.refused("b", 5), Refusal::GiveBack { tries: n });
        assert_eq!(book.tries("b", 5), n);
    }
    assert_eq!(book.refused("b", 5), Refusal::GiveUp { tries: MAX_TRIES });
    assert_eq!(book.tries("b", 5), 0);
    // Nothing is left of the batch once its only line gave up and nothing runs.
    assert_eq!(book.running_by_batch(), vec![]);
    assert_eq!(book.refused("b", 5), Refusal::GiveBack { tries: 1 });
}

#[test]
fn tries_are_counted_per_line_and_outlive_the_run_that_was_refused() {
    let mut book = Book::default();
    let claim = book.claim("b", "m", 0);
    assert_eq!(book.refused("b", 0), Refusal::GiveBack { tries: 1 });
    book.left("b", "m", 0, claim);
    // Claimed again later: the count goes on from where it was.
    let again = book.claim("b", "m", 0);
    assert_eq!(book.refused("b", 0), Refusal::GiveBack { tries: 2 });
    assert_eq!(book.refused("b", 1), Refusal::GiveBack { tries: 1 });
    assert_eq!(book.refused("c", 0), Refusal::GiveBack { tries: 1 });
    book.left("b", "m", 0, again);
    assert_eq!(
        (book.tries("b", 0), book.tries("b", 1), book.tries("c", 0)),
        (2, 1, 1)
    );
}

#[test]
fn a_finished_batch_is_forgotten_but_its_runs_still_count_off_their_model() {
    let mut book = Book::default();
    let claim = book.claim("b", "m", 0);
    assert_eq!(book.attach("b", 0, claim, "t"), None);
    book.claim("other", "m", 0);
    assert_eq!(book.refused("b", 1), Refusal::GiveBack { tries: 1 });
    book.finished("b");
    assert_eq!(book.running("b"), Vec::<u32>::new());
    assert_eq!(book.tries("b", 1), 0);
    assert_eq!(book.handles("b"), Vec::<&str>::new());
    assert_eq!(in_flight(&book), vec![("m", 2)]);
    // The stopped run leaving afterwards: counted off, nothing else touched.
    book.left("b", "m", 0, claim);
    assert_eq!(in_flight(&book), vec![("m", 1)]);
    assert_eq!(book.running("other"), vec![0]);
}

#[test]
fn batches_that_ended_elsewhere_are_those_running_here_but_not_active() {
    let mut book = Book::default();
    book.claim("kept", "m", 0);
    book.claim("gone", "m", 0);
    // Only refused here, nothing running: nothing to stop.
    assert_eq!(book.refused("idle", 0), Refusal::GiveBack { tries: 1 });
    assert_eq!(book.ended_elsewhere(&["kept"]), vec!["gone".to_string()]);
    assert_eq!(
        book.ended_elsewhere(&["kept", "gone"]),
        Vec::<String>::new()
    );
    assert_eq!(
        book.ended_elsewhere(&[]),
        vec!["gone".to_string(), "kept".to_string()]
    );
}

#[test]
fn handles_are_those_of_the_batchs_attached_lines_in_line_order() {
    let mut book = Book::default();
    let two = book.claim("b", "m", 2);
    let one = book.claim("b", "m", 1);
    book.claim("b", "m", 0);
    let other = book.claim("c", "m", 0);
    assert_eq!(book.attach("b", 2, two, "two"), None);
    assert_eq!(book.attach("b", 1, one, "one"), None);
    assert_eq!(book.attach("c", 0, other, "c0"), None);
    assert_eq!(book.handles("b"), vec!["one", "two"]);
    assert_eq!(book.handles("c"), vec!["c0"]);
}
