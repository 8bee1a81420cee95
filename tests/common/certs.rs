//! A private CA of a test's own and certificates it signed, made by the `openssl` command, as
//! PEM files in a temporary directory that lives as long as any copy of [`TestCerts`].
//!
//! Invariant: std and `tempfile` only, so a test built without the server (tests/client_tls.rs,
//! which includes this file alone) can use it as the fleet's TLS tests do.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tempfile::TempDir;

/// A CA and, signed by it, a server certificate for `127.0.0.1` and a client certificate
/// (P-256 keys, valid for a day).
#[derive(Clone)]
pub struct TestCerts {
    /// Kept alive as long as any copy is: the files live in it.
    _dir: Arc<TempDir>,
    /// The CA certificate.
    pub ca: PathBuf,
    /// The server's certificate and key.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// The client's certificate and key.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl TestCerts {
    /// A fresh CA, server and client certificate.
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let at = |args: &[&str]| openssl(dir.path(), args);
        key(dir.path(), "ca.key");
        at(&[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-days",
            "1",
            "-subj",
            "/CN=test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-out",
            "ca.pem",
        ]);
        sign(
            dir.path(),
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        sign(dir.path(), "client", "extendedKeyUsage=clientAuth\n");
        let path = |name: &str| dir.path().join(name);
        Self {
            ca: path("ca.pem"),
            server_cert: path("server.pem"),
            server_key: path("server.key"),
            client_cert: path("client.pem"),
            client_key: path("client.key"),
            _dir: Arc::new(dir),
        }
    }
}

/// `<name>.key` and `<name>.pem`, a certificate for `/CN=<name>` with `extensions` (an
/// openssl extension file's text), signed by the CA in `dir`.
fn sign(dir: &Path, name: &str, extensions: &str) {
    let at = |args: &[&str]| openssl(dir, args);
    let (key_file, csr, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.ext"),
    );
    key(dir, &key_file);
    let subject = format!("/CN={name}");
    at(&[
        "req", "-new", "-key", &key_file, "-subj", &subject, "-out", &csr,
    ]);
    std::fs::write(dir.join(&ext), extensions).expect("write extensions");
    let pem = format!("{name}.pem");
    at(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &ext,
        "-out",
        &pem,
    ]);
}

/// A P-256 private key in `dir/name`.
fn key(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "ecparam",
            "-genkey",
            "-name",
            "prime256v1",
            "-noout",
            "-out",
            name,
        ],
    );
}

/// Run `openssl args…` in `dir`, failing the test with its stderr if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run the openssl command");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
