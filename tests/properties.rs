//! Arbitrary session ids, methods and bodies against the real server, as a hostile client
//! would send them: never a 5xx, never a panic, and nothing in or beside the running
//! directory changes (a live capsule's record, a decoy file one level up, a decoy record in
//! a sibling directory).
//!
//! The number of cases follows `PROPTEST_CASES` (default 300).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::server::TestServer;
use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Percent-encode every byte outside the unreserved set, so the server sees exactly `raw`.
fn encode(raw: &[u8]) -> String {
    raw.iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-_~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn ids() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40),
        "[A-Za-z0-9_./-]{0,30}".prop_map(String::into_bytes),
        prop::sample::select(vec![
            "..",
            ".",
            "../decoy",
            "..%2Fdecoy",
            "../../etc/passwd",
            "/etc/passwd",
            "x/../y",
            ".hidden",
            "ses_../x",
            "a\u{0}b",
            "%00",
            "ses_sibling/../x"
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        "[A-Za-z0-9_-]{120,140}".prop_map(String::into_bytes),
    ]
}

/// A running directory holding one live capsule's record, beside decoys a traversal would
/// reach: a file one level up, a record in a sibling directory.
struct Laid {
    home: tempfile::TempDir,
    running: std::path::PathBuf,
    sibling: std::path::PathBuf,
}

impl Laid {
    fn out(capsule: &TestProcess) -> Self {
        let home = temp_dir();
        let running = home.path().join("running");
        std::fs::create_dir(&running).expect("running dir");
        std::fs::set_permissions(
            &running,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("0700");
        let record = capsule.record().no_door();
        record.write_in(&running);
        std::fs::write(home.path().join("decoy.json"), record.to_bytes()).expect("decoy");
        let sibling = home.path().join("sibling");
        std::fs::create_dir(&sibling).expect("sibling");
        RecordJson::fresh()
            .process(capsule.pid(), &capsule.start_token())
            .write_in(&sibling);
        Self {
            home,
            running,
            sibling,
        }
    }

    /// What is there now: one level up, the running directory, the sibling.
    fn snapshot(&self) -> [std::collections::BTreeMap<String, EntrySnapshot>; 3] {
        [
            dir_snapshot(self.home.path()),
            dir_snapshot(&self.running),
            dir_snapshot(&self.sibling),
        ]
    }
}

/// Arbitrary ids, tails, methods, bodies and content types sent to `server` (with its token),
/// `PROPTEST_CASES` of them: none answered with a 5xx. How many were sent.
fn send_arbitrary(runtime: &tokio::runtime::Runtime, server: &TestServer) -> usize {
    let (base, token) = (server.base().to_owned(), server.token().to_owned());
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let sent = AtomicUsize::new(0);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let strategy = (
        ids(),
        prop::sample::select(vec!["", "/liveness", "/signal", "/stop?timeout=0", "/x"]),
        prop::sample::select(vec!["GET", "DELETE", "POST", "PUT"]),
        prop::collection::vec(any::<u8>(), 0..64),
        prop::sample::select(vec![
            "application/json",
            "text/plain",
            "application/x-www-form-urlencoded",
        ]),
    );
    runner
        .run(&strategy, |(id, tail, method, body, content_type)| {
            let url = format!("{base}/sessions/{}{tail}", encode(&id));
            let status = runtime.block_on(async {
                client
                    .request(method.parse().expect("method"), &url)
                    .bearer_auth(&token)
                    .header("content-type", content_type)
                    .body(body)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            });
            sent.fetch_add(1, Ordering::Relaxed);
            let status = status.map_err(|e| TestCaseError::fail(format!("{url}: {e}")))?;
            prop_assert!(status < 500, "{} {} answered {}", method, url, status);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    sent.into_inner()
}

#[test]
fn arbitrary_ids_methods_and_bodies_never_5xx_and_never_touch_a_file() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut capsule = TestProcess::sleeping();
    let laid = Laid::out(&capsule);
    let before = laid.snapshot();

    // The registry serves the running directory laid out above, beside its decoys.
    let server = runtime.block_on(TestServer::builder().running_dir(&laid.running).start());
    let sent = send_arbitrary(&runtime, &server);
    let after = laid.snapshot();
    // The running directory and the sibling are byte for byte the same; the decoy one level
    // up is still there (the token file lives in the server's own home, not beside them).
    assert_eq!(before[1], after[1], "the running directory changed");
    assert_eq!(before[2], after[2], "a sibling directory changed");
    assert!(after[0].contains_key("decoy.json"));
    drop(server);
    assert!(capsule.is_running(), "the capsule was signalled");
    eprintln!("properties: {sent} requests with arbitrary ids, methods and bodies");
}
