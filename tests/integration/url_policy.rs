//! The document fetcher against special-purpose addresses that really answer. Each address is
//! put on the loopback interface of a network namespace of the test's own, where a file server
//! listens on all of them; the real `UrlFetcher` refuses each with its range named, and fetches
//! the same file through the same address once `FILE_AGENT_URL_ALLOWED_NETWORKS` lists it, so
//! the refusal is the policy and not a dead address.
//!
//! The namespace belongs to one thread. `unshare(CLONE_NEWNET)` moves that thread alone into a
//! new, empty network namespace; the `ip` commands it starts, the server and the fetcher run in
//! it, and nothing on the host changes (no route, no address, no named namespace). It has no
//! name, so nothing can be left behind: the kernel frees it when the thread and its sockets
//! are gone, whether the test passes, panics or is killed. A machine that cannot create network
//! namespaces (not root, no `CAP_SYS_ADMIN`) skips the test and says so.

use std::net::IpAddr;
use std::time::Duration;

use file_agent::config::{Network, TransferLimits, UrlFetchConfig};
use file_agent::storage::url::{FetchError, UrlFetcher};

use crate::common::with_timeout;

/// What the file server answers.
const DOCUMENT: &str = "region,amount\nNorth,100\n";

/// Addresses put on the namespace's loopback, and the words their refusal must hold. The
/// first group was fetched before the fetcher knew the registries; the second was refused
/// before and still is.
const ADDRESSES: &[(&str, &str)] = &[
    (
        "::127.0.0.1",
        "a deprecated IPv4-compatible IPv6 address (::/96) embedding 127.0.0.1, a loopback address (127.0.0.0/8)",
    ),
    (
        "::169.254.169.254",
        "(::/96) embedding 169.254.169.254, a link-local address (169.254.0.0/16)",
    ),
    (
        "::ffff:0:7f00:1",
        "an IPv4-translated IPv6 address (::ffff:0:0:0/96) embedding 127.0.0.1, a loopback address",
    ),
    ("fec0::1", "a deprecated site-local address (fec0::/10)"),
    ("100::1", "a discard-only address (100::/64)"),
    ("2001::1", "a Teredo tunnel address (2001::/32)"),
    ("2001:2::1", "an IETF protocol assignment (2001::/23)"),
    ("2001:db8::1", "a documentation address (2001:db8::/32)"),
    ("3fff::1", "a documentation address (3fff::/20)"),
    ("4000::1", "an address outside global unicast (2000::/3)"),
    ("5f00::1", "a segment routing (SRv6) identifier (5f00::/16)"),
    (
        "64:ff9b:1::a00:1",
        "a local-use NAT64 address (64:ff9b:1::/48) embedding 10.0.0.1",
    ),
    (
        "192.88.99.1",
        "a deprecated 6to4 relay anycast address (192.88.99.0/24)",
    ),
    ("192.0.0.8", "an IETF protocol assignment (192.0.0.0/24)"),
    ("198.18.0.1", "a benchmarking address (198.18.0.0/15)"),
    ("192.0.2.1", "a documentation address (192.0.2.0/24)"),
    // The controls.
    ("127.0.0.1", "a loopback address (127.0.0.0/8)"),
    ("::1", "a loopback address (::1/128)"),
    (
        "169.254.169.254",
        "a link-local address (169.254.0.0/16), where cloud metadata services answer",
    ),
    ("10.9.8.7", "a private network address (10.0.0.0/8)"),
    ("172.16.0.1", "a private network address (172.16.0.0/12)"),
    ("192.168.1.1", "a private network address (192.168.0.0/16)"),
    ("100.64.0.1", "a shared (CGNAT) address (100.64.0.0/10)"),
    ("fd00::1", "a private (unique local) address (fc00::/7)"),
];

#[test]
fn special_purpose_addresses_that_answer_are_refused_by_the_fetcher_with_their_range() {
    // The thread that owns the namespace; its end frees it.
    let thread = std::thread::Builder::new().name("own-network-namespace".into());
    let outcome = thread.spawn(|| {
        match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            Ok(()) => {}
            Err(nix::errno::Errno::EPERM) => {
                eprintln!(
                    "SKIPPED: this machine cannot create a network namespace (unshare(CLONE_NEWNET) needs root or CAP_SYS_ADMIN)"
                );
                return;
            }
            Err(error) => panic!("unshare(CLONE_NEWNET): {error}"),
        }
        put_on_loopback(ADDRESSES.iter().map(|(address, _)| *address));
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(fetch_each());
    })
    .unwrap()
    .join();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Brings up the namespace's loopback and adds each address to it (IPv6 without duplicate
/// address detection, so that each is usable at once).
fn put_on_loopback<'a>(addresses: impl Iterator<Item = &'a str>) {
    ip(&["link", "set", "lo", "up"]);
    for address in addresses {
        match address.parse::<IpAddr>().unwrap() {
            IpAddr::V4(_) if address == "127.0.0.1" => {}
            IpAddr::V6(v6) if v6.is_loopback() => {}
            IpAddr::V4(_) => ip(&["addr", "add", &format!("{address}/32"), "dev", "lo"]),
            IpAddr::V6(_) => ip(&[
                "-6",
                "addr",
                "add",
                &format!("{address}/128"),
                "dev",
                "lo",
                "nodad",
            ]),
        }
    }
}

/// Runs `ip` (iproute2) in this thread's namespace, failing the test if it fails.
fn ip(args: &[&str]) {
    let output = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run ip {args:?} (is iproute2 installed?): {error}"));
    assert!(
        output.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn fetch_each() {
    let listener = with_timeout(tokio::net::TcpListener::bind("[::]:0"))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route("/doc.csv", axum::routing::get(|| async { DOCUMENT }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let limits = TransferLimits {
        max_bytes: 1024 * 1024,
        timeout: Duration::from_secs(10),
    };
    let refusing = UrlFetcher::new(UrlFetchConfig::default(), limits).unwrap();
    for (address, named) in ADDRESSES {
        let host = match address.parse::<IpAddr>().unwrap() {
            IpAddr::V4(_) => address.to_string(),
            IpAddr::V6(_) => format!("[{address}]"),
        };
        let url = format!("http://{host}:{port}/doc.csv?X-Amz-Signature=sig-secret");

        let error = match with_timeout(refusing.fetch(&url, None)).await {
            Ok(_) => panic!("{address} was fetched under the default policy"),
            Err(error) => error,
        };
        let message = error.to_string();
        assert!(
            matches!(error, FetchError::Refused { .. }),
            "{address}: {message}"
        );
        assert!(message.contains(named), "{address}: {message}");
        assert!(!message.contains("sig-secret"), "{message}");

        // The same address, listed: the same server answers through it.
        let listed = UrlFetchConfig {
            allowed_networks: vec![Network::parse(address).unwrap()],
            ..UrlFetchConfig::default()
        };
        let allowing = UrlFetcher::new(listed, limits).unwrap();
        let download = with_timeout(allowing.fetch(&url, None))
            .await
            .unwrap_or_else(|error| panic!("{address}, listed: {error}"));
        assert_eq!(download.bytes, DOCUMENT.as_bytes(), "{address}");
        assert_eq!(download.name, "doc.csv");
    }
}
