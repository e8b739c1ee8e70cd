//! Which addresses a document may be fetched from: global unicast only, as the IANA IPv4 and
//! IPv6 Special-Purpose Address Registries (RFC 6890, RFC 8190) define it. An IPv4 address is
//! fetched when it is in none of the blocks below; an IPv6 address when it is inside
//! `2000::/3` and in none of them. A refusal names the block ("a site-local address
//! (fec0::/10)").
//!
//! IPv6 forms that carry an IPv4 address are judged by that address too, and a refusal names
//! both ranges: IPv4-mapped, NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`) reach their IPv4
//! address across the Internet, so they pass when it would; IPv4-compatible (`::/96`),
//! IPv4-translated (`::ffff:0:0:0/96`), local-use NAT64 (`64:ff9b:1::/48`) and Teredo
//! (`2001::/32`) are refused whatever they carry.
//!
//! Stricter than the registries on purpose: all of `192.0.0.0/24` and `2001::/23` is
//! refused, though a few blocks in them are marked globally reachable (PCP and TURN anycast,
//! AMT, AS112-v6, ORCHIDv2, drone entity tags). None of them serves documents; an operator who
//! needs one lists it in `FILE_AGENT_URL_ALLOWED_NETWORKS`.
//!
//! Not here: that allow-list (the fetcher applies it) and host names (the fetcher's resolver
//! asks this module about every address a name resolves to).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::config::Network;

/// A special-purpose block, as a refusal names it.
#[derive(Debug, PartialEq, Eq)]
pub struct Block {
    network: Network,
    /// A noun phrase: "a loopback address".
    name: &'static str,
    /// Said after the range: ", where cloud metadata services answer".
    note: &'static str,
    /// For an IPv6 form that carries an IPv4 address: where it is.
    carrier: Option<Carrier>,
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}){}", self.name, self.network, self.note)
    }
}

/// Where an IPv6 form keeps its IPv4 address, and whether it reaches that address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Carrier {
    place: Place,
    /// The IPv6 address reaches its IPv4 address across the Internet, so it is fetched when
    /// the IPv4 address would be.
    global_when_ipv4_is: bool,
}

/// Where in an IPv6 address its IPv4 address sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The last 32 bits (mapped, compatible, translated, NAT64 with a /96 prefix).
    Last32,
    /// Bits 16 to 48 (6to4).
    After16,
    /// The last 32 bits inverted (a Teredo client's address, RFC 4380).
    Last32Inverted,
}

impl Place {
    fn ipv4(self, ip: Ipv6Addr) -> Ipv4Addr {
        let bits = ip.to_bits();
        Ipv4Addr::from_bits(match self {
            Place::Last32 => bits as u32,
            Place::After16 => (bits >> 80) as u32,
            Place::Last32Inverted => !(bits as u32),
        })
    }
}

/// Why an address is not fetched: its block and, for an IPv6 form that carries an IPv4
/// address, that address and its block when it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonPublic {
    /// The block the address is in.
    pub block: &'static Block,
    /// The IPv4 address it carries, when that is not public either.
    pub carried: Option<(Ipv4Addr, &'static Block)>,
}

impl fmt::Display for NonPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.block)?;
        if let Some((ipv4, block)) = self.carried {
            write!(f, " embedding {ipv4}, {block}")?;
        }
        Ok(())
    }
}

/// The block that makes `ip` not globally reachable, if one does.
pub fn non_public(ip: IpAddr) -> Option<NonPublic> {
    match ip {
        IpAddr::V4(ip) => ipv4_block(ip).map(|block| NonPublic {
            block,
            carried: None,
        }),
        IpAddr::V6(ip) => ipv6(ip),
    }
}

fn ipv4_block(ip: Ipv4Addr) -> Option<&'static Block> {
    IPV4.iter()
        .find(|block| block.network.contains_as_written(ip.into()))
}

fn ipv6(ip: Ipv6Addr) -> Option<NonPublic> {
    let Some(block) = IPV6
        .iter()
        .find(|block| block.network.contains_as_written(ip.into()))
    else {
        return (!GLOBAL_UNICAST.contains_as_written(ip.into())).then_some(NonPublic {
            block: &OUTSIDE_GLOBAL_UNICAST,
            carried: None,
        });
    };
    let Some(carrier) = block.carrier else {
        return Some(NonPublic {
            block,
            carried: None,
        });
    };
    let ipv4 = carrier.place.ipv4(ip);
    let carried = ipv4_block(ipv4).map(|special| (ipv4, special));
    if carried.is_none() && carrier.global_when_ipv4_is {
        return None;
    }
    Some(NonPublic { block, carried })
}

const fn v4(address: [u8; 4], prefix: u8) -> Network {
    let [a, b, c, d] = address;
    Network::new(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), prefix)
}

const fn v6(segments: [u16; 8], prefix: u8) -> Network {
    let [a, b, c, d, e, f, g, h] = segments;
    Network::new(IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)), prefix)
}

const fn block(network: Network, name: &'static str) -> Block {
    Block {
        network,
        name,
        note: "",
        carrier: None,
    }
}

const fn noted(network: Network, name: &'static str, note: &'static str) -> Block {
    Block {
        network,
        name,
        note,
        carrier: None,
    }
}

const fn carrier(
    network: Network,
    name: &'static str,
    place: Place,
    global_when_ipv4_is: bool,
) -> Block {
    Block {
        network,
        name,
        note: "",
        carrier: Some(Carrier {
            place,
            global_when_ipv4_is,
        }),
    }
}

const METADATA: &str = ", where cloud metadata services answer";
const PRIVATE: &str = "a private network address";
const DOCUMENTATION: &str = "a documentation address";

/// The IPv4 registry's blocks that are not globally reachable, and multicast; the first that
/// holds an address names it.
static IPV4: &[Block] = &[
    block(
        v4([0, 0, 0, 0], 8),
        "an unspecified (\"this network\") address",
    ),
    block(v4([10, 0, 0, 0], 8), PRIVATE),
    noted(
        v4([100, 64, 0, 0], 10),
        "a shared (CGNAT) address",
        ", where some clouds run metadata services",
    ),
    block(v4([127, 0, 0, 0], 8), "a loopback address"),
    noted(v4([169, 254, 0, 0], 16), "a link-local address", METADATA),
    block(v4([172, 16, 0, 0], 12), PRIVATE),
    block(v4([192, 0, 0, 0], 24), "an IETF protocol assignment"),
    block(v4([192, 0, 2, 0], 24), DOCUMENTATION),
    block(
        v4([192, 88, 99, 0], 24),
        "a deprecated 6to4 relay anycast address",
    ),
    block(v4([192, 168, 0, 0], 16), PRIVATE),
    block(v4([198, 18, 0, 0], 15), "a benchmarking address"),
    block(v4([198, 51, 100, 0], 24), DOCUMENTATION),
    block(v4([203, 0, 113, 0], 24), DOCUMENTATION),
    block(v4([224, 0, 0, 0], 4), "a multicast address"),
    block(
        v4([255, 255, 255, 255], 32),
        "the limited broadcast address",
    ),
    block(v4([240, 0, 0, 0], 4), "a reserved address"),
];

/// The IPv6 registry's blocks that are not globally reachable, the IPv4-carrying forms,
/// and the named blocks outside `2000::/3`; the first that holds an address names it.
static IPV6: &[Block] = &[
    block(v6([0; 8], 128), "the unspecified address"),
    block(v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "a loopback address"),
    carrier(
        v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96),
        "an IPv4-mapped IPv6 address",
        Place::Last32,
        true,
    ),
    carrier(
        v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96),
        "an IPv4-translated IPv6 address",
        Place::Last32,
        false,
    ),
    carrier(
        v6([0; 8], 96),
        "a deprecated IPv4-compatible IPv6 address",
        Place::Last32,
        false,
    ),
    carrier(
        v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96),
        "a NAT64 address",
        Place::Last32,
        true,
    ),
    carrier(
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
        "a local-use NAT64 address",
        Place::Last32,
        false,
    ),
    block(
        v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64),
        "a discard-only address",
    ),
    block(v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64), "a dummy address"),
    carrier(
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32),
        "a Teredo tunnel address",
        Place::Last32Inverted,
        false,
    ),
    block(
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23),
        "an IETF protocol assignment",
    ),
    block(v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), DOCUMENTATION),
    carrier(
        v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16),
        "a 6to4 address",
        Place::After16,
        true,
    ),
    block(v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), DOCUMENTATION),
    block(
        v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16),
        "a segment routing (SRv6) identifier",
    ),
    block(
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
        "a private (unique local) address",
    ),
    noted(
        v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
        "a link-local address",
        METADATA,
    ),
    block(
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
        "a deprecated site-local address",
    ),
    block(v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "a multicast address"),
];

/// IPv6 global unicast: nothing outside it is fetched.
const GLOBAL_UNICAST: Network = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);

/// How an IPv6 address outside [`GLOBAL_UNICAST`] and the named blocks is refused.
static OUTSIDE_GLOBAL_UNICAST: Block = block(GLOBAL_UNICAST, "an address outside global unicast");

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(address: &str) -> Option<String> {
        non_public(address.parse().unwrap()).map(|why| why.to_string())
    }

    #[test]
    fn every_block_is_a_network_as_written() {
        for block in IPV4.iter().chain(IPV6).chain([&OUTSIDE_GLOBAL_UNICAST]) {
            let text = block.network.to_string();
            assert_eq!(Network::parse(&text), Some(block.network), "{text}");
            // No bits past the prefix: the address just before the base is outside.
            let (base, _) = text.split_once('/').unwrap();
            let before = match base.parse::<IpAddr>().unwrap() {
                IpAddr::V4(base) => base
                    .to_bits()
                    .checked_sub(1)
                    .map(|b| Ipv4Addr::from_bits(b).into()),
                IpAddr::V6(base) => base
                    .to_bits()
                    .checked_sub(1)
                    .map(|b| Ipv6Addr::from_bits(b).into()),
            };
            if let Some(before) = before {
                assert!(
                    !block.network.contains_as_written(before),
                    "{text}: bits past the prefix"
                );
            }
        }
    }

    #[test]
    fn global_unicast_addresses_pass() {
        for public in [
            "93.184.215.14",
            "8.8.8.8",
            "1.1.1.1",
            // Globally reachable blocks of the IPv4 registry outside 192.0.0.0/24 (AS112, AMT).
            "192.31.196.1",
            "192.52.193.1",
            "192.175.48.1",
            "2606:4700::1",
            "2a00:1450:4001:82b::200e",
            // AS112 direct delegation, outside 2001::/23.
            "2620:4f:8000::1",
            // Forms that reach a public IPv4 address.
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert_eq!(refusal(public), None, "{public}");
        }
    }

    #[test]
    fn each_special_purpose_block_is_refused_by_name() {
        for (address, named) in [
            // The controls: refused before, refused now.
            ("127.0.0.1", "a loopback address (127.0.0.0/8)"),
            (
                "169.254.169.254",
                "a link-local address (169.254.0.0/16), where cloud metadata services answer",
            ),
            ("10.1.2.3", "a private network address (10.0.0.0/8)"),
            (
                "172.31.255.255",
                "a private network address (172.16.0.0/12)",
            ),
            ("192.168.0.1", "a private network address (192.168.0.0/16)"),
            (
                "100.100.100.200",
                "a shared (CGNAT) address (100.64.0.0/10)",
            ),
            (
                "0.0.0.0",
                "an unspecified (\"this network\") address (0.0.0.0/8)",
            ),
            ("0.1.2.3", "(0.0.0.0/8)"),
            ("224.0.0.1", "a multicast address (224.0.0.0/4)"),
            ("239.255.255.250", "a multicast address (224.0.0.0/4)"),
            ("192.0.2.1", "a documentation address (192.0.2.0/24)"),
            ("198.51.100.7", "a documentation address (198.51.100.0/24)"),
            ("203.0.113.9", "a documentation address (203.0.113.0/24)"),
            ("::1", "a loopback address (::1/128)"),
            ("::", "the unspecified address (::/128)"),
            ("fe80::1", "a link-local address (fe80::/10)"),
            (
                "fd00:ec2::254",
                "a private (unique local) address (fc00::/7)",
            ),
            ("fc00::1", "(fc00::/7)"),
            ("ff02::1", "a multicast address (ff00::/8)"),
            ("2001:db8::1", "a documentation address (2001:db8::/32)"),
            // The rest of the IPv4 registry.
            (
                "192.88.99.1",
                "a deprecated 6to4 relay anycast address (192.88.99.0/24)",
            ),
            ("192.0.0.8", "an IETF protocol assignment (192.0.0.0/24)"),
            ("192.0.0.9", "(192.0.0.0/24)"),
            ("192.0.0.170", "(192.0.0.0/24)"),
            ("198.18.0.1", "a benchmarking address (198.18.0.0/15)"),
            ("198.19.255.255", "(198.18.0.0/15)"),
            ("240.0.0.1", "a reserved address (240.0.0.0/4)"),
            (
                "255.255.255.255",
                "the limited broadcast address (255.255.255.255/32)",
            ),
            // IPv4 inside IPv6.
            (
                "::127.0.0.1",
                "a deprecated IPv4-compatible IPv6 address (::/96) embedding 127.0.0.1, a loopback address (127.0.0.0/8)",
            ),
            (
                "::169.254.169.254",
                "(::/96) embedding 169.254.169.254, a link-local address (169.254.0.0/16)",
            ),
            (
                "::8.8.8.8",
                "a deprecated IPv4-compatible IPv6 address (::/96)",
            ),
            (
                "::ffff:127.0.0.1",
                "an IPv4-mapped IPv6 address (::ffff:0.0.0.0/96) embedding 127.0.0.1, a loopback address",
            ),
            ("::ffff:7f00:1", "embedding 127.0.0.1, a loopback address"),
            ("::ffff:169.254.169.254", "cloud metadata"),
            (
                "::ffff:0:0:0",
                "an IPv4-translated IPv6 address (::ffff:0:0:0/96) embedding 0.0.0.0",
            ),
            (
                "::ffff:0:7f00:1",
                "(::ffff:0:0:0/96) embedding 127.0.0.1, a loopback address",
            ),
            (
                "::ffff:0:808:808",
                "an IPv4-translated IPv6 address (::ffff:0:0:0/96)",
            ),
            (
                "64:ff9b::a9fe:a9fe",
                "a NAT64 address (64:ff9b::/96) embedding 169.254.169.254, a link-local address",
            ),
            (
                "64:ff9b::10.0.0.1",
                "(64:ff9b::/96) embedding 10.0.0.1, a private network address",
            ),
            (
                "64:ff9b:1::808:808",
                "a local-use NAT64 address (64:ff9b:1::/48)",
            ),
            (
                "64:ff9b:1::a00:1",
                "(64:ff9b:1::/48) embedding 10.0.0.1, a private network address",
            ),
            (
                "2002:7f00:0001::",
                "a 6to4 address (2002::/16) embedding 127.0.0.1, a loopback address",
            ),
            ("2002:a9fe:a9fe::1", "embedding 169.254.169.254"),
            // A Teredo client 127.0.0.1: the last 32 bits are 0x80ff_fffe.
            (
                "2001:0:4136:e378:8000:63bf:80ff:fffe",
                "a Teredo tunnel address (2001::/32) embedding 127.0.0.1, a loopback address",
            ),
            // A Teredo client 8.8.8.8 (0xf7f7_f7f7): refused all the same.
            (
                "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
                "a Teredo tunnel address (2001::/32)",
            ),
            // The rest of the IPv6 registry, and space outside 2000::/3.
            ("fec0::1", "a deprecated site-local address (fec0::/10)"),
            ("100::1", "a discard-only address (100::/64)"),
            ("100:0:0:1::1", "a dummy address (100:0:0:1::/64)"),
            ("2001:1::1", "an IETF protocol assignment (2001::/23)"),
            ("2001:2::1", "an IETF protocol assignment (2001::/23)"),
            ("2001:3::1", "(2001::/23)"),
            ("2001:20::1", "(2001::/23)"),
            ("2001:1ff:ffff::1", "(2001::/23)"),
            ("3fff::1", "a documentation address (3fff::/20)"),
            ("3fff:fff::1", "(3fff::/20)"),
            ("5f00::1", "a segment routing (SRv6) identifier (5f00::/16)"),
            ("4000::1", "an address outside global unicast (2000::/3)"),
            ("1::1", "outside global unicast (2000::/3)"),
            ("e000::1", "outside global unicast (2000::/3)"),
        ] {
            let why = refusal(address).unwrap_or_else(|| panic!("{address} passed"));
            assert!(why.contains(named), "{address}: {why}");
        }
    }

    #[test]
    fn only_the_ends_of_a_block_are_inside_it() {
        // Just past the IETF block, and just inside global unicast: ordinary addresses.
        assert_eq!(refusal("2001:200::1"), None);
        assert_eq!(refusal("3fff:1000::1"), None);
        assert_eq!(refusal("2000::1"), None);
        assert_eq!(refusal("192.88.100.1"), None);
        assert_eq!(refusal("100.63.255.255"), None);
        assert_eq!(refusal("100.128.0.0"), None);
        assert_eq!(refusal("198.20.0.0"), None);
        assert_eq!(refusal("3fff:ffff::1"), None);
    }
}
