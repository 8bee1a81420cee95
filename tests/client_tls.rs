//! The typed client and `https://`: with the `client-tls` feature it reaches a real TLS
//! listener whose certificate it can verify (a CA the test makes with the `openssl` command),
//! sends its token only inside TLS, and refuses a certificate it cannot verify before sending
//! anything; without the feature an `https://` URL is refused outright, never asked over plain
//! HTTP.
//!
//! The registry serves plain HTTP on loopback (TLS is a proxy's job in front of it), so the
//! listener here is a small TLS server in the test answering as the registry does.
//! `cargo test --no-default-features --features client-tls --test client_tls` runs the TLS
//! half (`.ci/run` does); the plain build runs the refusal.

#[cfg(not(feature = "client-tls"))]
#[tokio::test]
async fn without_the_feature_an_https_url_is_refused_and_nothing_is_sent() {
    use murmur_registry::client::{Client, Error};

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let refused = Client::new(&url, "s3cret").unwrap_err();
    assert!(matches!(refused, Error::Url(_)), "{refused:?}");
    assert!(refused.to_string().contains("`client-tls`"), "{refused}");
    let met = listener.accept();
    assert!(
        matches!(&met, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "something was sent: {met:?}"
    );
}

// The CA maker the fleet's TLS tests use, alone: the rest of tests/common needs the server.
#[cfg(feature = "client-tls")]
#[path = "common/certs.rs"]
#[allow(dead_code)] // the client certificate is the fleet's, unused here
mod certs;

#[cfg(feature = "client-tls")]
mod tls {
    use std::sync::{Arc, Mutex};

    use murmur_registry::client::{Client, Error};
    use murmur_registry::wire::ListQuery;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    use super::certs::TestCerts;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// A TLS listener answering `GET /healthz` and `GET /sessions` as an empty registry does;
    /// keeps each request's head, and counts handshakes that failed.
    struct TlsRegistry {
        url: String,
        heads: Arc<Mutex<Vec<String>>>,
        refused: Arc<Mutex<usize>>,
    }

    async fn tls_registry(certs: &TestCerts) -> TlsRegistry {
        let chain = CertificateDer::pem_file_iter(&certs.server_cert)
            .expect("the certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("PEM");
        let key = PrivateKeyDer::from_pem_file(&certs.server_key).expect("the key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("a server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("https://{}", listener.local_addr().expect("an address"));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(0));
        let (kept, failed) = (Arc::clone(&heads), Arc::clone(&refused));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, kept, failed) =
                    (acceptor.clone(), Arc::clone(&kept), Arc::clone(&failed));
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        *failed.lock().unwrap() += 1;
                        return;
                    };
                    let head = read_head(&mut tls).await;
                    let body = if head.starts_with("GET /sessions") {
                        r#"{"sessions":[],"unreadable":0}"#
                    } else {
                        ""
                    };
                    kept.lock().unwrap().push(head);
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        TlsRegistry {
            url,
            heads,
            refused,
        }
    }

    /// A request's head, up to its blank line.
    async fn read_head(stream: &mut (impl AsyncReadExt + Unpin)) -> String {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs the openssl command (Debian openssl), run with --features client-tls"]
    async fn a_registry_behind_tls_is_reached_with_its_ca_and_the_token_goes_inside() {
        let certs = TestCerts::generate();
        let registry = tls_registry(&certs).await;
        let ca = std::fs::read(&certs.ca).expect("the CA");
        let client = Client::with_root_certificates(&registry.url, TOKEN, &ca).unwrap();
        client.healthz().await.unwrap();
        let query = ListQuery {
            probe: Some(false),
            ..ListQuery::default()
        };
        let list = client.sessions(&query).await.unwrap();
        assert!(list.sessions.is_empty() && list.unreadable == 0, "{list:?}");
        let heads = registry.heads.lock().unwrap().clone();
        assert_eq!(heads.len(), 2, "{heads:?}");
        assert!(
            heads[1].starts_with("GET /sessions?probe=false "),
            "{heads:?}"
        );
        let bearer = format!("authorization: Bearer {TOKEN}\r\n");
        assert!(
            heads[1]
                .to_ascii_lowercase()
                .contains(&bearer.to_ascii_lowercase())
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs the openssl command (Debian openssl), run with --features client-tls"]
    async fn a_certificate_it_cannot_verify_is_refused_before_anything_is_sent() {
        let certs = TestCerts::generate();
        let registry = tls_registry(&certs).await;
        // The system's roots only: the test's CA is not among them.
        let client = Client::new(&registry.url, TOKEN).unwrap();
        let refused = client.sessions(&ListQuery::default()).await.unwrap_err();
        assert!(matches!(refused, Error::Transport { .. }), "{refused:?}");
        let not_pem = Client::with_root_certificates(&registry.url, TOKEN, b"not PEM");
        assert!(matches!(not_pem, Err(Error::Url(_))), "{not_pem:?}");
        // The listener's side of the failed handshake ends on its own time: polled, not slept on.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while *registry.refused.lock().unwrap() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no handshake was refused"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(
            registry.heads.lock().unwrap().is_empty(),
            "a request went out"
        );
    }
}
