//! tokenscale-crd: the custom resources (`tokenscale.dev/v1alpha1`): `ModelDeployment` (spec,
//! status, typed durations, quantities and model sources, semantic validation) and
//! `ModelRoute`, and CRD generation; the objects a `ModelDeployment` owns, built by pure
//! functions (`children`); the spec as the scaling policy's input (`policy`). Kubernetes'
//! types and kube's derive only, no client: `tokenscale up` uses it without the operator.

pub mod children;
pub mod duration;
pub mod generate;
pub mod policy;
pub mod resources;
pub mod route;
pub mod source;
pub mod spec;
pub mod status;
pub mod validate;

pub use duration::{Duration, DurationError};
pub use resources::{EngineResources, Quantity, ResourceAmounts};
pub use route::{ModelRoute, ModelRouteSpec, TargetModel};
pub use source::{HubSource, ModelSource, ModelSourceError};
pub use spec::EngineKind;
pub use spec::{
    Backend, EngineSpec, ModelCache, ModelDeployment, ModelDeploymentSpec, ModelFormat, ModelSpec,
    ReplicaBounds, RolloutSpec, ScalingSpec, SecretKeyRef, SloSpec,
};
pub use status::{
    CONDITION_CONFLICT, CONDITION_READY, CONDITION_SCALING, CONDITION_SLO_MET, CapacityEstimate,
    ColdStartPhases, ConcurrencyCapStatus, LastDecision, ModelDeploymentStatus, ModelStatus,
    ObservedLoad,
};
pub use validate::SpecError;
