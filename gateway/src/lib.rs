//! tokenscale-gateway.
