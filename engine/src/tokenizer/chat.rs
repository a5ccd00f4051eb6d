//! Chat templates: the model's `tokenizer.chat_template` (Jinja) rendered with minijinja, set up
//! like Hugging Face's `apply_chat_template` (trim_blocks, lstrip_blocks, Python string methods,
//! `raise_exception`, `strftime_now`). Models without a template get ChatML.

use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};

use super::Error;

/// ChatML, used when the model file has no `tokenizer.chat_template`.
pub const FALLBACK_CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] \
    + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}\
    {{ '<|im_start|>assistant\\n' }}{% endif %}";

const TEMPLATE_NAME: &str = "chat_template";

/// One chat message; the server may pass richer serialisable messages to
/// [`ChatTemplate::render`] (tool calls, names), this is the common shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template with the model's BOS and EOS text.
#[derive(Debug)]
pub struct ChatTemplate {
    /// The compiled template, or why it did not compile (reported when a chat is rendered, so
    /// a model with a broken template still serves plain completions).
    env: Result<Environment<'static>, String>,
    /// The template's text (tool-call syntax detection reads it).
    source: String,
    /// Whether the template reads the `tools` variable (renders tools itself).
    renders_tools: bool,
    is_fallback: bool,
    bos_token: String,
    eos_token: String,
}

/// The variables the server sets in a template's context; a request's
/// `chat_template_kwargs` may add any other.
pub const SERVER_CONTEXT_KEYS: [&str; 5] = [
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

/// Extra template variables (a request's `chat_template_kwargs`, e.g. Qwen3's
/// `enable_thinking`).
pub type TemplateKwargs = serde_json::Map<String, serde_json::Value>;

#[derive(Serialize)]
struct Context<'a, M> {
    /// Serialised first, so the server's own variables below win over a colliding key.
    #[serde(flatten)]
    kwargs: Option<&'a TemplateKwargs>,
    messages: &'a [M],
    /// OpenAI's tool list, as Hugging Face passes it (`none` without tools).
    tools: Option<&'a serde_json::Value>,
    add_generation_prompt: bool,
    bos_token: &'a str,
    eos_token: &'a str,
}

impl ChatTemplate {
    /// Compiles `source` (or [`FALLBACK_CHATML`] when `None`).
    pub fn new(source: Option<&str>, bos_token: &str, eos_token: &str) -> Self {
        let is_fallback = source.is_none();
        let source = source.unwrap_or(FALLBACK_CHATML).to_string();
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("strftime_now", super::strftime::strftime_now);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        let env = env
            .add_template_owned(TEMPLATE_NAME, source.clone())
            .map(|()| env)
            .map_err(|e| describe(&e));
        let renders_tools = env.as_ref().is_ok_and(|env| {
            env.get_template(TEMPLATE_NAME)
                .is_ok_and(|t| t.undeclared_variables(false).contains("tools"))
        });
        Self {
            env,
            source,
            renders_tools,
            is_fallback,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        }
    }

    /// Whether the model had no template and ChatML is used.
    pub fn is_fallback(&self) -> bool {
        self.is_fallback
    }

    /// The template's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template renders a `tools` list itself (else the server writes the tools
    /// into the system message).
    pub fn renders_tools(&self) -> bool {
        self.renders_tools
    }

    /// Why the template does not compile, if it does not.
    pub fn compile_error(&self) -> Option<&str> {
        self.env.as_ref().err().map(String::as_str)
    }

    /// Renders `messages` (and `tools`, for templates that read them); `add_generation_prompt`
    /// appends the assistant turn's opening; `kwargs` are further variables (one named in
    /// [`SERVER_CONTEXT_KEYS`] is shadowed by the server's value).
    pub fn render<M: Serialize>(
        &self,
        messages: &[M],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        kwargs: Option<&TemplateKwargs>,
    ) -> Result<String, Error> {
        let env = self
            .env
            .as_ref()
            .map_err(|e| Error::ChatTemplate(e.clone()))?;
        let template = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| Error::ChatTemplate(describe(&e)))?;
        let context = Context {
            kwargs,
            messages,
            tools,
            add_generation_prompt,
            bos_token: &self.bos_token,
            eos_token: &self.eos_token,
        };
        template
            .render(context)
            .map_err(|e| Error::ChatTemplate(describe(&e)))
    }
}

/// The error with its causes and the template line, on one line.
fn describe(err: &minijinja::Error) -> String {
    let mut text = match err.detail() {
        Some(detail) => format!("{}: {detail}", err.kind()),
        None => err.to_string(),
    };
    if let Some(line) = err.line() {
        text.push_str(&format!(" (template line {line})"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kwargs_reach_the_template_and_never_replace_the_servers_variables() {
        let source = "{{ messages | length }}{% if add_generation_prompt %}>{% endif %}\
            {% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}";
        let template = ChatTemplate::new(Some(source), "", "");
        let messages = [ChatMessage::new("user", "hi")];
        let render = |kwargs: serde_json::Value| {
            let kwargs = kwargs.as_object().cloned();
            template
                .render(&messages, None, true, kwargs.as_ref())
                .expect("the template renders")
        };
        assert_eq!(
            template
                .render(&messages, None, true, None)
                .expect("the template renders"),
            "1>"
        );
        assert_eq!(render(serde_json::json!({"enable_thinking": true})), "1>");
        assert_eq!(
            render(serde_json::json!({"enable_thinking": false})),
            "1><think></think>"
        );
        assert_eq!(
            render(serde_json::json!({"messages": [], "add_generation_prompt": false})),
            "1>",
            "the server's variables win"
        );
    }
}
