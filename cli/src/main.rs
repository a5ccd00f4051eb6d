//! `tokenscale`: up, bench, sim.
fn main() {}
