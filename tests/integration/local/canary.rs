//! The network canary's script (`src/sandbox/canary_probe.py`, in the fresh interpreter it
//! starts) run by the fast tier's runner on this host's loopback, and judged as the server
//! judges a canary pod's: a datagram answered and a name resolved are reached; a closed port, a
//! port that never answers and a name that does not resolve are not; silence costs one
//! `PROBE_WAIT`, whatever the number of probes.

use std::time::{Duration, Instant};

use file_agent::config::SandboxConfig;
use file_agent::sandbox::{Job, Runner, Verdict, canary};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::LocalRunner;
use crate::common::with_timeout;

/// The verdict on the canary's script run with `targets` and `name`, and how long it took.
async fn canary_verdict(targets: &[String], name: &str) -> (Verdict, Duration) {
    let runner = LocalRunner::new(SandboxConfig::from_lookup(|_| None).unwrap());
    let out = tempfile::tempdir().unwrap();
    let job = Job {
        script: canary::script(targets, name),
        ..Job::default()
    };
    let began = Instant::now();
    let outcome = with_timeout(runner.run(job, out.path(), &CancellationToken::new()))
        .await
        .unwrap();
    (canary::judge(&outcome), began.elapsed())
}

/// A loopback UDP port nothing listens on (bound, then let go).
async fn closed_udp_port() -> String {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.local_addr().unwrap().to_string()
}

#[tokio::test]
async fn a_datagram_back_and_a_resolved_name_are_reached_and_silence_is_waited_for_once() {
    // One port answers every datagram, one never answers, one is closed.
    let answering = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let answering_at = answering.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut buffer = [0u8; 512];
        while let Ok((read, from)) = answering.recv_from(&mut buffer).await {
            let _ = answering.send_to(&buffer[..read], from).await;
        }
    });
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let targets = [
        answering_at.clone(),
        silent.local_addr().unwrap().to_string(),
        closed_udp_port().await,
    ];
    let (verdict, took) = canary_verdict(&targets, "localhost").await;
    assert_eq!(
        verdict,
        Verdict::Reached(vec![
            format!("{answering_at} (udp)"),
            "localhost (dns lookup)".into()
        ])
    );
    assert!(
        took >= canary::PROBE_WAIT && took < canary::PROBE_WAIT + Duration::from_secs(5),
        "{took:?}"
    );
    drop(silent);
}

#[tokio::test]
async fn a_closed_port_and_a_name_that_does_not_resolve_are_not_reached() {
    let (verdict, _) =
        canary_verdict(&[closed_udp_port().await], "file-agent-canary.invalid.").await;
    assert_eq!(verdict, Verdict::Isolated);
}
