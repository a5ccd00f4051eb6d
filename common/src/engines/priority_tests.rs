//! Tests of the priority rules: the flags rendered per kind and version, and how the flags a
//! replica runs with decide the body's `priority`.

use super::*;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

#[test]
fn image_tags_name_versions_or_nothing() {
    assert_eq!(image_version("lmsysorg/sglang:v0.5.5"), Some((0, 5, 5)));
    assert_eq!(image_version("lmsysorg/sglang:v0.5.3rc2"), Some((0, 5, 3)));
    assert_eq!(
        image_version("lmsysorg/sglang:v0.5.5.post1-cu129"),
        Some((0, 5, 5))
    );
    assert_eq!(image_version("registry:5000/sglang:0.5"), Some((0, 5, 0)));
    assert_eq!(
        image_version("lmsysorg/sglang:v0.4.10@sha256:ab"),
        Some((0, 4, 10))
    );
    for unknown in [
        "lmsysorg/sglang:latest",
        "lmsysorg/sglang:dev",
        "registry:5000/sglang",
        "x@sha256:ab",
    ] {
        assert_eq!(image_version(unknown), None, "{unknown}");
    }
}

#[test]
fn vllm_gets_the_priority_policy_unless_the_spec_chose_one() {
    let r = render_flags(EngineKind::Vllm, Some("vllm/vllm-openai:v0.11.0"), &[]);
    assert_eq!(r.flags, ["--scheduling-policy", "priority"]);
    assert_eq!(r.note, "request field priority: interactive 0, batch 100");
    let r = render_flags(EngineKind::Vllm, None, &args(&["--scheduling-policy=fcfs"]));
    assert!(r.flags.is_empty());
    assert_eq!(
        r.note,
        "pacing only: engine.args set --scheduling-policy fcfs"
    );
}

#[test]
fn sglang_gets_priority_scheduling_from_the_version_that_has_it() {
    let flags = |image| render_flags(EngineKind::Sglang, image, &[]).flags;
    assert_eq!(
        flags(Some("lmsysorg/sglang:v0.5.3")),
        ["--enable-priority-scheduling"]
    );
    assert_eq!(flags(None), ["--enable-priority-scheduling"]);
    let old = render_flags(EngineKind::Sglang, Some("lmsysorg/sglang:v0.5.2"), &[]);
    assert!(old.flags.is_empty());
    assert_eq!(
        old.note,
        "pacing only: SGLang before v0.5.3 has no priority scheduling"
    );
    let unknown = render_flags(EngineKind::Sglang, Some("lmsysorg/sglang:dev"), &[]);
    assert!(
        unknown
            .note
            .starts_with("pacing only: the image tag names no SGLang version")
    );
    // The spec's own flag turns it on whatever the tag says; a policy SGLang cannot combine
    // with priority keeps it off rather than failing the server's start.
    let own = args(&["--enable-priority-scheduling"]);
    let r = render_flags(EngineKind::Sglang, Some("lmsysorg/sglang:dev"), &own);
    assert!(r.flags.is_empty());
    assert_eq!(r.note, "request field priority: interactive 100, batch 0");
    let lpm = render_flags(
        EngineKind::Sglang,
        None,
        &args(&["--schedule-policy", "lpm"]),
    );
    assert!(lpm.flags.is_empty());
    assert!(
        lpm.note.contains("--schedule-policy lpm excludes"),
        "{}",
        lpm.note
    );
}

#[test]
fn llamacpp_and_tokenscale_get_no_flags() {
    let llama = render_flags(EngineKind::Llamacpp, None, &[]);
    assert!(llama.flags.is_empty());
    assert!(llama.note.starts_with("pacing only"));
    let ours = render_flags(EngineKind::Tokenscale, None, &[]);
    assert!(ours.flags.is_empty());
    assert!(ours.note.starts_with("preemptive priority classes"));
}

#[test]
fn the_flags_decide_the_field_and_its_direction() {
    let of = |kind, list: &[&str]| EnginePriority::of_args(kind, &args(list));
    let vllm = of(EngineKind::Vllm, &["--scheduling-policy", "priority"]);
    assert_eq!(
        (
            vllm.body_priority(Priority::Interactive),
            vllm.body_priority(Priority::Batch)
        ),
        (Some(0), Some(100))
    );
    assert!(vllm.preempts_batch());
    // SGLang's default runs higher values first; its flag turns that round.
    let sglang = of(EngineKind::Sglang, &["--enable-priority-scheduling"]);
    assert_eq!(sglang.body_priority(Priority::Interactive), Some(100));
    let low_first = of(
        EngineKind::Sglang,
        &[
            "--enable-priority-scheduling",
            "--schedule-low-priority-values-first",
        ],
    );
    assert_eq!(low_first.body_priority(Priority::Interactive), Some(0));
    let no_preemption = of(
        EngineKind::Sglang,
        &[
            "--enable-priority-scheduling",
            "--disable-priority-preemption",
        ],
    );
    assert!(!no_preemption.preempts_batch());
    // Without the flags: no field (an FCFS vLLM refuses a non-zero priority) and no preemption.
    for kind in [EngineKind::Vllm, EngineKind::Sglang, EngineKind::Llamacpp] {
        assert_eq!(of(kind, &[]), EnginePriority::PacingOnly);
        assert_eq!(of(kind, &[]).body_priority(Priority::Batch), None);
        assert!(!of(kind, &[]).preempts_batch());
    }
    let last_wins = of(
        EngineKind::Vllm,
        &[
            "--scheduling-policy",
            "priority",
            "--scheduling-policy",
            "fcfs",
        ],
    );
    assert_eq!(last_wins, EnginePriority::PacingOnly);
    assert_eq!(of(EngineKind::Tokenscale, &[]), EnginePriority::Header);
    assert_eq!(EnginePriority::Header.body_priority(Priority::Batch), None);
}
