//! The operator's scaling clock and the state it alone owns: every model's scaling loop,
//! due-gate, decision failures, GPU request and start phases. Reconcile never reads or writes
//! that state; it tells the clock what changed ([`ClockMsg`]) and the clock applies the
//! messages, in the order they were sent, before each look at its models.
//!
//! The clock's parts: [`ticker`] (the loop: sample, then decide for the models [`due`]),
//! [`sampler`] (scrapes between decisions, a rise wakes a decision), [`wake`] (a filled gateway
//! queue wakes a model at zero), [`decide`] (one decision: observe, tick, scale, write
//! [`status`]) and [`start_phases`] (a start split into its phases).

pub mod decide;
pub mod due;
pub mod models;
pub mod sampler;
pub mod scaling;
pub mod start_phases;
pub mod status;
pub mod ticker;
pub mod wake;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::autoscaler::Clocks;
use crate::controller::{lock, model_key};
use crate::crd::ModelDeployment;
use crate::metrics_source::ModelRef;
use crate::scale::ReplicaCounts;
use models::Models;

/// The per-model guard against a conflicting write: held by a reconcile from reading the live
/// replica count until the Deployment is applied with it, and by a decision; a scale in
/// between would be undone by the apply. It guards API writes, no data.
pub type WriteGuard = Arc<tokio::sync::Mutex<()>>;

/// What a reconcile tells the clock.
#[derive(Debug)]
pub enum ClockMsg {
    /// A reconcile applied the model's children: the clock scales this object from now on
    /// (a new model, or a changed one: every reconcile hands its object over).
    Handover(Box<Handover>),
    /// The model is not to be scaled any more (an invalid spec, its served name taken, its
    /// cache not filled): the clock keeps its loop but stops deciding for it.
    Withdrawn { key: String },
    /// The model is being deleted: the clock forgets it and its share of the GPU budget.
    Removed { key: String },
    /// Let the model decide now, however recently it decided (a filled queue at zero); sent
    /// at `at`.
    Woken {
        object: Arc<ModelDeployment>,
        at: Clocks,
    },
}

/// A model a reconcile hands to the clock.
#[derive(Debug)]
pub struct Handover {
    /// The object its decisions act on.
    pub object: Arc<ModelDeployment>,
    /// Where its metrics are (what the sampler scrapes; a served name or windows may change).
    pub metrics: ModelRef,
    /// The live replica counts the reconcile read (a replica turning ready times its start).
    pub counts: Option<ReplicaCounts>,
    /// When the reconcile read them.
    pub at: Clocks,
    /// The model's write guard, which the reconcile holds around its Deployment apply.
    pub guard: WriteGuard,
}

/// The clock's state and its inbox: only the clock's own code (this module) reaches them.
pub struct Clock {
    sender: mpsc::UnboundedSender<ClockMsg>,
    state: Mutex<State>,
    /// Makes [`ticker::run`] look for due models now, not at its next tick.
    decide_now: tokio::sync::Notify,
}

/// Every model the clock knows, and the messages not yet applied to them.
struct State {
    models: Models,
    inbox: mpsc::UnboundedReceiver<ClockMsg>,
}

impl Default for Clock {
    fn default() -> Self {
        let (sender, inbox) = mpsc::unbounded_channel();
        Self {
            sender,
            state: Mutex::new(State {
                models: Models::default(),
                inbox,
            }),
            decide_now: tokio::sync::Notify::new(),
        }
    }
}

impl Clock {
    /// Tells the clock `msg`; a handover or a wake makes it look now (a model not due is
    /// left alone).
    pub fn tell(&self, msg: ClockMsg) {
        let look = matches!(msg, ClockMsg::Handover(_) | ClockMsg::Woken { .. });
        // The receiver lives as long as the clock itself: sending cannot fail.
        let _ = self.sender.send(msg);
        if look {
            self.decide_now.notify_one();
        }
    }

    /// The models, after every message sent so far (in order).
    fn models(&self) -> ModelsGuard<'_> {
        let mut state = lock(&self.state);
        while let Ok(msg) = state.inbox.try_recv() {
            state.models.apply(msg);
        }
        ModelsGuard(state)
    }
}

/// The clock's models, locked by one of the clock's own steps.
struct ModelsGuard<'a>(MutexGuard<'a, State>);

impl std::ops::Deref for ModelsGuard<'_> {
    type Target = Models;
    fn deref(&self) -> &Models {
        &self.0.models
    }
}

impl std::ops::DerefMut for ModelsGuard<'_> {
    fn deref_mut(&mut self) -> &mut Models {
        &mut self.0.models
    }
}

impl Clock {
    /// Time left before `md` is due for its next decision at `clocks`; `None` when due now
    /// (see [`due::Due::not_due_for`]; a wake is used up by this look).
    pub fn not_due_for(&self, md: &ModelDeployment, clocks: Clocks) -> Option<Duration> {
        let period_s = md.spec.scaling.period.as_secs_f64();
        self.models().entry(md, clocks).due.not_due_for(
            md.metadata.generation,
            period_s,
            clocks.now_s,
        )
    }

    /// Records that `md` decided at `clocks`.
    pub fn mark_decided(&self, md: &ModelDeployment, clocks: Clocks) {
        self.models()
            .entry(md, clocks)
            .due
            .mark_decided(md.metadata.generation, clocks.now_s);
    }

    /// Sets the scaling loop of `md` (a test's prepared one), as if this process had run it.
    pub fn put_loop(&self, md: &ModelDeployment, scaling: crate::scaling::ScalingLoop) {
        self.models()
            .insert(model_key(md), models::ModelEntry::new(scaling));
    }
}
