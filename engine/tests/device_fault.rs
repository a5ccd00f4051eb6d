//! A sticky device error (the CUDA driver's `CUDA_ERROR_ILLEGAL_ADDRESS`, after which the
//! context is unusable) must not leave a zombie replica: every request held fails instead of
//! hanging, `/health` stops answering 200, and the server returns an error so the process
//! exits non-zero and the pod restarts. Injected on the CPU build by a backend that turns
//! into a lost device on demand; a panicking step (cudarc's answer to a missing driver symbol)
//! is held to the same contract.

mod server_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;
use serde_json::json;
use server_support::client;
use tokenscale_engine::backend::sim::{SimBackend, SimVocab, read_profile};
use tokenscale_engine::backend::{Backend, SeqStep, StepOutput};
use tokenscale_engine::model::ModelConfig;
use tokenscale_engine::runtime::{
    EngineConfig, EngineHandle, EngineMetrics, GenerateRequest, RequestStream, TokenEvent,
};
use tokenscale_engine::sampling::SamplingParams;
use tokenscale_engine::server::{ServeConfig, ServeError, serve_on, start_engine};
use tokenscale_engine::tokenizer::Tokenizer;
use tokio::net::TcpListener;

/// Bounds every wait: a hang is the failure these tests look for.
const LIMIT: Duration = Duration::from_secs(30);

/// How the injected fault shows.
#[derive(Clone, Copy)]
enum Fault {
    /// Every step fails with the error the CUDA backend makes of a sticky driver error.
    StickyError,
    /// The step panics (as cudarc does on a driver symbol it cannot resolve).
    Panic,
}

/// The sim backend until `lost` is set; from then on every step fails as `fault` says.
struct LosesDevice {
    inner: SimBackend,
    lost: Arc<AtomicBool>,
    fault: Fault,
}

impl LosesDevice {
    fn new() -> (Self, Arc<AtomicBool>) {
        Self::with(Fault::StickyError)
    }

    fn with(fault: Fault) -> (Self, Arc<AtomicBool>) {
        let profile = read_profile(None).expect("the default sim profile");
        let lost = Arc::new(AtomicBool::new(false));
        let inner = SimBackend::new(profile, 4096);
        let backend = Self {
            inner,
            lost: lost.clone(),
            fault,
        };
        (backend, lost)
    }
}

impl Backend for LosesDevice {
    fn name(&self) -> &'static str {
        "sim"
    }
    fn model_config(&self) -> &ModelConfig {
        self.inner.model_config()
    }
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn num_kv_blocks(&self) -> usize {
        self.inner.num_kv_blocks()
    }
    fn forward(&mut self, batch: &[SeqStep<'_>]) -> tokenscale_engine::Result<StepOutput> {
        // Slow enough that requests are still running when the test pulls the plug.
        std::thread::sleep(Duration::from_millis(5));
        if self.lost.load(Ordering::Acquire) {
            match self.fault {
                Fault::StickyError => {
                    let sticky = DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
                    return Err(tokenscale_engine::backend::cuda::Error::from(sticky).into());
                }
                Fault::Panic => panic!("Missing symbol cuGraphUpload (injected)"),
            }
        }
        self.inner.forward(batch)
    }
}

/// The first event of `stream` that is not a token (`None`: the stream ended), within
/// [`LIMIT`]; panics with `what` when the request hangs.
async fn after_the_tokens(stream: &mut RequestStream, what: &str) -> Option<TokenEvent> {
    tokio::time::timeout(LIMIT, async {
        loop {
            match stream.next().await {
                Some(TokenEvent::Token { .. }) => continue,
                other => return other,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("a request hung after {what}"))
}

/// An engine with one request generating and one more submitted, whose backend then fails
/// as `fault` says: (engine, running, waiting).
async fn lose_mid_stream(fault: Fault) -> (EngineHandle, RequestStream, RequestStream) {
    let (backend, lost) = LosesDevice::with(fault);
    let engine = spawn_engine(backend);
    let mut running = engine.submit(request(4000)).expect("submit");
    let first = tokio::time::timeout(LIMIT, running.next())
        .await
        .expect("a first token");
    assert!(matches!(first, Some(TokenEvent::Token { .. })), "{first:?}");
    let waiting = engine.submit(request(10)).expect("submit");
    assert_eq!(engine.fault_now(), None);
    lost.store(true, Ordering::Release);
    (engine, running, waiting)
}

fn request(max_tokens: u32) -> GenerateRequest {
    GenerateRequest::new(
        b"hello".iter().map(|&b| u32::from(b)).collect(),
        SamplingParams {
            max_tokens: Some(max_tokens),
            ..SamplingParams::default()
        },
    )
}

/// An engine loop over `backend` running one request at a time.
fn spawn_engine(backend: LosesDevice) -> EngineHandle {
    let metrics = Arc::new(EngineMetrics::new(
        "fault",
        "sim",
        true,
        backend.block_size(),
        backend.num_kv_blocks(),
    ));
    let config = EngineConfig {
        max_batch_tokens: 64,
        // One running request; a second waits in the queue when the device goes.
        max_num_seqs: 1,
        enable_prefix_caching: false,
        max_model_len: 4096,
        eos_token_ids: Vec::new(),
        tpot_target: None,
        speculative: Default::default(),
    };
    EngineHandle::spawn(Box::new(backend), config, metrics).expect("spawn")
}

#[tokio::test]
async fn a_lost_device_fails_every_request_and_stops_the_loop() {
    let (engine, mut running, mut waiting) = lose_mid_stream(Fault::StickyError).await;

    for stream in [&mut running, &mut waiting] {
        let failure = after_the_tokens(stream, "the device was lost").await;
        match failure {
            Some(TokenEvent::Failed(message)) => {
                assert!(message.contains("device lost"), "{message}");
            }
            other => panic!("expected a failure, got {other:?}"),
        }
    }
    let reason = tokio::time::timeout(LIMIT, engine.fault())
        .await
        .expect("the fault is reported");
    assert!(reason.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{reason}");
    assert_eq!(engine.fault_now().as_deref(), Some(reason.as_str()));
    // The loop is gone: a new request is refused or ends at once, never served.
    if let Ok(mut late) = engine.submit(request(10)) {
        let event = tokio::time::timeout(LIMIT, late.next())
            .await
            .expect("no hang");
        assert!(
            !matches!(event, Some(TokenEvent::Token { .. })),
            "{event:?}"
        );
    }
}

#[tokio::test]
async fn a_panicking_step_is_a_fault_too_and_no_request_hangs() {
    let (engine, mut running, mut waiting) = lose_mid_stream(Fault::Panic).await;

    let reason = tokio::time::timeout(LIMIT, engine.fault())
        .await
        .expect("the panic is reported as a fault");
    assert!(reason.contains("panicked"), "{reason}");
    assert!(reason.contains("Missing symbol cuGraphUpload"), "{reason}");
    // The loop's state went with the panic: each stream ends (the server answers 503).
    for stream in [&mut running, &mut waiting] {
        let end = after_the_tokens(stream, "the loop panicked").await;
        assert!(end.is_none(), "{end:?}");
    }
}

#[tokio::test]
async fn a_lost_device_fails_health_and_ends_the_server_with_an_error() {
    let (backend, lost) = LosesDevice::new();
    let config = ServeConfig {
        model: "fault-model".into(),
        max_batch_tokens: 64,
        max_num_seqs: 4,
        drain_timeout_s: 10.0,
        ..ServeConfig::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let loader_config = config.clone();
    let loader = move || {
        let tokenizer = Tokenizer::from_spec(&SimVocab::new().tokenizer_spec())?;
        start_engine(Box::new(backend), tokenizer, &loader_config)
    };
    let server = tokio::spawn(serve_on(listener, config, loader, std::future::pending()));
    let ready = async {
        while !client::get(addr, "/health")
            .await
            .is_ok_and(|r| r.status == 200)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(LIMIT, ready).await.expect("ready");

    let body = json!({ "model": "fault-model", "prompt": "hello", "max_tokens": 4000 });
    let in_flight =
        tokio::spawn(async move { client::post_json(addr, "/v1/completions", &body).await });
    // Let the request start generating before the device goes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    lost.store(true, Ordering::Release);

    let reply = tokio::time::timeout(LIMIT, in_flight)
        .await
        .expect("the request in flight hung")
        .expect("request task");
    assert_eq!(reply.status, 500, "{}", reply.body);
    assert!(reply.body.contains("device lost"), "{}", reply.body);
    // From the moment a request has failed, `/health` never answers 200 again: 503 while
    // the server finishes answering, then nothing once it has exited.
    if let Ok(health) = client::get(addr, "/health").await {
        assert_eq!(health.status, 503, "{}", health.body);
        assert_eq!(health.json()["status"], "faulted");
    }
    let ended = tokio::time::timeout(LIMIT, server)
        .await
        .expect("the server kept running after the device was lost")
        .expect("server task");
    match ended {
        Err(ServeError::EngineFault(reason)) => {
            assert!(reason.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{reason}");
        }
        other => panic!("expected an engine fault, got {other:?}"),
    }
}
