//! The watcher against a real etcd where only its parts can show it: a watch whose start
//! revision is compacted away ends as a compaction (never as a failure), and the fresh read
//! that follows keeps the view current and tells listeners the differences.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use tokio::time::Instant;

use etcd_client::{ConnectOptions, PutOptions};

use super::*;
use crate::fleet::HostId;
use crate::fleet::cache::FleetChange;
use crate::fleet::view::FleetNext;

/// A one-member etcd on free loopback ports with a private data directory, killed on drop.
struct SoloEtcd {
    endpoint: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl SoloEtcd {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        // Both bound at once, so they differ.
        let bound = [(); 2].map(|()| TcpListener::bind("127.0.0.1:0").expect("a free port"));
        let [client, peer] = bound
            .each_ref()
            .map(|l| l.local_addr().expect("a bound address").port());
        drop(bound);
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("/usr/bin/etcd")
            .args(["--name", "solo", "--listen-client-urls", &endpoint])
            .args([
                "--advertise-client-urls",
                &endpoint,
                "--listen-peer-urls",
                &peer_url,
            ])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("solo={peer_url}")])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn /usr/bin/etcd (Debian: apt-get install etcd-server)");
        let etcd = Self {
            endpoint,
            child,
            _dir: dir,
        };
        let start = Instant::now();
        loop {
            if let Ok(mut client) = etcd.connect().await
                && client.get("ready", None).await.is_ok()
            {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not answer"
            );
            // Paces the polling only.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        etcd
    }

    async fn client(&self) -> Client {
        self.connect()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.endpoint))
    }

    async fn connect(&self) -> Result<Client, etcd_client::Error> {
        let second = Duration::from_secs(1);
        let options = ConnectOptions::new()
            .with_connect_timeout(second)
            .with_timeout(second);
        Client::connect([self.endpoint.as_str()], Some(options)).await
    }
}

impl Drop for SoloEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn session(host: &str, id: &str, state: &str) -> String {
    serde_json::json!({
        "host_id": host, "changed_at": "2026-12-01T00:00:00Z", "door_scope": null,
        "skills": [], "session_id": id, "started_at": "2026-12-01T00:00:00Z",
        "liveness": {"state": state}
    })
    .to_string()
}

/// A watcher of `keys` on `etcd` feeding `view`, at a 3 s lease's deadlines and 10 s a page.
fn watcher_of(etcd: &SoloEtcd, keys: FleetKeys, view: &FleetView) -> Watcher {
    let ttl = Duration::from_secs(3);
    Watcher {
        // The shared settings carry TLS and credential fields on the publishing branch.
        #[allow(clippy::needless_update)]
        settings: EtcdSettings {
            endpoints: vec![etcd.endpoint.clone()],
            ..Default::default()
        },
        keys,
        ttl,
        deadlines: WatchDeadlines::for_ttl(ttl),
        paging: ReadPaging {
            keys: READ_PAGE_KEYS,
            deadline: Duration::from_secs(10),
        },
        view: view.clone(),
    }
}

#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_compacted_watch_is_read_again_and_listeners_get_the_differences() {
    let etcd = SoloEtcd::start().await;
    let mut client = etcd.client().await;
    let keys = FleetKeys::new("/compaction");
    let b: HostId = "b".parse().expect("a host id");
    client
        .put(
            keys.session(&b, "ses_1"),
            session("b", "ses_1", "live"),
            None,
        )
        .await
        .expect("put");
    let view = FleetView::new("a".parse().expect("a host id"));
    let watcher = watcher_of(&etcd, keys.clone(), &view);
    let deadline = Instant::now() + Duration::from_secs(10);
    let read_at = watcher.read(&mut client, deadline).await.expect("a read");
    let (before, mut listener) = view.subscribe().expect("current");
    assert_eq!(before.sessions.len(), 1);

    // What the watch would have carried is compacted away before it starts.
    client
        .put(
            keys.session(&b, "ses_1"),
            session("b", "ses_1", "gone"),
            None,
        )
        .await
        .expect("put");
    let put = client
        .put(
            keys.session(&b, "ses_2"),
            session("b", "ses_2", "live"),
            Some(PutOptions::new()),
        )
        .await
        .expect("put");
    let latest = put.header().map_or(0, |h| h.revision());
    client.compact(latest, None).await.expect("compact");
    assert_eq!(
        watcher.watch_from(&mut client, read_at + 1).await,
        Stop::Compacted
    );
    assert!(view.current().is_ok(), "a compaction is not an outage");

    // What the run loop does next: read again and follow; listeners get the differences.
    let following = tokio::spawn(async move {
        let mut client = client;
        watcher.follow(&mut client).await
    });
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(10), listener.next())
            .await
            .expect("the differences arrive");
        match next {
            Ok(FleetNext::Event(event)) => seen.push(match &event.change {
                FleetChange::SessionChanged { now, .. } => {
                    format!("changed {:?}", now.state().unwrap_or_default())
                }
                FleetChange::SessionAdded(entry) => {
                    format!("added {:?}", entry.session_id())
                }
                other => format!("{other:?}"),
            }),
            other => panic!("an event: {other:?}"),
        }
    }
    assert_eq!(seen, [r#"changed "gone""#, r#"added "ses_2""#]);
    let now = view.current().expect("current");
    assert!(now.revision >= latest, "{} < {latest}", now.revision);
    following.abort();
}

/// A fleet larger than gRPC's default 4 MiB message is read whole, not refused.
#[tokio::test]
#[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
async fn a_fleet_larger_than_four_mib_is_read() {
    let etcd = SoloEtcd::start().await;
    let mut client = etcd.client().await;
    let keys = FleetKeys::new("/large");
    let b: HostId = "b".parse().expect("a host id");
    const SESSIONS: usize = 1_000;
    for batch in 0..SESSIONS / 100 {
        let puts: Vec<_> = (batch * 100..(batch + 1) * 100)
            .map(|i| {
                let id = format!("ses_{i}");
                let mut value: serde_json::Value =
                    serde_json::from_str(&session("b", &id, "live")).expect("JSON");
                value["workdir"] = "w".repeat(5_000).into();
                etcd_client::TxnOp::put(keys.session(&b, &id), value.to_string(), None)
            })
            .collect();
        client
            .txn(etcd_client::Txn::new().and_then(puts))
            .await
            .expect("a transaction");
    }
    let view = FleetView::new("a".parse().expect("a host id"));
    let watcher = watcher_of(&etcd, keys, &view);
    let deadline = Instant::now() + Duration::from_secs(20);
    watcher
        .read(&mut client, deadline)
        .await
        .expect("a read of about 5 MB");
    assert_eq!(view.current().expect("current").sessions.len(), SESSIONS);
}
