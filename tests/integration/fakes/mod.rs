//! In-process fakes of the remote services file-agent calls, speaking their real HTTP APIs on
//! 127.0.0.1 so that the real client code (async-openai, reqwest multipart, kube-rs, kubectl)
//! is what runs.

pub mod issuer;
pub mod kubernetes;
pub mod openai;
pub mod openwebui;
pub mod witness;

/// Serves `app` on a free loopback port; the server lives as long as the test's runtime.
pub async fn spawn(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{address}")
}

/// A loopback URL where nothing listens (a bound-then-closed port).
pub async fn dead_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}")
}
