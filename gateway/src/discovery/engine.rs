//! What a `ModelDeployment` says about its engine: the kind, and how its replicas take a
//! request's class, read through the rules the operator renders the replicas' flags by.

use kube::api::DynamicObject;
use tokenscale_common::engines::{EngineKind, EnginePriority, render_flags};

/// The engine `md`'s replicas run (`spec.engine.kind`, tokenscale's when unset) and how they
/// take a request's class: the operator's priority flags for that kind, image (`None`: the
/// pinned default) and `engine.args`, followed by those args. An unreadable kind is read as
/// tokenscale's engine, which takes the class in a header: no body field is sent on a guess.
pub fn engine_of(md: &DynamicObject) -> (EngineKind, EnginePriority) {
    let engine = &md.data["spec"]["engine"];
    let Ok(kind) = engine["kind"]
        .as_str()
        .unwrap_or("tokenscale")
        .parse::<EngineKind>()
    else {
        return (EngineKind::Tokenscale, EnginePriority::Header);
    };
    let args: Vec<String> = engine["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let rendered = render_flags(kind, engine["image"].as_str(), &args);
    let mut all: Vec<String> = rendered.flags.iter().map(|f| f.to_string()).collect();
    all.extend(args);
    (kind, EnginePriority::of_args(kind, &all))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, GroupVersionKind};
    use tokenscale_common::engines::PriorityOrder;

    fn md(spec: serde_json::Value) -> DynamicObject {
        let (group, version, kind) = super::super::kubernetes::MODEL_DEPLOYMENT;
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let mut md = DynamicObject::new("llama", &resource);
        md.data = serde_json::json!({ "spec": spec });
        md
    }

    #[test]
    fn the_deployments_engine_decides_the_field() {
        let field = |order| EnginePriority::Field {
            order,
            preempts: true,
        };
        assert_eq!(
            engine_of(&md(serde_json::json!({"engine": {"kind": "vllm"}}))),
            (EngineKind::Vllm, field(PriorityOrder::LowerFirst))
        );
        let old =
            serde_json::json!({"engine": {"kind": "sglang", "image": "lmsysorg/sglang:v0.5.2"}});
        assert_eq!(
            engine_of(&md(old)),
            (EngineKind::Sglang, EnginePriority::PacingOnly)
        );
        let own = serde_json::json!({"engine": {"kind": "sglang", "image": "lmsysorg/sglang:dev",
            "args": ["--enable-priority-scheduling", "--schedule-low-priority-values-first"]}});
        assert_eq!(
            engine_of(&md(own)),
            (EngineKind::Sglang, field(PriorityOrder::LowerFirst))
        );
        let fcfs = serde_json::json!({"engine": {"kind": "vllm", "args": ["--scheduling-policy", "fcfs"]}});
        assert_eq!(
            engine_of(&md(fcfs)),
            (EngineKind::Vllm, EnginePriority::PacingOnly)
        );
        assert_eq!(
            engine_of(&md(serde_json::json!({}))),
            (EngineKind::Tokenscale, EnginePriority::Header)
        );
        let unknown = serde_json::json!({"engine": {"kind": "tgi"}});
        assert_eq!(
            engine_of(&md(unknown)),
            (EngineKind::Tokenscale, EnginePriority::Header)
        );
    }
}
