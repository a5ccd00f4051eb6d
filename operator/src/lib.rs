//! tokenscale-operator.
