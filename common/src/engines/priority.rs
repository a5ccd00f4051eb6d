//! How each engine kind learns a request's priority class: the flags that turn its priority
//! scheduling on (the operator renders them) and how a replica started with given flags takes
//! the class (the gateway sends it so), one set of rules for both.

use super::EngineKind;
use crate::priority::Priority;

/// The first SGLang release with `--enable-priority-scheduling` and the request's `priority`
/// field (sgl-project/sglang#8746, merged after v0.5.2 was cut).
pub const SGLANG_PRIORITY_SINCE: (u32, u32, u32) = (0, 5, 3);

/// Distance between the two classes' values: SGLang preempts a running request only for one
/// whose priority differs by more than `--priority-scheduling-preemption-threshold` (10 by
/// default); vLLM only compares them.
const CLASS_GAP: i64 = 100;

/// Which requests an engine's integer `priority` puts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorityOrder {
    /// Lower values first (vLLM; SGLang with `--schedule-low-priority-values-first`).
    LowerFirst,
    /// Higher values first (SGLang's default).
    HigherFirst,
}

/// How a replica takes a request's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EnginePriority {
    /// tokenscale's engine: the `x-tokenscale-priority` header; running batch work is
    /// preempted for interactive work.
    #[default]
    Header,
    /// An integer `priority` member of the request body, in the engine's `order`; `preempts`
    /// when the engine takes slots from running batch work for interactive work.
    Field {
        /// Which values go first.
        order: PriorityOrder,
        /// Whether running batch work is preempted.
        preempts: bool,
    },
    /// No priority scheduling: the engine serves in arrival order, and the gateway's pacing
    /// (batch lines only start in room interactive work leaves) is all there is.
    PacingOnly,
}

impl EnginePriority {
    /// How a replica of `kind` started with `args` (all of its flags) takes the class.
    pub fn of_args(kind: EngineKind, args: &[String]) -> Self {
        let has = |flag: &str| args.iter().any(|a| a == flag);
        match kind {
            EngineKind::Tokenscale => Self::Header,
            EngineKind::Vllm if flag_value(args, "--scheduling-policy") == Some("priority") => {
                Self::Field {
                    order: PriorityOrder::LowerFirst,
                    preempts: true,
                }
            }
            EngineKind::Sglang if has("--enable-priority-scheduling") => Self::Field {
                order: if has("--schedule-low-priority-values-first") {
                    PriorityOrder::LowerFirst
                } else {
                    PriorityOrder::HigherFirst
                },
                preempts: !has("--disable-priority-preemption"),
            },
            EngineKind::Vllm | EngineKind::Sglang | EngineKind::Llamacpp => Self::PacingOnly,
        }
    }

    /// The body's `priority` for a request of `class`, when the engine reads one.
    pub fn body_priority(self, class: Priority) -> Option<i64> {
        let Self::Field { order, .. } = self else {
            return None;
        };
        let first = matches!(class, Priority::Interactive);
        Some(match (order, first) {
            (PriorityOrder::LowerFirst, true) | (PriorityOrder::HigherFirst, false) => 0,
            (PriorityOrder::LowerFirst, false) | (PriorityOrder::HigherFirst, true) => CLASS_GAP,
        })
    }

    /// Whether the engine frees slots held by batch work for interactive work: when it does
    /// not, the gateway counts batch-held slots against interactive admission too.
    pub fn preempts_batch(self) -> bool {
        match self {
            Self::Header => true,
            Self::Field { preempts, .. } => preempts,
            Self::PacingOnly => false,
        }
    }
}

/// What the operator adds to an engine's arguments for priority, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityRender {
    /// Flags to append (before the spec's own `engine.args`).
    pub flags: &'static [&'static str],
    /// The outcome in words, for the pod's annotation and the docs.
    pub note: String,
}

/// The priority flags for a replica of `kind` running `image` (`None`: the release's pinned
/// default image of the kind, which has priority scheduling) with the spec's `user_args`. A
/// choice the user made in `user_args` is kept; SGLang gets its flag only from the version
/// that has it (read from the image tag; an unknown tag gets none: pass the flag in
/// `engine.args` to turn it on).
pub fn render_flags(kind: EngineKind, image: Option<&str>, user_args: &[String]) -> PriorityRender {
    let (flags, why_not): (&'static [&'static str], Option<String>) = match kind {
        EngineKind::Tokenscale => (&[], None),
        EngineKind::Llamacpp => (&[], Some("llama-server has no priority scheduling".into())),
        EngineKind::Vllm => match flag_value(user_args, "--scheduling-policy") {
            Some(policy) => (
                &[],
                Some(format!("engine.args set --scheduling-policy {policy}")),
            ),
            None => (&["--scheduling-policy", "priority"], None),
        },
        EngineKind::Sglang => sglang_flags(image, user_args),
    };
    let mut all: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    all.extend(user_args.iter().cloned());
    let engine = EnginePriority::of_args(kind, &all);
    let note = match (engine, why_not) {
        (EnginePriority::Header, _) => {
            "preemptive priority classes (x-tokenscale-priority header)".to_string()
        }
        (EnginePriority::Field { .. }, _) => format!(
            "request field priority: interactive {}, batch {}",
            engine
                .body_priority(Priority::Interactive)
                .unwrap_or_default(),
            engine.body_priority(Priority::Batch).unwrap_or_default()
        ),
        (EnginePriority::PacingOnly, Some(why)) => format!("pacing only: {why}"),
        (EnginePriority::PacingOnly, None) => "pacing only".to_string(),
    };
    PriorityRender { flags, note }
}

/// SGLang's flag when its version has it and the spec's policy allows it, else why not.
fn sglang_flags(
    image: Option<&str>,
    user_args: &[String],
) -> (&'static [&'static str], Option<String>) {
    if user_args
        .iter()
        .any(|a| a == "--enable-priority-scheduling")
    {
        return (&[], None);
    }
    // SGLang refuses priority scheduling beside any other policy than these two.
    if let Some(policy) = flag_value(user_args, "--schedule-policy")
        && !matches!(policy, "fcfs" | "lof")
    {
        let why = format!("--schedule-policy {policy} excludes priority scheduling");
        return (&[], Some(why));
    }
    let version = match image {
        None => Some(SGLANG_PRIORITY_SINCE),
        Some(image) => image_version(image),
    };
    let (major, minor, patch) = SGLANG_PRIORITY_SINCE;
    let why = match version {
        Some(version) if version >= SGLANG_PRIORITY_SINCE => {
            return (&["--enable-priority-scheduling"], None);
        }
        Some(_) => format!("SGLang before v{major}.{minor}.{patch} has no priority scheduling"),
        None => format!(
            "the image tag names no SGLang version (v{major}.{minor}.{patch} or later has \
             priority scheduling: add --enable-priority-scheduling to engine.args)"
        ),
    };
    (&[], Some(why))
}

/// The value of the last `flag VALUE` or `flag=VALUE` in `args` (the engines' argument
/// parsers keep the last).
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut value = None;
    for (i, arg) in args.iter().enumerate() {
        if arg == flag {
            value = args.get(i + 1).map(String::as_str);
        } else if let Some(rest) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            value = Some(rest);
        }
    }
    value
}

/// The release an image's tag names: `repo:v0.5.5`, `repo:0.5.3rc2`, `repo:v0.5.5.post1-cu129`
/// (a missing patch reads as 0); `None` for `latest`, `dev`, a digest only, or no tag.
pub fn image_version(image: &str) -> Option<(u32, u32, u32)> {
    let name = image.split('@').next()?;
    let last = name.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let mut parts = tag.split('.');
    let mut number = |required: bool| -> Option<u32> {
        let Some(part) = parts.next() else {
            return (!required).then_some(0);
        };
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            return (!required).then_some(0);
        }
        digits.parse().ok()
    };
    Some((number(true)?, number(true)?, number(false)?))
}

#[cfg(test)]
#[path = "priority_tests.rs"]
mod tests;
