//! `Cidr`: an address block as written in the config (`10.0.0.0/8`, `fd00::/8`, or one
//! address), refused at load with what is wrong when it does not parse.

use std::net::IpAddr;

use serde::Deserialize;

/// An IPv4 or IPv6 block; a bare address is a block of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ADDR/PREFIX` or `ADDR`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{text}` is not an IP address or a CIDR block"))?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("`{text}`: the prefix length must be 0 to {bits}"))?,
        };
        Ok(Self { network, prefix })
    }

    /// Whether `addr` is inside the block (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.network, addr.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(addr)) => same_prefix(
                u32::from(net).into(),
                u32::from(addr).into(),
                32,
                self.prefix,
            ),
            (IpAddr::V6(net), IpAddr::V6(addr)) => {
                same_prefix(net.into(), addr.into(), 128, self.prefix)
            }
            _ => false,
        }
    }
}

impl TryFrom<String> for Cidr {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text)
    }
}

/// Whether the first `prefix` of `bits` bits of `a` and `b` agree.
fn same_prefix(a: u128, b: u128, bits: u8, prefix: u8) -> bool {
    let ignored = u32::from(bits - prefix);
    a.checked_shr(ignored).unwrap_or(0) == b.checked_shr(ignored).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("a test address")
    }

    #[test]
    fn blocks_contain_their_addresses_and_no_others() {
        let cases = [
            ("10.0.0.0/8", "10.200.1.1", true),
            ("10.0.0.0/8", "11.0.0.1", false),
            ("192.168.1.7", "192.168.1.7", true),
            ("192.168.1.7", "192.168.1.8", false),
            ("0.0.0.0/0", "203.0.113.9", true),
            ("fd00::/8", "fd12::1", true),
            ("fd00::/8", "fe80::1", false),
            ("127.0.0.0/8", "::ffff:127.0.0.2", true),
            ("::/0", "10.0.0.1", false),
        ];
        for (block, addr, inside) in cases {
            let cidr = Cidr::parse(block).expect(block);
            assert_eq!(cidr.contains(ip(addr)), inside, "{block} contains {addr}");
        }
    }

    #[test]
    fn malformed_blocks_are_refused_with_the_reason() {
        for (text, reason) in [
            ("10.0.0.0/33", "the prefix length must be 0 to 32"),
            ("fd00::/129", "the prefix length must be 0 to 128"),
            ("10.0.0/8", "is not an IP address"),
            ("proxy.local", "is not an IP address"),
            ("10.0.0.0/x", "the prefix length"),
        ] {
            let error = Cidr::parse(text).expect_err(text);
            assert!(error.contains(reason), "{text}: {error}");
        }
    }

    #[test]
    fn a_config_with_a_bad_proxy_is_refused_with_its_line() {
        let yaml = "models: []\ntrusted_proxies:\n  - 10.0.0.0/8\n  - 10.0.0.0/40\n";
        let error = crate::config::Config::from_yaml(yaml).expect_err("refused");
        let message = error.to_string();
        assert!(message.contains("prefix length"), "{message}");
        assert!(message.contains("line 4"), "{message}");
        let good = "trusted_proxies: [10.0.0.0/8, \"fd00::/8\", 192.168.0.1]\n";
        let config = crate::config::Config::from_yaml(good).expect("parses");
        assert_eq!(config.trusted_proxies.len(), 3);
        assert_eq!(config.bounds.max_connections_per_client, 1024);
        assert_eq!(config.stream_write_timeout_ms, 30_000);
    }
}
