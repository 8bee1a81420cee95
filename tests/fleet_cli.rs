//! `ps --fleet` through the real binary: every host's sessions read straight from etcd, with a
//! HOST column, `--capsule` and `--skill` as the API filters, no server asked, nothing pruned. And `serve`'s fleet files: one that cannot
//! be used refuses the start, naming it, before etcd is asked anything. A hostile capsule name
//! or key in etcd is shown escaped, in its one row or line, by `ps --fleet` and `serve`'s log.
//!
//! The etcd test needs `/usr/bin/etcd` (Debian's `etcd-server`) and the `fleet` feature; it is
//! ignored by plain `cargo test`.

mod common;

use common::binary::*;

/// Without an endpoint `ps --fleet` says what it needs: the flag (or, in a build without the
/// fleet, the feature), and writes nothing.
#[test]
fn ps_fleet_without_etcd_says_what_it_needs() {
    let home = Home::new();
    let done = run({
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["ps", "--fleet"]);
        cmd
    });
    done.assert_failure();
    let needed = if cfg!(feature = "fleet") {
        "--fleet-etcd"
    } else {
        "--features fleet"
    };
    assert!(done.stderr.contains(needed), "{}", done.stderr);
    assert_eq!(done.stdout, "");
    assert!(
        !home.path().join(".murmur").exists(),
        "ps --fleet touched HOME"
    );
}

/// A credentials file others can read, or a CA file that is not there, refuses the start at
/// once (no etcd listens at the endpoint: nothing was asked of it), naming the file.
#[cfg(feature = "fleet")]
#[test]
fn serve_refuses_fleet_files_it_cannot_use() {
    use std::os::unix::fs::PermissionsExt;

    let home = Home::new();
    let credentials = home.path().join("etcd-credentials");
    std::fs::write(&credentials, "registry:hunter2\n").expect("write the credentials");
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let missing_ca = home.path().join("no-such-ca.pem");
    let serve = |flag: &str, file: &std::path::Path| {
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["serve", "--bind", "127.0.0.1:0"])
            .args(["--fleet-etcd", "http://127.0.0.1:9", "--host-id", "h1"])
            .arg(flag)
            .arg(file);
        run(cmd)
    };

    let done = serve("--fleet-credentials-file", &credentials);
    done.assert_failure();
    let named = credentials.display().to_string();
    assert!(
        done.stderr.contains(&named) && done.stderr.contains("chmod 600"),
        "{}",
        done.stderr
    );
    assert!(!done.stderr.contains("hunter2"), "{}", done.stderr);

    let done = serve("--fleet-ca-file", &missing_ca);
    done.assert_failure();
    let named = missing_ca.display().to_string();
    assert!(done.stderr.contains(&named), "{}", done.stderr);
}

/// An `--advertise-url` readers could not use as written refuses the start at once, saying
/// why: not http(s), no host, a space or control character, or longer than a URL is kept.
#[cfg(feature = "fleet")]
#[test]
fn serve_refuses_an_advertise_url_readers_could_not_use() {
    let home = Home::new();
    let long = format!("http://h/{}", "a".repeat(3000));
    let cases = [
        ("ftp://h/", "http:// or https://"),
        ("http://", "not a URL"),
        ("http://h/a b", "space or control"),
        ("http://h/\u{1b}[2J", "space or control"),
        (long.as_str(), "over the 2048"),
    ];
    for (url, why) in cases {
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["serve", "--bind", "127.0.0.1:0"])
            .args(["--fleet-etcd", "http://127.0.0.1:9", "--host-id", "h1"])
            .args(["--advertise-url", url]);
        let done = run(cmd);
        done.assert_failure();
        assert!(done.stderr.contains(why), "{url:?}: {}", done.stderr);
        assert!(!done.stderr.contains('\u{1b}'), "{}", done.stderr);
        assert!(
            done.stderr.len() < 1024,
            "echoed whole: {}",
            done.stderr.len()
        );
    }
}

#[cfg(feature = "fleet")]
mod with_etcd {
    use super::*;
    use common::etcd::Etcd;
    use common::{DEADLINE, TestProcess, wait_until};

    fn ps_fleet(home: &Home, etcd: &Etcd, json: bool) -> Finished {
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["ps", "--fleet", "--fleet-etcd", &etcd.endpoint()]);
        if json {
            cmd.arg("--json");
        }
        run(cmd)
    }

    #[tokio::test]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn ps_fleet_lists_every_hosts_sessions_with_their_host() {
        let etcd = Etcd::start().await;
        let host = Home::new();
        let capsule = TestProcess::sleeping();
        let secret = "door-secret-5c1e9a7f3b2d";
        let record = capsule
            .record()
            .no_door()
            .door_token(secret)
            .set("capsule_name", "scout")
            .set("capsule_version", "2.0.1");
        host.write(&record);
        let mut serve = registry(host.path(), User::Me);
        serve.args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--fleet-etcd",
            &etcd.endpoint(),
        ]);
        serve.args([
            "--host-id",
            "host-a",
            "--fleet-ttl",
            "3s",
            "--events-interval",
            "500ms",
        ]);
        let served = common::ServedBinary::spawn(serve);

        // Another machine: its own HOME, never the registry's.
        let reader = Home::new();
        let session_id = record.session_id();
        wait_until("ps --fleet shows host-a's session", DEADLINE, || {
            let done = ps_fleet(&reader, &etcd, true);
            done.assert_success();
            done.json().as_array().is_some_and(|sessions| {
                sessions
                    .iter()
                    .any(|s| s["session_id"] == session_id.as_str())
            })
        });
        let json = ps_fleet(&reader, &etcd, true);
        let sessions = json.json();
        let entry = &sessions[0];
        assert_eq!(entry["host_id"], "host-a");
        assert_eq!(entry["capsule_name"], "scout");
        assert_eq!(entry["liveness"]["state"], "live");
        assert!(!json.stdout.contains(secret), "a door token left the host");

        let table = ps_fleet(&reader, &etcd, false);
        table.assert_success();
        let lines: Vec<&str> = table.stdout.lines().collect();
        assert!(lines[0].starts_with("HOST "), "{}", table.stdout);
        assert!(lines[0].contains("SESSION") && lines[0].contains("STATUS"));
        assert!(lines[1].starts_with("host-a "), "{}", table.stdout);
        assert!(lines[1].contains(&session_id) && lines[1].contains("scout@2.0.1"));
        assert!(lines[1].contains("running"));
        // The API's filters, as flags: a capsule or skill the session lacks leaves nothing.
        let filtered = |flags: &[&str]| {
            let mut cmd = registry(reader.path(), User::Me);
            cmd.args(["ps", "--fleet", "--json", "--fleet-etcd", &etcd.endpoint()])
                .args(flags);
            let done = run(cmd);
            done.assert_success();
            done.json().as_array().map_or(0, Vec::len)
        };
        assert_eq!(filtered(&["--capsule", "other,scout"]), 1);
        assert_eq!(filtered(&["--capsule", "other"]), 0);
        assert_eq!(filtered(&["--skill", "no-such-skill"]), 0);
        assert!(
            !reader.path().join(".murmur").exists(),
            "ps --fleet touched HOME"
        );

        drop(served);
        drop(capsule);
    }

    /// A value or key from etcd that would steer a terminal or forge a log line: `ps --fleet`
    /// shows the session in one escaped row and the unusable key in one escaped `skipped:`
    /// line, `--json` as JSON, and `serve`'s text log names the key on one line, escaped.
    #[tokio::test]
    #[ignore = "needs etcd (Debian etcd-server), run with --features fleet"]
    async fn hostile_fleet_values_and_keys_are_shown_escaped() {
        let etcd = Etcd::start().await;
        let forged = "2026-01-01T00:00:00.000000Z  WARN murmur_registry: forged";
        let junk_key = format!("/murmur/registry/v1/junk\n{forged}\x1b[2J");
        let mut client = etcd.client().await;
        client
            .put(junk_key.as_str(), "x", None)
            .await
            .expect("put the junk key");

        let host = Home::new();
        let capsule = TestProcess::sleeping();
        let hostile_name = "evil\x1b]0;pwned\x07\x1b[2J\r\nhost-z  ses_fake  x@1  running";
        let record = capsule
            .record()
            .no_door()
            .set("capsule_name", hostile_name)
            .set("capsule_version", "1.0");
        host.write(&record);
        let mut serve = registry(host.path(), User::Me);
        serve.args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--fleet-etcd",
            &etcd.endpoint(),
        ]);
        serve.args(["--host-id", "host-a", "--events-interval", "500ms"]);
        let served = common::ServedBinary::spawn(serve);

        let reader = Home::new();
        wait_until("ps --fleet shows host-a's session", DEADLINE, || {
            let done = ps_fleet(&reader, &etcd, true);
            done.assert_success();
            done.json()
                .as_array()
                .is_some_and(|sessions| !sessions.is_empty())
        });
        let json = ps_fleet(&reader, &etcd, true);
        assert_eq!(json.json()[0]["capsule_name"], hostile_name);
        assert!(
            json.stdout
                .contains(r#""evil\u001b]0;pwned\u0007\u001b[2J\r\nhost-z"#),
            "{}",
            json.stdout
        );

        let table = ps_fleet(&reader, &etcd, false);
        table.assert_success();
        let shown_key = format!("/murmur/registry/v1/junk\\n{forged}\\u{{1b}}[2J");
        for text in [&table.stdout, &table.stderr] {
            assert!(
                !text.chars().any(|c| c != '\n' && c.is_control()),
                "{text:?}"
            );
        }
        let rows: Vec<&str> = table.stdout.lines().collect();
        assert_eq!(rows.len(), 2, "{}", table.stdout);
        assert!(
            rows[1].starts_with("host-a ")
                && rows[1].contains(r"evil\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nhost-z  ses_fake"),
            "{}",
            table.stdout
        );
        let skipped: Vec<&str> = table.stderr.lines().collect();
        assert_eq!(skipped.len(), 1, "{}", table.stderr);
        assert!(
            skipped[0].starts_with(&format!("skipped: {shown_key} — ")),
            "{}",
            table.stderr
        );

        let (status, log) = served.stop_with(rustix::process::Signal::TERM);
        assert!(status.success(), "{status}: {log}");
        assert!(!log.contains('\x1b'), "{log:?}");
        assert!(
            log.lines().all(|line| !line.starts_with(forged)),
            "a forged line:\n{log}"
        );
        assert!(
            log.lines().any(|line| line.contains(&shown_key)),
            "the skipped key is not logged:\n{log}"
        );
        drop(capsule);
    }
}
