//! Fuzz target: the gateway's failover splice (`gateway/src/proxy/failover/`). Any upstream
//! byte stream, cut into chunks of any size and broken at any point, must go through the
//! event cutter, the splice and the continuation builder without a panic; every chunk the
//! splice rewrites stays the JSON object it was (less the token ids, with the client's head);
//! and every continuation body built from a JSON request is JSON.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

/// The gateway's `Usage` (in `vocab/`, with the other words every layer speaks).
mod vocab {
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct Usage {
        pub prompt_tokens: u64,
        pub completion_tokens: u64,
        pub cached_tokens: u64,
    }
}

#[path = "../../gateway/src/proxy/sse/events.rs"]
mod events;
#[allow(dead_code)]
#[path = "../../gateway/src/json_members.rs"]
mod json_members;
#[allow(dead_code)]
#[path = "../../gateway/src/proxy/usage.rs"]
mod usage;
// The splice's files, without the shell around them (`mod.rs`, `body.rs`).
#[allow(dead_code)]
#[path = "../../gateway/src/proxy/failover"]
mod failover {
    #[path = "chunk.rs"]
    pub mod chunk;
    #[path = "continuation.rs"]
    pub mod continuation;
    #[path = "reshape.rs"]
    pub mod reshape;
    #[path = "splice.rs"]
    pub mod splice;
    #[path = "token_prompt.rs"]
    pub mod token_prompt;
}

use bytes::Bytes;
use events::{Cut, Events};
use failover::continuation::{self, Api};
use failover::splice::{Plan, Shape, Splice, Step};

const BODIES: [(&[u8], Api); 3] = [
    (
        br#"{"model":"m","prompt":"x","max_tokens":9,"seed":3,"stream":true}"#,
        Api::Completions,
    ),
    (
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#,
        Api::Chat,
    ),
    (
        br#"{"prompt":[1,2],"tokenscale_resume":{"token_ids":[4]}}"#,
        Api::Completions,
    ),
];

/// The property, for any input.
fn check(data: &[u8]) {
    let Some((&[size, flags], stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let size = usize::from(size.max(1));
    let shape = Shape {
        chat: flags & 16 == 16,
        parsed: flags & 32 == 32,
        keeps_ids: flags & 64 == 64,
    };
    let mut splice = Splice::new(flags & 1 == 1).with_shape(shape);
    let mut events = Events::default();
    let mut cuts = Vec::new();
    'stream: for (n, chunk) in stream.chunks(size).enumerate() {
        events.cut(Bytes::copy_from_slice(chunk), &mut cuts);
        for piece in cuts.drain(..) {
            let Cut::Event { whole, text_len } = piece else {
                continue;
            };
            let (step, _usage) = splice.event(&whole, text_len);
            if let Step::Forward(out) = &step
                && out != &whole
            {
                // A rewritten chunk: JSON object in, JSON object out.
                let json = |bytes: &[u8]| {
                    let text = bytes.strip_prefix(b"data: ").unwrap_or(bytes);
                    serde_json::from_slice::<serde_json::Value>(text.trim_ascii()).ok()
                };
                if json(&whole[..text_len]).is_some_and(|v| v.is_object()) {
                    let got = json(&out[..out.len() - (whole.len() - text_len)]);
                    assert!(got.is_some_and(|v| v.is_object()), "{}", out.escape_ascii());
                }
            }
            // Break after some chunk, as a replica would, and continue as the plan says.
            if step == Step::Broken || (flags >> 1) as usize == n {
                for (body, api) in BODIES {
                    if let Plan::Resume(how) = splice.plan(flags & 4 == 4) {
                        let body = Bytes::from_static(body);
                        if let Ok(next) = continuation::body(&body, api, how, &splice) {
                            assert!(
                                serde_json::from_slice::<serde_json::Value>(&next.body).is_ok(),
                                "{}",
                                next.body.escape_ascii()
                            );
                        }
                        splice.resumed(how);
                    }
                }
                if flags & 8 == 8 {
                    break 'stream;
                }
            }
        }
    }
    let _ = events.finish();
    let _ = splice.plan(true);
}

fuzz_main!("stream_splice");
