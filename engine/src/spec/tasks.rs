//! The repetitive tasks speculative decoding is measured and checked on: a text to rewrite
//! word for word and one to extract quoted lines from, both copying from the prompt, where
//! prompt-lookup drafts are accepted most (the benchmark example and the GPU check).

/// The text both tasks work on.
pub const TEXT: &str = "The harbour town woke slowly. \"Bring the nets in before noon,\" said the \
old fisherman to his son. The boy nodded and ran down to the boats, where the gulls were \
already circling. At the market, the baker called out, \"Fresh bread, still warm from the \
oven!\" and a queue formed at once. By midday the wind had turned, and the harbour master \
shouted, \"Every boat stays in today.\" Nobody argued; they had all seen the clouds gather \
over the hills. In the evening the son asked, \"Will we go out tomorrow?\" and his father \
answered, \"If the sea lets us, we will.\"";

/// `(name, instruction)`: the instruction goes before [`TEXT`] in one user message.
pub const TASKS: [(&str, &str); 2] = [
    (
        "rewrite",
        "Rewrite the following text word for word, keeping every sentence:",
    ),
    (
        "quotes",
        "Extract every quoted line from the following text, one per line, with the quotes:",
    ),
];

/// The user message of a task.
pub fn message(instruction: &str) -> String {
    format!("{instruction}\n\n{TEXT}")
}
