//! LoRA adapters in routing: which adapters a replica likely holds ([`AdapterMemory`]) and
//! the pure affinity picker with bounded load ([`pick`]).

mod memory;
mod pick;

pub use memory::{AdapterMemory, LoraInfo};
pub use pick::{adapter_key, pick};
