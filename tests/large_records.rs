//! Large records end to end, through every path that can remove a file: `DELETE /sessions`,
//! `DELETE /sessions/{id}`, the CLI's `ps` and `prune`, and the live view behind `/events`.
//!
//! Covered here:
//! - a live capsule (a real process, a real door on `127.0.0.1`) whose record carries 40
//!   credentials of some 1.8 KB, over murmur's old 64 KiB cap: listed live, `/liveness` live,
//!   and kept with its `.control` by every path;
//! - a file over the size cap (a record of a gone process that would read perfectly well but
//!   for its size): counted unreadable and kept with its `.control` by every path, each of which
//!   is shown to have run by the readable gone record it prunes beside it. Size proves nothing
//!   about being a record.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::binary::{Home, User, registry, run};
use common::server::TestServer;
use common::*;
use murmur_registry::running::{DoorProbe, MAX_RECORD_BYTES};
use serde_json::{Value, json};

/// The credentials of the report that found the old cap: 40 of some 1.8 KB each.
fn forty_credentials() -> Value {
    let credentials: serde_json::Map<String, Value> = (0..40)
        .map(|n| {
            let token = format!("cred-{n:02}-{}", "q".repeat(1_800));
            (format!("peer-{n:02}"), Value::String(token))
        })
        .collect();
    Value::Object(credentials)
}

/// The registry served in-process on `home`'s running directory, with a client.
struct Api {
    server: TestServer,
    client: reqwest::Client,
}

impl Api {
    async fn start(running: &Path) -> Self {
        let probe =
            DoorProbe::with_deadlines(Duration::from_millis(2000), Duration::from_millis(5000));
        let server = TestServer::builder()
            .probe(probe)
            .running_dir(running)
            .events_interval(Duration::from_millis(100))
            .start()
            .await;
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        Self { server, client }
    }

    async fn send(&self, method: reqwest::Method, path: &str) -> (u16, Value) {
        let response = (self.client)
            .request(method, format!("{}{path}", self.server.base()))
            .bearer_auth(self.server.token())
            .send()
            .await
            .expect("the registry answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path).await
    }

    async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::DELETE, path).await
    }

    /// Open `/events` and read its snapshot (the live view's first pass, which prunes).
    async fn snapshot(&self) -> SseEvent {
        let response = (self.client.get(format!("{}/events", self.server.base())))
            .bearer_auth(self.server.token())
            .send()
            .await
            .expect("the registry answers /events");
        EventStream::new(response, EVENT_DEADLINE).snapshot().await
    }
}

/// `murmur-registry <args>` in `home`, which must succeed.
fn cli(home: &Home, args: &[&str]) -> String {
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(args);
    let done = run(cmd);
    done.assert_success();
    done.stdout
}

/// `<id>.control` beside a record, as murmur writes one.
fn control_of(running: &Path, session_id: &str) -> PathBuf {
    write_raw(running, &format!("{session_id}.control"), "control-token")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_capsule_whose_record_carries_forty_credentials_is_live_and_kept_by_every_path() {
    let home = Home::new();
    let running = home.running_dir();
    let capsule = CapsuleProcess::single();
    let id = capsule.session_id();
    let record = capsule.record().set("credentials", forty_credentials());
    let path = home.write(&record);
    let control = control_of(&running, &id);
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        (64 * 1024..MAX_RECORD_BYTES).contains(&size),
        "{size} bytes"
    );
    let api = Api::start(&running).await;

    let (status, listing) = api.get("/sessions").await;
    assert_eq!(status, 200, "{listing}");
    assert_eq!(listing["unreadable"], 0, "{listing}");
    assert_eq!(listing["sessions"][0]["session_id"], id.as_str());
    assert_eq!(listing["sessions"][0]["liveness"]["state"], "live");
    assert!(
        !listing.to_string().contains("cred-00-"),
        "a credential leaked"
    );
    let (status, liveness) = api.get(&format!("/sessions/{id}/liveness")).await;
    assert_eq!((status, &liveness["state"]), (200, &json!("live")));

    let (status, report) = api.delete("/sessions").await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["removed_unreadable"], 0, "{report}");
    assert!(
        path.exists() && control.exists(),
        "DELETE /sessions removed it"
    );
    let (status, _) = api.delete(&format!("/sessions/{id}")).await;
    assert_eq!(status, 409, "a live session is not pruned");
    assert_eq!(api.snapshot().await.data["unreadable"], 0);

    let listed: Value = serde_json::from_str(&cli(&home, &["ps", "--json"])).unwrap();
    assert_eq!(listed[0]["session_id"], id.as_str());
    assert_eq!(listed[0]["liveness"]["state"], "live");
    cli(&home, &["ps"]);
    cli(&home, &["prune"]);
    assert!(path.exists() && control.exists(), "the CLI removed it");
}

/// A readable record of a process that is gone, for a pass to prune: evidence that it ran.
fn gone_record(home: &Home) -> PathBuf {
    home.write(&ExitedChild::spawn().record())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_over_the_cap_is_counted_unreadable_and_kept_by_every_path() {
    let home = Home::new();
    let running = home.running_dir();
    // Of a gone process, and a perfectly good record but for its size: only the size stands
    // between it and a prune.
    let cap = usize::try_from(MAX_RECORD_BYTES).unwrap();
    let big = ExitedChild::spawn()
        .record()
        .set("padding", "x".repeat(cap));
    let id = big.session_id();
    let path = home.write(&big);
    let control = control_of(&running, &id);
    let kept = || {
        assert!(path.exists(), "the file over the cap was removed");
        assert!(control.exists(), "its .control was removed");
    };
    let api = Api::start(&running).await;

    let (status, listing) = api.get("/sessions").await;
    assert_eq!(status, 200, "{listing}");
    assert_eq!(listing, json!({"sessions": [], "unreadable": 1}));
    let (status, problem) = api.get(&format!("/sessions/{id}/liveness")).await;
    assert_eq!(status, 404, "{problem}");
    let (status, problem) = api.delete(&format!("/sessions/{id}")).await;
    assert_eq!(status, 404, "{problem}");
    kept();

    let gone = gone_record(&home);
    let (status, report) = api.delete("/sessions").await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        report["pruned"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    assert_eq!(report["removed_unreadable"], 0, "{report}");
    assert_absent(&gone);
    kept();

    for args in [&["ps"][..], &["ps", "--json"], &["prune"]] {
        let gone = gone_record(&home);
        cli(&home, args);
        assert_absent(&gone);
        kept();
    }

    // The live view's first pass prunes what is gone, and leaves the rest counted.
    let gone = gone_record(&home);
    let snapshot = api.snapshot().await;
    assert_eq!(snapshot.data["unreadable"], 1, "{snapshot:?}");
    wait_until("the live view prunes the gone record", DEADLINE, || {
        !gone.exists()
    });
    kept();
}
