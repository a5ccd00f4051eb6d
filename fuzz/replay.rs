//! A fuzz target without libFuzzer, on the stable toolchain: every input of its committed
//! corpus, then seeded mutations of them (bit flips, interesting bytes, insertions, cuts,
//! splices, JSON and SSE tokens) for a bounded time. A panic prints the input, saves it under
//! `fuzz/artifacts/<target>/` and fails the run. CI runs each target this way
//! (`tests/tests/fuzz_replay.rs`); `cargo fuzz run <target>` explores with coverage instead.
//!
//! Usage: `<target binary> [corpus folder] [--seconds N]`.
//!
//! Each target includes this file first (`#[macro_use] mod replay;`) and ends with
//! `fuzz_main!("name");` after defining `fn check(data: &[u8])`.

// Under cargo-fuzz the replay itself is not used.
#![cfg_attr(fuzzing, allow(dead_code))]

/// The target's entry point: libFuzzer's under cargo-fuzz, else the corpus replay.
macro_rules! fuzz_main {
    ($name:literal) => {
        #[cfg(fuzzing)]
        libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));

        #[cfg(not(fuzzing))]
        fn main() {
            replay::run($name, check);
        }
    };
}

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Tokens a mutation may insert: what the parsers under test branch on.
const DICTIONARY: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"\\",
    b"\\u0000",
    b"null",
    b"true",
    b"-1",
    b"1e999",
    b"data: ",
    b"\n\n",
    b"\r\n",
    b"\r",
    b"[DONE]",
    b"\"usage\"",
    b"\"choices\"",
    b"\"tokenscale_token_ids\"",
    b"\"finish_reason\":\"stop\"",
    b"GGUF",
    b"\xff\xff\xff\xff",
];

/// Runs `check` over the corpus and its mutations; exits 1 on the first panic.
pub fn run(target: &str, check: fn(&[u8])) {
    let mut args = std::env::args().skip(1);
    let mut corpus_dir = None;
    let mut seconds = 5.0;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => {
                seconds = args.next().and_then(|s| s.parse().ok()).unwrap_or(seconds);
            }
            _ => corpus_dir = Some(PathBuf::from(arg)),
        }
    }
    let dir = corpus_dir.unwrap_or_else(|| Path::new("fuzz/corpus").join(target));
    let corpus = read_corpus(&dir);
    if corpus.is_empty() {
        eprintln!("fuzz {target}: no corpus in {}", dir.display());
        std::process::exit(2);
    }
    // Panics are reported here, with their input; the default hook's message would repeat.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for (path, input) in &corpus {
        if let Err(panic) = catch_unwind(|| check(input)) {
            std::panic::set_hook(hook);
            fail(
                target,
                input,
                &format!("corpus file {}", path.display()),
                &panic,
            );
        }
    }
    let mut rng = seed(target);
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let mut runs = 0u64;
    while start.elapsed() < budget {
        let input = mutate(&corpus, &mut rng);
        runs += 1;
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&input))) {
            std::panic::set_hook(hook);
            fail(target, &input, &format!("mutated input {runs}"), &panic);
        }
    }
    std::panic::set_hook(hook);
    println!(
        "fuzz {target}: {} corpus inputs and {runs} mutations in {:.1}s, no failure",
        corpus.len(),
        start.elapsed().as_secs_f64()
    );
}

fn read_corpus(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(&p).ok().map(|bytes| (p, bytes)))
        .collect()
}

fn fail(target: &str, input: &[u8], what: &str, panic: &Box<dyn std::any::Any + Send>) -> ! {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    let dir = Path::new("fuzz/artifacts").join(target);
    let saved = std::fs::create_dir_all(&dir).and_then(|()| {
        let path = dir.join(format!("crash-{:016x}", fnv(input)));
        std::fs::write(&path, input).map(|()| path)
    });
    eprintln!(
        "fuzz {target}: {what} panicked: {message}\ninput ({} bytes): {}\nsaved: {saved:?}",
        input.len(),
        input.escape_ascii()
    );
    std::process::exit(1);
}

/// xorshift64*: a fixed sequence per target, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn seed(target: &str) -> Rng {
    Rng(fnv(target.as_bytes()) | 1)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A corpus input changed by one to four mutations.
fn mutate(corpus: &[(PathBuf, Vec<u8>)], rng: &mut Rng) -> Vec<u8> {
    let mut input = corpus[rng.below(corpus.len())].1.clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(input.len() + 1);
        match rng.below(7) {
            0 if !input.is_empty() => {
                let i = at.min(input.len() - 1);
                input[i] ^= 1 << rng.below(8);
            }
            1 if !input.is_empty() => {
                let i = at.min(input.len() - 1);
                input[i] = [0, 0x7f, 0x80, 0xff, b'0', b'9', b' '][rng.below(7)];
            }
            2 => {
                let token = DICTIONARY[rng.below(DICTIONARY.len())];
                input.splice(at..at, token.iter().copied());
            }
            3 if !input.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(input.len());
                input.drain(at.min(end)..end);
            }
            4 if !input.is_empty() => {
                // Repeat a piece of the input.
                let start = rng.below(input.len());
                let end = (start + 1 + rng.below(32)).min(input.len());
                let piece = input[start..end].to_vec();
                input.splice(at..at, piece);
            }
            5 => {
                // Splice in a piece of another corpus input.
                let other = &corpus[rng.below(corpus.len())].1;
                if !other.is_empty() {
                    let start = rng.below(other.len());
                    let end = (start + 1 + rng.below(64)).min(other.len());
                    input.splice(at..at, other[start..end].iter().copied());
                }
            }
            _ => input.truncate(at),
        }
    }
    input
}
