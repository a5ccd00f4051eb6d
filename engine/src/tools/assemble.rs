//! What a client rebuilds from a run of streamed deltas: the content and each call's name and
//! arguments. Shared by the parsers' tests and the `tool_calls` fuzz target (which compiles
//! this file directly), so both check the same reassembly.

use tokenscale_common::openai::merge_tool_call_delta;

use super::stream::StreamOut;

/// (content, [(name, arguments)]) from a run of deltas; calls must start in index order.
pub(crate) fn assemble(outs: Vec<StreamOut>) -> (String, Vec<(String, String)>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    for out in outs {
        content.push_str(&out.content);
        for d in &out.tool_calls {
            assert!(
                d.id.is_none() || d.index as usize == calls.len(),
                "calls start in order"
            );
            merge_tool_call_delta(&mut calls, d);
        }
    }
    let calls = calls
        .into_iter()
        .map(|c| (c.function.name, c.function.arguments))
        .collect();
    (content, calls)
}
