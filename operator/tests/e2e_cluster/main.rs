//! Real-cluster suite: with `TOKENSCALE_E2E_KUBECONFIG` set it installs the chart (CRD,
//! operator, gateway) with the images it is told, applies a simulated `ModelDeployment`,
//! drives streams through the gateway, watches scale-up and scale-in, and removes it all.
//!
//! Without the variable it prints `NOT RUN` with the reason; the mocked tests in `mocked.rs`
//! run the set-up and tear-down against a mocked API server either way. Step by step for kind
//! and k3d: operator/README.md, "Running the real-cluster suite".

mod load;
mod mocked;
mod plan;
mod setup;
mod wait;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::load::{Load, wait_for_replicas};
use crate::plan::{Images, KUBECONFIG_VAR, MAX_REPLICAS, MIN_REPLICAS, Plan, not_run_reason};
use crate::setup::{ProcessHelm, set_up, tear_down};
use crate::wait::SuiteError;

/// Concurrent streams while loading: well above what one replica's assumed capacity serves.
const STREAMS: usize = 12;
/// Bound on each watched change (first replica, scale-up, scale-in).
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// Removes the run's release and namespaces when dropped, on success, failure or panic. It
/// runs on a thread of its own with a fresh runtime and client, since the test's runtime may
/// be the very thread being dropped on.
struct Cleanup {
    config: Config,
    kubeconfig: PathBuf,
    plan: Plan,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (config, plan) = (self.config.clone(), self.plan.clone());
        let helm = ProcessHelm {
            kubeconfig: self.kubeconfig.clone(),
        };
        let removal = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| vec![format!("no runtime for the clean-up: {e}")])?;
            runtime.block_on(async {
                let client = Client::try_from(config)
                    .map_err(|e| vec![format!("no client for the clean-up: {e}")])?;
                let problems = tear_down(&client, &helm, &plan).await;
                if problems.is_empty() {
                    Ok(())
                } else {
                    Err(problems)
                }
            })
        });
        match removal.join() {
            Ok(Ok(())) => eprintln!(
                "e2e_cluster: removed release {} and namespaces {}, {}",
                self.plan.release, self.plan.release_namespace, self.plan.model_namespace
            ),
            Ok(Err(problems)) => eprintln!(
                "e2e_cluster: clean-up incomplete, remove by hand (label {}={}): {}",
                plan::OWNER_LABEL,
                self.plan.release,
                problems.join("; ")
            ),
            Err(_) => eprintln!("e2e_cluster: the clean-up thread panicked"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sim_model_scales_up_under_load_and_back_in_on_a_real_cluster() {
    let kubeconfig = std::env::var(KUBECONFIG_VAR).ok();
    if let Some(reason) = not_run_reason(kubeconfig.as_deref()) {
        eprintln!("NOT RUN: {reason}");
        return;
    }
    let path = PathBuf::from(kubeconfig.unwrap_or_default());
    if let Err(error) = run(&path).await {
        panic!("e2e_cluster failed: {error}");
    }
}

async fn client_for(path: &Path) -> Result<Config, String> {
    let kubeconfig = Kubeconfig::read_from(path)
        .map_err(|e| format!("{KUBECONFIG_VAR}={}: {e}", path.display()))?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("{KUBECONFIG_VAR}={}: {e}", path.display()))
}

/// The whole run; the [`Cleanup`] removes what it made whichever way it ends.
async fn run(path: &Path) -> Result<(), String> {
    let config = client_for(path).await?;
    let client = Client::try_from(config.clone()).map_err(|e| e.to_string())?;
    let plan = Plan::new(&plan::run_id(), Images::from_env());
    eprintln!(
        "e2e_cluster: release {} in {}, model in {}, images {}/*:{}",
        plan.release,
        plan.release_namespace,
        plan.model_namespace,
        plan.images.prefix,
        plan.images.tag
    );
    let _cleanup = Cleanup {
        config,
        kubeconfig: path.to_path_buf(),
        plan: plan.clone(),
    };
    let helm = ProcessHelm {
        kubeconfig: path.to_path_buf(),
    };
    let started = Instant::now();
    set_up(&client, &helm, &plan, &std::env::temp_dir())
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "e2e_cluster: chart installed, model applied ({:.0?})",
        started.elapsed()
    );
    scale_up_then_in(&client, &plan)
        .await
        .map_err(|e| e.to_string())
}

/// First replica, scale-up under load, scale-in after it.
async fn scale_up_then_in(client: &Client, plan: &Plan) -> Result<(), SuiteError> {
    let started = Instant::now();
    let first = "the first replica to be ready";
    wait_for_replicas(client, plan, first, STEP_TIMEOUT, |_, ready| {
        ready >= MIN_REPLICAS
    })
    .await?;
    eprintln!(
        "e2e_cluster: first replica ready ({:.0?})",
        started.elapsed()
    );

    let load = Load::start(client, plan, STREAMS);
    let up = format!(
        "scale-up under {STREAMS} streams: more than {MIN_REPLICAS} ready (max {MAX_REPLICAS})"
    );
    let scaled = wait_for_replicas(client, plan, &up, STEP_TIMEOUT, |desired, ready| {
        desired > MIN_REPLICAS && ready > MIN_REPLICAS
    })
    .await;
    let report = load.stop().await;
    eprintln!(
        "e2e_cluster: load stopped: {} streams completed, {} failed ({:.0?})",
        report.completed,
        report.failed,
        started.elapsed()
    );
    let (desired, ready) = scaled?;
    assert!(
        report.completed > 0,
        "no stream completed through the gateway"
    );
    eprintln!("e2e_cluster: scaled up to desired {desired}, ready {ready}");

    let down = format!("scale-in back to {MIN_REPLICAS} after the load stopped");
    let (desired, ready) =
        wait_for_replicas(client, plan, &down, STEP_TIMEOUT, |desired, ready| {
            desired == MIN_REPLICAS && ready == MIN_REPLICAS
        })
        .await?;
    eprintln!(
        "e2e_cluster: scaled in to desired {desired}, ready {ready} ({:.0?})",
        started.elapsed()
    );
    Ok(())
}
