//! Per-client bounds: how many connections and requests in flight one client address may
//! hold, so one address (a flood, a runaway script) cannot take the pod's shared caps.
//!
//! The client is the TCP peer, or, when the peer is a trusted proxy, the right-most address of
//! `X-Forwarded-For` that is not itself a trusted proxy: everything left of that was written
//! by the client and cannot be believed. An IPv6 client is counted by its /64, which one
//! host is commonly given whole (counting single addresses would let it rotate past the cap).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hashbrown::HashMap;
use http::{HeaderMap, Response};

use crate::Body;
use crate::config::{BoundsConfig, Cidr};
use crate::error::GatewayError;

/// Who a count belongs to: an IPv4 address, or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// One IPv4 address.
    V4(u32),
    /// The network half of an IPv6 address.
    V6Net(u64),
}

impl From<IpAddr> for ClientKey {
    fn from(addr: IpAddr) -> Self {
        match addr.to_canonical() {
            IpAddr::V4(v4) => Self::V4(v4.into()),
            IpAddr::V6(v6) => Self::V6Net((u128::from(v6) >> 64) as u64),
        }
    }
}

/// Which per-client cap refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientRefusal {
    /// `bounds.max_connections_per_client`.
    Connections(usize),
    /// `bounds.max_in_flight_per_client`.
    InFlight(usize),
}

impl ClientRefusal {
    /// What the client is told.
    pub fn message(self) -> String {
        match self {
            Self::InFlight(max) => format!(
                "Too many requests in flight from your address: at most {max} at once on this gateway; wait for some to finish."
            ),
            Self::Connections(max) => format!(
                "Too many open connections from your address: at most {max} at once on this gateway; close some and retry."
            ),
        }
    }
}

/// The answer to a request over its client's cap: 429, to retry once one of its own ends.
pub fn refused(refusal: ClientRefusal) -> Response<Body> {
    GatewayError::RateLimited {
        message: refusal.message(),
        headers: Box::default(),
        retry_after: Duration::from_secs(1),
    }
    .into_response()
}

/// Open connections and requests of one client.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    connections: usize,
    in_flight: usize,
}

/// The per-client caps, the trusted proxies, and the counts of every client holding anything.
#[derive(Debug)]
pub struct ClientBounds {
    max_connections: usize,
    max_in_flight: usize,
    trusted: Vec<Cidr>,
    counts: Mutex<HashMap<ClientKey, Counts>>,
}

/// A connection or a request counted for its client, until dropped.
#[derive(Debug)]
pub struct ClientSlot {
    bounds: Arc<ClientBounds>,
    key: ClientKey,
    request: bool,
}

impl ClientBounds {
    /// The caps of `bounds`; `trusted` proxies may name the client in `X-Forwarded-For`.
    pub fn new(bounds: &BoundsConfig, trusted: &[Cidr]) -> Self {
        Self {
            max_connections: bounds.max_connections_per_client,
            max_in_flight: bounds.max_in_flight_per_client,
            trusted: trusted.to_vec(),
            counts: Mutex::default(),
        }
    }

    fn is_trusted(&self, addr: IpAddr) -> bool {
        self.trusted.iter().any(|cidr| cidr.contains(addr))
    }

    /// Counts a connection from `peer`; `Ok(None)` for a trusted proxy, whose connections
    /// carry many clients and are bounded by the pod's cap alone.
    pub fn connect(self: &Arc<Self>, peer: IpAddr) -> Result<Option<ClientSlot>, ClientRefusal> {
        if self.is_trusted(peer) {
            return Ok(None);
        }
        self.enter(peer.into(), false).map(Some)
    }

    /// Counts a request of `client` (see [`ClientBounds::client_of`]).
    pub fn request(self: &Arc<Self>, client: IpAddr) -> Result<ClientSlot, ClientRefusal> {
        self.enter(client.into(), true)
    }

    /// The client a request from `peer` with `headers` is counted for.
    pub fn client_of(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if self.trusted.is_empty() || !self.is_trusted(peer) {
            return peer;
        }
        let hops = headers
            .get_all("x-forwarded-for")
            .iter()
            .flat_map(|value| value.to_str().unwrap_or_default().split(','));
        forwarded_client(peer, hops, |addr| self.is_trusted(addr))
    }

    fn enter(self: &Arc<Self>, key: ClientKey, request: bool) -> Result<ClientSlot, ClientRefusal> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let entry = counts.entry(key).or_default();
        let (count, cap, refusal) = if request {
            let cap = self.max_in_flight;
            (&mut entry.in_flight, cap, ClientRefusal::InFlight(cap))
        } else {
            let cap = self.max_connections;
            (&mut entry.connections, cap, ClientRefusal::Connections(cap))
        };
        if *count >= cap {
            // An entry made just now for a refusal holds nothing: the table keeps only holders.
            if entry.connections == 0 && entry.in_flight == 0 {
                counts.remove(&key);
            }
            return Err(refusal);
        }
        *count += 1;
        Ok(ClientSlot {
            bounds: self.clone(),
            key,
            request,
        })
    }

    /// Clients holding a connection or a request now.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut counts = self.bounds.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = counts.get_mut(&self.key) {
            let count = if self.request {
                &mut entry.in_flight
            } else {
                &mut entry.connections
            };
            *count = count.saturating_sub(1);
            if entry.connections == 0 && entry.in_flight == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// The client behind trusted proxy `peer`, from the `X-Forwarded-For` hops in order (left-most
/// first): walking from the right, the first address that is not a trusted proxy. A hop that
/// is not an address stops the walk (nothing left of it can be believed): the client is then
/// the last trusted hop, as it is when every hop is trusted.
pub fn forwarded_client<'a>(
    peer: IpAddr,
    hops: impl Iterator<Item = &'a str>,
    trusted: impl Fn(IpAddr) -> bool,
) -> IpAddr {
    let hops: Vec<&str> = hops.collect();
    let mut client = peer;
    for hop in hops.iter().rev().map(|h| h.trim()) {
        let Ok(addr) = hop.parse::<IpAddr>() else {
            return client;
        };
        client = addr;
        if !trusted(addr) {
            return addr;
        }
    }
    client
}

#[cfg(test)]
#[path = "clients_tests.rs"]
mod tests;
