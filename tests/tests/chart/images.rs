//! The Dockerfiles, read (no Docker engine runs in CI): multi-stage, pinned bases, a
//! non-root numeric user in the final stage, the program as entrypoint, a build context
//! without target/, and the engine's CUDA runtime base as a build argument. The chart's
//! default image tags (appVersion) are the workspace version the images are built from.

use serde_json::Value;
use tokenscale_e2e::chart::chart_dir;
use tokenscale_e2e::tools::workspace_root;

/// (Dockerfile, binary it ships).
const IMAGES: [(&str, &str); 3] = [
    ("docker/engine.Dockerfile", "tokenscale-engine"),
    ("docker/gateway.Dockerfile", "tokenscale-gateway"),
    ("docker/operator.Dockerfile", "tokenscale-operator"),
];

/// Instructions of a Dockerfile, continuation lines joined, comments dropped.
fn instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// Default of `ARG name=value`, if declared.
fn arg_default<'a>(instructions: &'a [String], name: &str) -> Option<&'a str> {
    instructions.iter().find_map(|i| {
        i.strip_prefix("ARG ")?
            .strip_prefix(name)?
            .strip_prefix('=')
    })
}

#[test]
fn images_are_multi_stage_pinned_and_run_as_non_root() {
    for (file, binary) in IMAGES {
        let path = workspace_root().join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let ins = instructions(&text);
        let stages: Vec<usize> = (0..ins.len())
            .filter(|&i| ins[i].starts_with("FROM "))
            .collect();
        assert!(stages.len() >= 2, "{file}: not multi-stage");
        for stage in &stages {
            let image = ins[*stage].split_whitespace().nth(1).unwrap_or_default();
            let resolved = match image.strip_prefix("${").and_then(|s| s.strip_suffix('}')) {
                Some(arg) => arg_default(&ins, arg)
                    .unwrap_or_else(|| panic!("{file}: ARG {arg} has no default")),
                None => image,
            };
            let tag = resolved
                .rsplit_once(':')
                .map(|(_, tag)| tag)
                .unwrap_or_default();
            assert!(
                !tag.is_empty() && tag != "latest",
                "{file}: base {resolved} is not pinned to a tag"
            );
        }
        let last = &ins[*stages.last().unwrap_or(&0)..];
        let user = last
            .iter()
            .rev()
            .find_map(|i| i.strip_prefix("USER "))
            .unwrap_or_else(|| panic!("{file}: no USER in the final stage"));
        let uid: u32 = user
            .split(':')
            .next()
            .and_then(|u| u.parse().ok())
            .unwrap_or_else(|| panic!("{file}: USER {user} is not numeric"));
        assert!(uid != 0, "{file}: runs as root");
        assert!(
            !last.iter().any(|i| i.starts_with("RUN ")),
            "{file}: RUN in the final stage (it must work on distroless bases)"
        );
        let entrypoint = last
            .iter()
            .find_map(|i| i.strip_prefix("ENTRYPOINT "))
            .unwrap_or_default();
        assert_eq!(
            entrypoint,
            format!("[\"/usr/local/bin/{binary}\"]"),
            "{file}"
        );
        assert!(
            ins.iter()
                .any(|i| i.contains(&format!("--locked -p {binary} --bin {binary}"))),
            "{file}: builds {binary}"
        );
        let ignore = std::fs::read_to_string(workspace_root().join(format!("{file}.dockerignore")))
            .unwrap_or_default();
        assert!(
            ignore.lines().any(|l| l.trim() == "target/"),
            "{file}.dockerignore must exclude target/"
        );
    }
}

#[test]
fn the_engine_image_can_carry_cuda_runtime_libraries() {
    let text = std::fs::read_to_string(workspace_root().join(IMAGES[0].0))
        .unwrap_or_else(|e| panic!("{e}"));
    let ins = instructions(&text);
    let last_from = ins
        .iter()
        .rev()
        .find(|i| i.starts_with("FROM "))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        last_from, "FROM ${RUNTIME_BASE}",
        "the runtime base is a build argument"
    );
    assert!(
        text.contains("--build-arg RUNTIME_BASE=nvidia/cuda:") && text.contains("-runtime-"),
        "documents the CUDA runtime base"
    );
    assert!(
        ins.iter().any(|i| i.contains("nvidia-cuda-runtime-cu12")),
        "ships the headers NVRTC needs"
    );
    // The engine finds those headers through the variable its CUDA backend reads.
    let compile_rs = "engine/src/backend/cuda/compile.rs";
    let source = std::fs::read_to_string(workspace_root().join(compile_rs))
        .unwrap_or_else(|e| panic!("{compile_rs}: {e}"));
    let variable = source
        .lines()
        .find_map(|l| l.trim().strip_prefix("pub const INCLUDE_DIRS_ENV: &str = "))
        .map(|v| v.trim_end_matches(';').trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("{compile_rs} declares no INCLUDE_DIRS_ENV"));
    let env = ins
        .iter()
        .find(|i| i.starts_with("ENV "))
        .cloned()
        .unwrap_or_default();
    assert!(
        env.contains(&format!("{variable}=/opt/tokenscale/cuda/include")),
        "{env}"
    );
}

#[test]
fn default_image_tags_are_the_workspace_version() {
    let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap_or_default();
    let version = manifest
        .split("[workspace.package]")
        .nth(1)
        .and_then(|s| s.lines().find_map(|l| l.trim().strip_prefix("version = ")))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("no [workspace.package] version"));
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("Chart.yaml: {e}"));
    assert_eq!(
        chart["appVersion"].as_str(),
        Some(version.as_str()),
        "Chart.yaml appVersion (the default image tag)"
    );
}
