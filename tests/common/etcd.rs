//! Real etcd servers for the fleet tests: `/usr/bin/etcd` (Debian's `etcd-server`) on free
//! loopback ports (a solo server also on one more address, for a host in another network
//! namespace) with a private data directory, alone ([`Etcd`]) or as a cluster of members
//! ([`EtcdCluster`]), over plain HTTP or over TLS with client certificates ([`TestCerts`], made
//! by the `openssl` command).
//!
//! Invariants: a server is handed out only once it answers a read that needs a quorum (polled
//! under a deadline, never slept on); every server process is killed and reaped on drop, its
//! data directory removed with the test's. Ports are found by binding port 0 and letting go: a
//! server that loses that tiny race and exits is started again on fresh ports.

use std::fs::File;
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use tempfile::TempDir;

pub use super::certs::TestCerts;
use super::temp_dir;

/// The etcd server binary (Debian's `etcd-server`).
pub const ETCD: &str = "/usr/bin/etcd";
/// How long a server (or a cluster) may take to answer after starting, on a loaded machine.
const READY_DEADLINE: Duration = Duration::from_secs(30);
/// How often a server that lost its ports to another process is started again.
const PORT_RETRIES: usize = 5;

/// One etcd member: its name, ports, data directory and, while it runs, its process.
pub struct Etcd {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// `name=peer-url,…` of every member of its cluster.
    initial_cluster: String,
    dir: TempDir,
    /// Set for a server that talks TLS only and asks clients for a certificate.
    tls: Option<TestCerts>,
    /// Another address it answers clients on, beside loopback (same port).
    also_on: Option<IpAddr>,
    /// More flags for the server (the bench's `--quota-backend-bytes`).
    flags: Vec<String>,
    child: Option<Child>,
}

impl Etcd {
    /// A one-member etcd, answering.
    pub async fn start() -> Self {
        Self::start_solo(None, &[]).await
    }

    /// A one-member etcd started with `flags` besides the usual ones, answering.
    pub async fn start_with(flags: &[String]) -> Self {
        Self::start_solo(None, flags).await
    }

    /// A one-member etcd that talks TLS only (a certificate from `certs`' CA) and accepts only
    /// clients with a certificate from that CA.
    pub async fn start_tls(certs: TestCerts) -> Self {
        Self::start_solo(Some(certs), &[]).await
    }

    /// A one-member etcd answering clients on `ip` too (same port as on loopback), for a
    /// host in another network namespace ([`Etcd::endpoint_on`]).
    pub async fn start_also_on(ip: IpAddr) -> Self {
        Self::start_solo_on(None, Some(ip), &[]).await
    }

    async fn start_solo(tls: Option<TestCerts>, flags: &[String]) -> Self {
        Self::start_solo_on(tls, None, flags).await
    }

    async fn start_solo_on(
        tls: Option<TestCerts>,
        also_on: Option<IpAddr>,
        flags: &[String],
    ) -> Self {
        for _ in 0..PORT_RETRIES {
            let [client_port, peer_port] = free_port_pairs(1)[0];
            let name = "solo".to_owned();
            let initial_cluster = format!("{name}=http://127.0.0.1:{peer_port}");
            let mut etcd = Self::configured(name, client_port, peer_port, initial_cluster);
            etcd.tls = tls.clone();
            etcd.also_on = also_on;
            etcd.flags = flags.to_vec();
            etcd.spawn();
            if etcd.wait_ready().await {
                return etcd;
            }
        }
        panic!("etcd did not start on free ports in {PORT_RETRIES} tries")
    }

    fn configured(name: String, client_port: u16, peer_port: u16, initial_cluster: String) -> Self {
        Self {
            name,
            client_port,
            peer_port,
            initial_cluster,
            dir: temp_dir(),
            tls: None,
            also_on: None,
            flags: Vec::new(),
            child: None,
        }
    }

    /// `http://127.0.0.1:<client port>` (`https://` for a TLS server).
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The endpoint on `ip`, an address it was started to answer on too
    /// ([`Etcd::start_also_on`]).
    pub fn endpoint_on(&self, ip: IpAddr) -> String {
        assert_eq!(self.also_on, Some(ip), "etcd answers on {ip}");
        self.endpoint().replace("127.0.0.1", &ip.to_string())
    }

    /// A client of this member alone, with short deadlines (and the client certificate, for a
    /// TLS server).
    pub async fn client(&self) -> Client {
        connect_with(&[self.endpoint()], self.tls.as_ref())
            .await
            .unwrap_or_else(|e| panic!("connect to etcd {}: {e}\n{}", self.endpoint(), self.log()))
    }

    /// Its own `/metrics` exposition, as text (a server without TLS).
    pub async fn metrics(&self) -> String {
        let answer = reqwest::get(format!("{}/metrics", self.endpoint())).await;
        let answer = answer.unwrap_or_else(|e| panic!("etcd's /metrics: {e}\n{}", self.log()));
        answer.text().await.expect("etcd's metrics")
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `kill -9` the server and reap it (a crash: nothing flushed, nothing said).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `kill -STOP`: the server keeps its connections open and answers nothing.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// `kill -CONT`: a frozen server goes on.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Start the killed server again on the same ports and data directory, and wait until it
    /// answers (for a member of a cluster: once a quorum runs).
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(
            self.wait_ready().await,
            "etcd did not come back:\n{}",
            self.log()
        );
    }

    /// What the server wrote to stderr so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn signal(&self, signal: &str) {
        let pid = self.pid().expect("etcd is running");
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    fn spawn(&mut self) {
        let client_url = self.endpoint();
        let client_urls = match self.also_on {
            Some(ip) => format!("{client_url},{}", self.endpoint_on(ip)),
            None => client_url.clone(),
        };
        let peer_url = format!("http://127.0.0.1:{}", self.peer_port);
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open etcd's log");
        let mut command = Command::new(ETCD);
        if let Some(certs) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&certs.server_cert)
                .arg("--key-file")
                .arg(&certs.server_key)
                .arg("--trusted-ca-file")
                .arg(&certs.ca)
                .arg("--client-cert-auth");
        }
        let child = command
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client_urls])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(&self.flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {ETCD} (Debian: apt-get install etcd-server): {e}"));
        self.child = Some(child);
    }

    /// Poll until a quorum read answers (`true`), or the process exits (`false`: most likely
    /// it lost its ports). Panics after [`READY_DEADLINE`].
    async fn wait_ready(&mut self) -> bool {
        let start = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut()
                && child.try_wait().ok().flatten().is_some()
            {
                self.child = None;
                return false;
            }
            if answers(&self.endpoint(), self.tls.as_ref()).await {
                return true;
            }
            assert!(
                start.elapsed() < READY_DEADLINE,
                "etcd {} did not answer within {READY_DEADLINE:?}:\n{}",
                self.name,
                self.log()
            );
            // Paces the polling only.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // SIGKILL ends a frozen (SIGSTOPped) server too.
        self.kill();
    }
}

/// A cluster of etcd members on loopback.
pub struct EtcdCluster {
    /// The members, in the order they were configured.
    pub members: Vec<Etcd>,
}

impl EtcdCluster {
    /// `size` members forming one cluster, every one answering.
    pub async fn start(size: usize) -> Self {
        'attempt: for _ in 0..PORT_RETRIES {
            let ports = free_port_pairs(size);
            let initial_cluster = ports
                .iter()
                .enumerate()
                .map(|(i, [_, peer])| format!("m{i}=http://127.0.0.1:{peer}"))
                .collect::<Vec<_>>()
                .join(",");
            let mut members: Vec<Etcd> = ports
                .iter()
                .enumerate()
                .map(|(i, [client, peer])| {
                    Etcd::configured(format!("m{i}"), *client, *peer, initial_cluster.clone())
                })
                .collect();
            members.iter_mut().for_each(Etcd::spawn);
            for member in &mut members {
                if !member.wait_ready().await {
                    continue 'attempt;
                }
            }
            return Self { members };
        }
        panic!("an etcd cluster did not start on free ports in {PORT_RETRIES} tries")
    }

    /// Every member's endpoint, for a client that may use any of them.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Etcd::endpoint).collect()
    }

    /// The index of the current leader among the running members.
    pub async fn leader(&self) -> usize {
        for member in self.members.iter().filter(|m| m.child.is_some()) {
            let Ok(mut client) = connect(&[member.endpoint()]).await else {
                continue;
            };
            let Ok(status) = client.status().await else {
                continue;
            };
            let leader = status.leader();
            for (index, candidate) in self.members.iter().enumerate() {
                if candidate.child.is_none() {
                    continue;
                }
                let Ok(mut client) = connect(&[candidate.endpoint()]).await else {
                    continue;
                };
                if let Ok(status) = client.status().await
                    && status.header().map(|h| h.member_id()) == Some(leader)
                {
                    return index;
                }
            }
        }
        panic!("no running member names a leader among the running members")
    }
}

/// A client of `endpoints` with deadlines short enough for polling.
pub async fn connect(endpoints: &[String]) -> Result<Client, etcd_client::Error> {
    connect_with(endpoints, None).await
}

/// [`connect`], over TLS with `certs`' CA and client certificate when given.
pub async fn connect_with(
    endpoints: &[String],
    certs: Option<&TestCerts>,
) -> Result<Client, etcd_client::Error> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2));
    if let Some(certs) = certs {
        let read = |path: &PathBuf| std::fs::read(path).expect("read a test certificate");
        let tls = TlsOptions::new()
            .ca_certificate(Certificate::from_pem(read(&certs.ca)))
            .identity(Identity::from_pem(
                read(&certs.client_cert),
                read(&certs.client_key),
            ));
        options = options.with_tls(tls);
    }
    Client::connect(endpoints, Some(options)).await
}

/// Whether the server at `endpoint` answers a read that needs a quorum.
async fn answers(endpoint: &str, certs: Option<&TestCerts>) -> bool {
    match connect_with(&[endpoint.to_owned()], certs).await {
        Ok(mut client) => client.get("/health-probe", None).await.is_ok(),
        Err(_) => false,
    }
}

/// `count` pairs of loopback ports nothing listened on a moment ago, all different: every
/// listener is held until all are bound (ports let go one call at a time come back from the
/// kernel, and a cluster's members would clash).
fn free_port_pairs(count: usize) -> Vec<[u16; 2]> {
    let listeners: Vec<TcpListener> = (0..count * 2)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    let port = |l: &TcpListener| l.local_addr().expect("a bound address").port();
    listeners
        .chunks(2)
        .map(|pair| [port(&pair[0]), port(&pair[1])])
        .collect()
}
