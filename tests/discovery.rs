//! The discovery file (`server.json`) and the commands that read it (`status`, `dashboard`),
//! against the real `murmur-registry` binary in a private `HOME`, on port 0.
//!
//! Covered here:
//! - `serve` writes the file 0600 in the token's 0700 directory once its listener is bound (it
//!   names the bound port, its own pid and start token), and removes it on SIGTERM; SIGKILL
//!   leaves it, `status` then says it is stale (exit 3), and the next `serve` replaces it;
//! - a file naming a pid another process holds (a wrong start token), or a live process whose
//!   `/healthz` does not answer, is stale;
//! - a second `serve` for the same directory is refused while the first runs, naming its URL;
//!   several started at the same instant: exactly one runs;
//! - a file that is a symlink (even to a running registry's own file), a FIFO, another user's
//!   (root only), too large or not JSON is refused (exit 1) with a clear error, never followed;
//! - a `--token-file` registry is found through its own directory, and only there; a lock file
//!   that is a symlink is never followed; a directory that cannot hold the file is an error;
//! - `status` of a running registry counts its sessions by state, by layers 1–2 or `--probe`;
//!   of a stopped one (no file) exits 3;
//! - `dashboard` prints the login link; with a display it hands the browser a 0600 redirect
//!   page (a `file://` path, the token on no command line).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::binary::{Finished, Home, NOBODY, User, chown_nobody, registry, run};
use common::{
    CapsuleProcess, DEADLINE, ExitedChild, ServedBinary, TestProcess, make_fifo, mode_of,
    wait_until, within, write_raw,
};
use murmur_registry::running::process_start_token;
use rustix::process::Signal;
use serde_json::{Value, json};

/// `status` in `home`, with `args`.
fn status(home: &Home, args: &[&str]) -> Finished {
    let mut cmd = registry(home.path(), User::Me);
    cmd.arg("status").args(args);
    run(cmd)
}

/// `serve --bind 127.0.0.1:0` in `home` with `args`.
fn serve_cmd(home: &Home, args: &[&str]) -> Command {
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", "127.0.0.1:0"]).args(args);
    cmd
}

fn discovery_file(home: &Home) -> PathBuf {
    home.registry_dir().join("server.json")
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn exit_code(done: &Finished) -> Option<i32> {
    done.status.code()
}

/// A discovery file as `serve` writes one, naming `pid` with `start` at `url`.
fn planted(home: &Home, pid: u32, start: &str, url: &str) -> PathBuf {
    let dir = home.make_registry_dir();
    let body = json!({
        "url": url, "pid": pid, "process_start": start, "version": "0.1.0",
        "started_at": "2026-01-01T00:00:00Z", "running_dir": "/nowhere",
        "token_file": home.token_path(), "fleet": null,
    });
    write_raw(&dir, "server.json", body.to_string())
}

#[test]
fn serve_writes_the_file_after_binding_and_removes_it_on_sigterm() {
    let home = Home::new();
    let server = ServedBinary::start(home.path(), User::Me);
    let path = discovery_file(&home);
    assert_eq!(mode_of(&path), 0o600, "the file is private");
    assert_eq!(mode_of(&home.registry_dir()), 0o700);
    let info = read_json(&path);
    // Written after the bind: it names the port the kernel gave, not the 0 asked for.
    assert_eq!(info["url"], format!("http://{}", server.addr), "{info}");
    assert_eq!(info["pid"], server.pid(), "{info}");
    assert_eq!(
        info["process_start"].as_str(),
        process_start_token(server.pid()).as_deref(),
        "{info}"
    );
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(info["running_dir"], json!(home.running_dir()));
    assert_eq!(info["token_file"], json!(home.token_path()));
    assert_eq!(info["fleet"], Value::Null);
    assert!(
        info["started_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{info}"
    );

    let (exit, stderr) = server.stop_with(Signal::TERM);
    assert!(exit.success(), "{stderr}");
    common::assert_absent(&path);
    let after = status(&home, &[]);
    assert_eq!(exit_code(&after), Some(3), "{after:#?}");
    assert!(after.stdout.contains("no registry runs"), "{after:#?}");
}

#[test]
fn sigkill_leaves_a_stale_file_that_status_names_and_the_next_serve_replaces() {
    let home = Home::new();
    let mut server = ServedBinary::start(home.path(), User::Me);
    let old_pid = server.pid();
    server.kill();
    let path = discovery_file(&home);
    assert_eq!(read_json(&path)["pid"], old_pid, "SIGKILL leaves the file");

    let stale = status(&home, &[]);
    assert_eq!(exit_code(&stale), Some(3), "{stale:#?}");
    assert!(stale.stdout.contains("stale"), "{stale:#?}");
    assert!(
        stale
            .stdout
            .contains(&format!("no process holds pid {old_pid}")),
        "{stale:#?}"
    );

    let next = ServedBinary::start(home.path(), User::Me);
    assert_eq!(
        read_json(&path)["pid"],
        next.pid(),
        "the next serve replaces it"
    );
    status(&home, &[]).assert_success();
}

#[test]
fn a_file_naming_a_reused_pid_or_a_silent_process_is_stale() {
    let home = Home::new();
    let other = TestProcess::sleeping();
    // Whatever listens at a stale file's URL is not even asked.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    // The pid is held, by a process that started at another time than the file says.
    let wrong = common::wrong_start_token(other.pid());
    planted(&home, other.pid(), &wrong, &url);
    let reused = status(&home, &[]);
    assert_eq!(exit_code(&reused), Some(3), "{reused:#?}");
    assert!(reused.stdout.contains("stale"), "{reused:#?}");
    assert!(
        reused.stdout.contains("started at another time"),
        "{reused:#?}"
    );
    assert!(
        listener
            .accept()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "nothing connected to a reused pid's URL"
    );
    // The right process, but nothing answers at its URL: not a registry that runs.
    let url = format!("http://{}", common::refused_url());
    planted(&home, other.pid(), &other.start_token(), &url);
    let silent = status(&home, &[]);
    assert_eq!(exit_code(&silent), Some(3), "{silent:#?}");
    assert!(
        silent.stdout.contains("/healthz does not answer"),
        "{silent:#?}"
    );
}

#[test]
fn a_second_serve_is_refused_naming_the_first() {
    let home = Home::new();
    let first = ServedBinary::start(home.path(), User::Me);
    let before = std::fs::read(discovery_file(&home)).expect("the first one's file");
    let second = run(serve_cmd(&home, &[]));
    second.assert_failure();
    assert!(
        second.stderr.contains(&format!("http://{}", first.addr)),
        "the refusal names the running one's URL: {second:#?}"
    );
    assert_eq!(
        std::fs::read(discovery_file(&home)).expect("still there"),
        before,
        "the first one's file is untouched"
    );
}

#[test]
fn serves_started_at_the_same_instant_never_both_run() {
    let home = Home::new();
    // Create the token and its directory once, so every start races only for the lock.
    let mut token = registry(home.path(), User::Me);
    token.arg("token");
    run(token).assert_success();
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let cmd = serve_cmd(&home, &[]);
            std::thread::spawn(move || ServedBinary::launch(cmd).try_start())
        })
        .collect();
    let results: Vec<_> = starts
        .into_iter()
        .map(|t| t.join().expect("join"))
        .collect();
    let running: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let refusals: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(running.len(), 1, "exactly one runs; refused: {refusals:#?}");
    for refused in refusals {
        assert!(
            refused.contains("another `murmur-registry serve` runs"),
            "{refused}"
        );
    }
    assert_eq!(read_json(&discovery_file(&home))["pid"], running[0].pid());
}

/// `status` and `dashboard` refuse `home`'s discovery file (exit 1, one error line with
/// `why`), and nothing is asked at what it names.
fn refused_by_readers(home: &Home, why: &str) {
    for args in [&["status"][..], &["dashboard", "--no-open"]] {
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(args);
        let done = within("a reader of an untrusted file", DEADLINE, move || run(cmd));
        done.assert_failure();
        assert!(
            done.stderr.contains("server.json"),
            "names the file: {done:#?}"
        );
        assert!(done.stderr.contains(why), "says {why:?}: {done:#?}");
    }
}

#[test]
fn a_symlink_is_refused_even_to_a_running_registrys_own_file() {
    let running = Home::new();
    let _server = ServedBinary::start(running.path(), User::Me);
    let home = Home::new();
    std::os::unix::fs::symlink(
        discovery_file(&running),
        home.make_registry_dir().join("server.json"),
    )
    .expect("symlink");
    refused_by_readers(&home, "symlink");
}

#[test]
fn a_fifo_too_large_or_not_json_file_is_refused() {
    let home = Home::new();
    let path = home.make_registry_dir().join("server.json");
    make_fifo(&path);
    refused_by_readers(&home, "not a regular file");
    std::fs::remove_file(&path).expect("rm fifo");
    write_raw(&home.registry_dir(), "server.json", vec![b' '; 100_000]);
    refused_by_readers(&home, "too large");
    write_raw(
        &home.registry_dir(),
        "server.json",
        "listening on http://127.0.0.1:7420\n",
    );
    refused_by_readers(&home, "not a discovery file's JSON");
    // Of the shape, but naming a host to resolve: never asked, never sent the token.
    planted(
        &home,
        std::process::id(),
        &common::own_start_token(),
        "http://example.com:80",
    );
    refused_by_readers(&home, "is not http://IP:PORT");
}

#[test]
#[ignore = "needs root: chown to uid 65534"]
fn another_users_file_is_refused() {
    let home = Home::new();
    let path = planted(
        &home,
        std::process::id(),
        &common::own_start_token(),
        "http://127.0.0.1:1",
    );
    chown_nobody(&path);
    refused_by_readers(&home, &format!("owned by uid {NOBODY}"));
}

#[test]
fn a_token_file_registry_is_found_through_its_own_directory() {
    let home = Home::new();
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let token_file = elsewhere.path().join("keys").join("token");
    let token_arg = token_file.to_str().expect("utf-8 path").to_owned();
    let server = ServedBinary::spawn(serve_cmd(&home, &["--token-file", &token_arg]));
    assert!(token_file.with_file_name("server.json").exists());
    let found = status(&home, &["--token-file", &token_arg]);
    found.assert_success();
    assert!(
        found
            .stdout
            .contains(&format!("url:      http://{}", server.addr)),
        "{found:#?}"
    );
    let default = status(&home, &[]);
    assert_eq!(
        exit_code(&default),
        Some(3),
        "not in the default directory: {default:#?}"
    );
}

#[test]
fn status_counts_sessions_by_layers_one_and_two_or_by_a_full_probe() {
    let home = Home::new();
    let capsule = CapsuleProcess::single();
    home.write(&capsule.record());
    home.write(&ExitedChild::spawn().record());
    let script = TestProcess::sleeping();
    home.write(&script.record().no_door());
    let server = ServedBinary::start(home.path(), User::Me);

    let quick = status(&home, &[]);
    quick.assert_success();
    let lines = quick.stdout_lines();
    assert_eq!(
        lines[0],
        format!("url:      http://{}", server.addr),
        "{quick:#?}"
    );
    assert_eq!(lines[1], format!("version:  {}", env!("CARGO_PKG_VERSION")));
    assert_eq!(lines[2], format!("pid:      {}", server.pid()));
    assert!(lines[3].starts_with("uptime:   "), "{quick:#?}");
    // The capsule's door is not asked: only the door-less script is live by layers 1–2.
    assert!(
        quick
            .stdout
            .contains("sessions: 3 (1 live, 1 gone, 1 door not asked)"),
        "{quick:#?}"
    );
    let full = status(&home, &["--probe"]);
    full.assert_success();
    assert!(
        full.stdout.contains("sessions: 3 (2 live, 1 gone)"),
        "{full:#?}"
    );
}

#[test]
fn dashboard_prints_the_login_link_and_opens_it_through_a_private_redirect_page() {
    let home = Home::new();
    let server = ServedBinary::start(home.path(), User::Me);
    let link = format!("http://{}/#token={}", server.addr, home.token());

    let mut printed = registry(home.path(), User::Me);
    printed
        .args(["dashboard", "--no-open"])
        .env("DISPLAY", ":0");
    let printed = run(printed);
    printed.assert_success();
    assert_eq!(printed.stdout, format!("{link}\n"));
    common::assert_absent(&home.registry_dir().join("dashboard.html"));

    // A stand-in for the desktop's opener, recording what it was given.
    let bin = tempfile::tempdir().expect("tempdir");
    let seen = bin.path().join("argv");
    write_raw(
        bin.path(),
        "xdg-open",
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}.tmp && mv {0}.tmp {0}\n",
            seen.display()
        ),
    );
    std::fs::set_permissions(
        bin.path().join("xdg-open"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut opened = registry(home.path(), User::Me);
    opened
        .arg("dashboard")
        .env("PATH", path)
        .env_remove("DISPLAY")
        .env("WAYLAND_DISPLAY", "wayland-0");
    run(opened).assert_success();
    wait_until("the opener ran", DEADLINE, || seen.exists());
    let argv = std::fs::read_to_string(&seen).expect("argv");
    let page = home.registry_dir().join("dashboard.html");
    assert_eq!(
        argv.trim(),
        page.display().to_string(),
        "the browser gets the page's path"
    );
    assert!(
        !argv.contains(&home.token()),
        "the token is on no command line"
    );
    assert_eq!(mode_of(&page), 0o600);
    let html = std::fs::read_to_string(&page).expect("the redirect page");
    assert!(
        html.contains(&format!("content=\"0;url={link}\"")),
        "{html}"
    );
}

#[test]
fn a_symlinked_lock_is_never_followed() {
    let home = Home::new();
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let target = elsewhere.path().join("not-a-lock");
    std::os::unix::fs::symlink(&target, home.make_registry_dir().join("server.lock"))
        .expect("symlink");
    let refused = run(serve_cmd(&home, &[]));
    refused.assert_failure();
    assert!(refused.stderr.contains("discovery file in"), "{refused:#?}");
    common::assert_absent(&target);
    common::assert_absent(&discovery_file(&home));
}

#[test]
fn a_directory_that_cannot_hold_the_file_is_an_error_not_a_registry_that_stopped() {
    let home = Home::new();
    let not_a_dir = write_raw(home.path(), "plain-file", "x");
    let token_file = not_a_dir.join("token");
    let done = status(
        &home,
        &["--token-file", token_file.to_str().expect("utf-8")],
    );
    done.assert_failure();
    assert!(done.stderr.contains("cannot be read"), "{done:#?}");
}

#[test]
fn a_padded_file_well_under_the_cap_is_read() {
    let home = Home::new();
    let gone = ExitedChild::spawn();
    let path = planted(&home, gone.pid, &gone.start_token, "http://127.0.0.1:1");
    let mut padded = std::fs::read(&path).expect("read");
    padded.resize(8 * 1024, b' ');
    write_raw(&home.registry_dir(), "server.json", padded);
    let done = status(&home, &[]);
    assert_eq!(exit_code(&done), Some(3), "read, and stale: {done:#?}");
}
