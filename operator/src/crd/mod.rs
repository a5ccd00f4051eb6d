//! The custom resources (`tokenscale.dev/v1alpha1`): `ModelDeployment` (spec, status, typed
//! durations, quantities and model sources, semantic validation) and `ModelRoute`, and CRD
//! generation.

pub mod duration;
pub mod generate;
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
    ColdStartPhases, LastDecision, ModelDeploymentStatus, ModelStatus, ObservedLoad,
};
pub use validate::SpecError;
