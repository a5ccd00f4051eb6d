//! The per-client table: caps per address and per IPv6 /64, release on drop, and who the
//! client is behind trusted proxies.

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().expect("a test address")
}

fn bounds(connections: usize, in_flight: usize, trusted: &[&str]) -> Arc<ClientBounds> {
    let config = BoundsConfig {
        max_connections_per_client: connections,
        max_in_flight_per_client: in_flight,
        ..BoundsConfig::default()
    };
    let trusted: Vec<Cidr> = trusted
        .iter()
        .map(|t| Cidr::parse(t).expect("a test block"))
        .collect();
    Arc::new(ClientBounds::new(&config, &trusted))
}

#[test]
fn each_address_has_its_own_connection_cap_and_gets_it_back_on_drop() {
    let bounds = bounds(2, 10, &[]);
    let a = ip("192.0.2.1");
    let first = bounds.connect(a).expect("1 of 2");
    let _second = bounds.connect(a).expect("2 of 2");
    assert_eq!(bounds.connect(a).err(), Some(ClientRefusal::Connections(2)));
    assert!(bounds.connect(ip("192.0.2.2")).is_ok(), "another address");
    drop(first);
    assert!(bounds.connect(a).is_ok(), "a slot came back");
}

#[test]
fn requests_are_capped_apart_from_connections() {
    let bounds = bounds(1, 2, &[]);
    let a = ip("192.0.2.1");
    let _connection = bounds.connect(a).expect("the one connection");
    let held: Vec<_> = (0..2)
        .map(|_| bounds.request(a).expect("in flight"))
        .collect();
    assert_eq!(bounds.request(a).err(), Some(ClientRefusal::InFlight(2)));
    drop(held);
    assert!(bounds.request(a).is_ok());
}

#[test]
fn an_ipv6_host_is_counted_by_its_64_and_v4_mapped_as_v4() {
    let bounds = bounds(1, 1, &[]);
    let _one = bounds
        .connect(ip("2001:db8:1:2::1"))
        .expect("first of the /64");
    assert!(
        bounds.connect(ip("2001:db8:1:2::ffff")).is_err(),
        "same /64, another address"
    );
    assert!(bounds.connect(ip("2001:db8:1:3::1")).is_ok(), "another /64");
    let _v4 = bounds.connect(ip("192.0.2.9")).expect("v4");
    assert!(bounds.connect(ip("::ffff:192.0.2.9")).is_err(), "mapped");
}

#[test]
fn the_table_forgets_clients_that_hold_nothing() {
    let bounds = bounds(1, 1, &[]);
    let a = ip("192.0.2.1");
    let slot = bounds.connect(a).expect("connects");
    let request = bounds.request(a).expect("a request");
    assert!(bounds.request(ip("192.0.2.3")).is_ok());
    assert_eq!(bounds.clients(), 1, "a dropped request's client is gone");
    drop((slot, request));
    assert_eq!(bounds.clients(), 0);
}

#[test]
fn trusted_proxies_connections_are_not_counted() {
    let bounds = bounds(1, 1, &["10.0.0.0/8"]);
    let proxy = ip("10.1.2.3");
    let held: Vec<_> = (0..5).map(|_| bounds.connect(proxy)).collect();
    assert!(held.iter().all(|slot| matches!(slot, Ok(None))));
    assert_eq!(bounds.clients(), 0);
}

#[test]
fn forwarded_for_names_the_client_only_behind_a_trusted_proxy() {
    let bounds = bounds(1, 1, &["10.0.0.0/8", "fd00::/8"]);
    let cases: [(&str, &[&str], &str); 8] = [
        // An untrusted peer: its header is the client's own word, ignored.
        ("192.0.2.7", &["198.51.100.1"], "192.0.2.7"),
        // Behind one proxy: the address it saw.
        ("10.0.0.1", &["198.51.100.1"], "198.51.100.1"),
        // The client's own forged hops, left of what the proxy appended, are not believed.
        ("10.0.0.1", &["1.1.1.1, 198.51.100.1"], "198.51.100.1"),
        // Two proxies, two headers: the right-most untrusted hop.
        ("10.0.0.1", &["198.51.100.1", "10.0.0.2"], "198.51.100.1"),
        ("fd00::1", &["2001:db8::5, fd00::2"], "2001:db8::5"),
        // No header: the proxy itself.
        ("10.0.0.1", &[], "10.0.0.1"),
        // Every hop trusted: the left-most.
        ("10.0.0.1", &["10.0.0.3, 10.0.0.2"], "10.0.0.3"),
        // Garbage stops the walk at the last trusted hop.
        (
            "10.0.0.1",
            &["198.51.100.1, not-an-ip, 10.0.0.2"],
            "10.0.0.2",
        ),
    ];
    for (peer, values, client) in cases {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("x-forwarded-for", value.parse().expect("a header"));
        }
        assert_eq!(
            bounds.client_of(ip(peer), &headers),
            ip(client),
            "{peer} with {values:?}"
        );
    }
}
