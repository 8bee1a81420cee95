//! The dashboard in a real browser: headless Chromium, driven through chromedriver with the
//! W3C WebDriver protocol (JSON over HTTP, spoken here with `reqwest`), against the real
//! `murmur-registry serve` binary and real capsule processes.
//!
//! One test walks what a person does, in named steps (one `async fn` each, run in order on a
//! shared [`Scene`]; a failure reads `dashboard step `<name>` failed: …`), and checks what they
//! would see:
//! - (first, the page's stream parser fed chunks cut at awkward places);
//! - the page asks for the token; a wrong one is refused with a clear message and not kept;
//! - the right one (typed, then Enter) shows the sessions live from `/events`: a real capsule
//!   whose door answers (`live`), a script capsule without a door (`live`), a process whose
//!   door does not answer (`unreachable`), each with its state in words, the capsule, the door
//!   and a ticking uptime; the token is in `sessionStorage` and nowhere else, and survives a
//!   reload;
//! - without `--fleet-etcd`, the "this host / fleet" switch offers no fleet and says why in the
//!   registry's words; `#fleet` asked for anyway falls back to this host, saying so;
//! - the state filter; a narrow (360 px) window without sideways scrolling;
//! - a capsule name that is markup shows as text;
//! - Kill, then Escape: nothing happens; Stop, confirmed with the keyboard: the capsule process
//!   really ends, the outcome is shown and the row goes; Stop of a capsule whose door serves
//!   `murmur.StopSession`: the outcome says what it canceled and left running; Kill, confirmed
//!   with the mouse: the
//!   process dies of SIGKILL and its row goes when the registry finds it gone;
//! - a snapshot arriving mid-stream replaces the whole table;
//! - the running directory moved away: the page says the registry is unavailable, in the
//!   registry's words (its 503 problem's detail), keeps the table greyed out and retries; the
//!   directory back: the page is live again by itself;
//! - the registry killed: the page says it is unreachable and reconnecting; the registry back
//!   on the same port: the page reconnects by itself.
//!
//!
//! Another test follows a login link as `murmur-registry dashboard` opens it (the `file://`
//! redirect page it hands the browser): with four capsules, one whose door hangs, the rows are
//! on screen within half a second of the page asking (measured by the page's own performance
//! marks), the hanging door's row marked as still asked, its verdict filled in later; the token
//! leaves the address bar at once, stays in `sessionStorage`, and is in no request's URL; a
//! link with `#fleet&token=…` still routes to the fleet view; a wrong token in a link brings
//! the paste form with the 401's reason.
//!
//! A third test (feature `fleet`) walks the fleet view against a real etcd (`/usr/bin/etcd`)
//! and two registries, hosts a (the page's) and b:
//! - the switch shows the fleet, live from `/fleet/events`, with a host column; own rows keep
//!   Stop and Kill, b's rows have none (and no button at all);
//! - a capsule started on b appears live, its loopback door marked as reachable only from b;
//!   a capsule name from b that is markup shows as text; the capsule killed on b disappears;
//! - Kill on an own row from the fleet view ends the process (SIGKILL) and its row goes;
//! - etcd frozen (SIGSTOP): the page says the fleet is unavailable in the registry's words and
//!   greys the last fleet out as possibly not current; etcd thawed: the fleet is live again;
//! - switching back to this host drops the host column and b's rows.
//!
//! Screenshots go to `target/browser/` (`dashboard.png`, `dashboard-narrow.png`,
//! `dashboard-fleet.png`, `dashboard-fleet-narrow.png`, `dashboard-fleet-unavailable.png` and
//! others; `failure.png` when a wait gives up). Needs `/usr/bin/chromium` and
//! `/usr/bin/chromedriver` (Debian's `chromium` and `chromium-driver`; `.ci/run` installs them),
//! and for the fleet test `/usr/bin/etcd` (Debian's `etcd-server`), so plain `cargo test` skips
//! them (`#[ignore]`); `cargo test -- --include-ignored` runs them (`--features fleet` for the
//! fleet test).
//!
//! Synchronisation is by polling the DOM (or the process) under a deadline, never by sleeping.
//! chromedriver runs in its own process group; on drop (also when the test fails) the group
//! and every process still using this test's browser profile are killed.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use common::binary::{Home, User, registry};
use common::served::ServeLaunch;
use common::steps::run_step;
use common::{
    CapsuleProcess, DoorMode, DoorServer, RecordJson, ServedBinary, StopAnswer, StoppableDoor,
    TestProcess,
};
use rustix::process::{Pid, Signal};
use serde_json::{Value, json};
use tempfile::TempDir;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
const INSTALL_HINT: &str = "install them with `apt-get install -y chromium chromium-driver` \
    (Debian packages; .ci/run does this)";

/// The upper bound for anything the browser is waited on for. Generous: Chromium on a loaded
/// two-core machine can take seconds to start or to lay out a page. Never how long a passing
/// test takes.
const BROWSER_DEADLINE: Duration = Duration::from_secs(45);

// ---------------------------------------------------------------------------------------------
// The registry binary
// ---------------------------------------------------------------------------------------------

/// `murmur-registry serve` on `home`, bound to `bind` (`127.0.0.1:0` for a fresh port), given
/// as long as the browser to start.
fn serve(home: &Home, bind: &str) -> ServeLaunch {
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["serve", "--bind", bind]);
    ServedBinary::launch(cmd).startup_deadline(BROWSER_DEADLINE)
}

// ---------------------------------------------------------------------------------------------
// The browser, through WebDriver
// ---------------------------------------------------------------------------------------------

/// The key that names a web element in WebDriver answers.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// WebDriver's codes for special keys.
const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";
const ESCAPE: &str = "\u{E00C}";

/// chromedriver with one headless Chromium session on a fresh profile. On drop the driver's
/// process group, and any process still using the profile, are killed.
struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:<driver port>/session/<id>`
    session: String,
    driver: Child,
    profile: TempDir,
}

impl Browser {
    async fn launch() -> Self {
        for path in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                Path::new(path).exists(),
                "{path} is missing: the dashboard's browser test needs Chromium and chromedriver; {INSTALL_HINT}"
            );
        }
        let profile = tempfile::Builder::new()
            .prefix("murmur-registry-chromium-")
            .tempdir()
            .expect("a browser profile directory");
        let (driver, port) = start_driver(&profile.path().join("chromedriver.log"));
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(BROWSER_DEADLINE)
            .build()
            .expect("an HTTP client");
        let mut browser = Self {
            http,
            session: String::new(),
            driver,
            profile,
        };
        let capabilities = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "pageLoadStrategy": "normal",
                "goog:chromeOptions": {
                    "binary": CHROMIUM,
                    "args": [
                        "--headless",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-quic",
                        "--no-first-run",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--disable-sync",
                        "--disable-dev-shm-usage",
                        "--window-size=1280,800",
                        "--force-device-scale-factor=1",
                        format!("--user-data-dir={}", browser.profile.path().join("profile").display()),
                    ],
                },
            }},
        });
        let base = format!("http://127.0.0.1:{port}");
        let created = browser
            .call(
                reqwest::Method::POST,
                &format!("{base}/session"),
                Some(capabilities),
            )
            .await;
        let id = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {created}"));
        browser.session = format!("{base}/session/{id}");
        browser
    }

    /// One WebDriver command; answers its `value`, panicking with the driver's error.
    async fn call(&self, method: reqwest::Method, url: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method.clone(), url);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("WebDriver {method} {url}: {e}"));
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let answer: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("WebDriver {method} {url}: not JSON ({e}): {text}"));
        assert!(
            status.is_success(),
            "WebDriver {method} {url} failed ({status}): {}",
            answer["value"]
        );
        answer["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.session);
        self.call(reqwest::Method::POST, &url, Some(body)).await
    }

    async fn get(&self, path: &str) -> Value {
        let url = format!("{}{path}", self.session);
        self.call(reqwest::Method::GET, &url, None).await
    }

    async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    /// The element `css` selects (it must exist now).
    async fn find(&self, css: &str) -> String {
        let found = self
            .post("/element", json!({ "using": "css selector", "value": css }))
            .await;
        found[ELEMENT_KEY]
            .as_str()
            .unwrap_or_else(|| panic!("no element for {css}: {found}"))
            .to_owned()
    }

    /// Click `css` as a person would (WebDriver checks it is visible and not covered).
    async fn click(&self, css: &str) {
        let element = self.find(css).await;
        self.post(&format!("/element/{element}/click"), json!({}))
            .await;
    }

    /// Type `text` into `css` (which takes the focus first).
    async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.post(
            &format!("/element/{element}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    /// Press and release `key` wherever the focus is.
    async fn press(&self, key: &str) {
        let actions = json!({ "actions": [{
            "type": "key", "id": "keyboard",
            "actions": [{ "type": "keyDown", "value": key }, { "type": "keyUp", "value": key }],
        }]});
        self.post("/actions", actions).await;
    }

    /// Run `script` (a function body; `arguments` are `args`) in the page; answers its result.
    async fn js(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": args }))
            .await
    }

    /// Run `script` asynchronously: it calls its last argument with the result.
    async fn js_async(&self, script: &str, args: Value) -> Value {
        self.post("/execute/async", json!({ "script": script, "args": args }))
            .await
    }

    /// Poll `script` until it returns something other than `null`/`false`; answers it. On the
    /// deadline, saves `failure.png` and fails with what the page shows.
    async fn wait_for(&self, what: &str, script: &str, args: Value) -> Value {
        let start = Instant::now();
        loop {
            let value = self.js(script, args.clone()).await;
            if !value.is_null() && value != Value::Bool(false) {
                return value;
            }
            if start.elapsed() > BROWSER_DEADLINE {
                let shot = self.screenshot("failure.png").await;
                let text = self.js("return document.body.innerText", json!([])).await;
                panic!(
                    "gave up after {BROWSER_DEADLINE:?} waiting until {what}; screenshot {}; \
                     the page shows:\n{}",
                    shot.display(),
                    text.as_str().unwrap_or_default()
                );
            }
            // Paces the polling only; the condition above is what the test waits on.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Save a screenshot of the viewport as `target/browser/<name>`; answers the path.
    async fn screenshot(&self, name: &str) -> PathBuf {
        let encoded = self.get("/screenshot").await;
        let png = base64_decode(encoded.as_str().expect("a base64 screenshot"));
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is a PNG");
        let dir = artifact_dir();
        std::fs::create_dir_all(&dir).expect("create target/browser");
        let path = dir.join(name);
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    async fn resize(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({ "width": width, "height": height }))
            .await;
    }

    /// End the WebDriver session (Chromium exits); the driver is killed on drop.
    async fn quit(mut self) {
        let url = std::mem::take(&mut self.session);
        self.call(reqwest::Method::DELETE, &url, None).await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.driver);
        // Chromium's helpers are in the driver's group; anything that left it still names the
        // profile on its command line.
        let profile = self.profile.path().to_string_lossy().into_owned();
        let leftovers = || processes_mentioning(&profile);
        for pid in leftovers() {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        let start = Instant::now();
        while !leftovers().is_empty() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How often chromedriver is started before a start that names no port fails the test.
const DRIVER_TRIES: usize = 10;

/// chromedriver in a process group of its own, and the port it listens on.
///
/// Its port is picked here, below the kernel's ephemeral range: with `--port=0` it picks one
/// in that range, which it needs free on both loopbacks, and exits ("IPv4 port not available")
/// when it is not, as on a machine whose other tests hold thousands of listeners there. A
/// start that exits anyway (the port taken meanwhile) is started again on another port.
fn start_driver(log: &Path) -> (Child, u16) {
    for attempt in 0..DRIVER_TRIES {
        let port = free_driver_port(attempt);
        let mut driver = std::os::unix::process::CommandExt::process_group(
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .arg(format!("--log-path={}", log.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
            0,
        )
        .spawn()
        .unwrap_or_else(|e| panic!("start {CHROMEDRIVER}: {e}; {INSTALL_HINT}"));
        // chromedriver says on stdout when it listens.
        let stdout = driver.stdout.take().expect("chromedriver stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line
                    .split("started successfully on port ")
                    .nth(1)
                    .and_then(|rest| rest.trim_end_matches('.').parse::<u16>().ok())
                {
                    let _ = tx.send(port);
                }
            }
        });
        match rx.recv_timeout(BROWSER_DEADLINE) {
            Ok(port) => return (driver, port),
            // Its stdout closed without a port: it exited, most likely on a port in use.
            Err(mpsc::RecvTimeoutError::Disconnected) => kill_group(&mut driver),
            Err(e) => {
                kill_group(&mut driver);
                panic!("chromedriver did not say its port ({e})");
            }
        }
    }
    let log = std::fs::read_to_string(log).unwrap_or_default();
    panic!("chromedriver exited without a port in {DRIVER_TRIES} starts; its log:\n{log}")
}

/// A port below the ephemeral range (where nothing gets one by binding port 0) that is free on
/// 127.0.0.1 and, where IPv6 is on, on ::1; a different one for each `attempt`.
fn free_driver_port(attempt: usize) -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low: u16 = 10_000;
    let span = u32::from(ephemeral_low.saturating_sub(low).max(1));
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos())
        ^ std::process::id().rotate_left(16);
    let free = |port: u16| {
        // Both held at once, then let go for chromedriver.
        let v4 = std::net::TcpListener::bind(("127.0.0.1", port));
        let v6 = std::net::TcpListener::bind(("::1", port));
        let v6_free = match &v6 {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::AddrNotAvailable,
        };
        v4.is_ok() && v6_free
    };
    (0..span)
        .map(|step| {
            let offset = (seed.wrapping_add(step * 7919 + attempt as u32 * 104_729)) % span;
            low + u16::try_from(offset).expect("below the ephemeral range")
        })
        .find(|&port| free(port))
        .expect("a free port below the ephemeral range")
}

/// SIGKILL `child`'s whole process group (it leads one) and reap it.
fn kill_group(child: &mut Child) {
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Every process whose command line contains `needle` (zombies have none, and are skipped).
fn processes_mentioning(needle: &str) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .filter_map(Pid::from_raw)
        .collect()
}

/// `target/browser` (under `CARGO_TARGET_DIR` when it is set).
fn artifact_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("browser")
}

/// Standard base64 (with padding), as WebDriver sends screenshots.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c:?}"),
        }
    };
    let bytes: Vec<u8> = text.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c) << (18 - 6 * i);
        }
        let [_, a, b, c] = n.to_be_bytes();
        out.extend_from_slice(&[a, b, c][..chunk.len() - 1]);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// What the page shows, read through small scripts
// ---------------------------------------------------------------------------------------------

/// The row of session `arguments[0]` as `{state, capsule, door, uptime, visible}`, or null.
const ROW: &str = "
    const tr = document.querySelector(`tr[data-session-id='${arguments[0]}']`);
    if (!tr) return null;
    return {
        state: tr.querySelector('.badge-text').textContent,
        capsule: tr.querySelector('.capsule-name').textContent,
        door: tr.querySelector('.door').textContent,
        uptime: tr.querySelector('.uptime').textContent,
        visible: !tr.hidden && tr.getClientRects().length > 0,
    };";

/// Whether the row of session `arguments[0]` is `arguments[1]` (a state word).
const ROW_IN_STATE: &str = "
    const tr = document.querySelector(`tr[data-session-id='${arguments[0]}']`);
    return !!tr && tr.querySelector('.badge-text').textContent === arguments[1];";

/// The switch and what it governs: which choice is checked, whether the fleet choice is
/// disabled, whether the host column shows, the address's hash, the table's title.
const SWITCH: &str = "
    const fleet = document.getElementById('scope-fleet');
    return {
        host: document.getElementById('scope-host').checked,
        fleet: fleet.checked,
        fleetDisabled: fleet.disabled,
        hostColumn: document.querySelector('th.col-host').getClientRects().length > 0,
        hash: location.hash,
        title: document.getElementById('sessions-title').textContent,
    };";

/// The text of the element `arguments[0]` when it is shown, else null.
const SHOWN_TEXT: &str = "
    const el = document.querySelector(arguments[0]);
    return el && !el.hidden && el.getClientRects().length > 0 ? el.textContent.trim() : null;";

/// Feeds the page's own `readEvents` a stream cut at awkward places; answers what it parsed.
const SSE_CHUNKS: &str = r#"
    const done = arguments[arguments.length - 1];
    const enc = new TextEncoder();
    const e = enc.encode('é');
    const chunks = [': keep-alive\r', '\n', 'id: 7\r\nevent: snapshot\r', '\ndata: {"a":',
        '\r\ndata: 1}\r\n\r', '\nevent:session.removed\nid: 8\ndata: caf']
        .map((t) => enc.encode(t));
    chunks.push(e.slice(0, 1), e.slice(1), enc.encode('\n\n'), enc.encode('data: z\r\r'));
    // A CR, then its LF alone in a chunk, then a blank line in the next one.
    chunks.push(...['data: y\r', '\n', '\n'].map((t) => enc.encode(t)));
    const body = new ReadableStream({ start(c) { chunks.forEach((x) => c.enqueue(x)); c.close(); } });
    const seen = [];
    readEvents(body, new AbortController(), (name, data, id) => seen.push([name, data, id]))
        .then(() => done(seen), (err) => done(String(err)));"#;

/// An RFC 3339 time `ago` before now, as murmur writes `started_at`.
fn started(ago: Duration) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() - ago).to_string()
}

// ---------------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------------

/// What the steps share: the sessions on disk and their processes, the registry, the browser.
struct Scene {
    home: Home,
    /// A real capsule whose door answers: live, until a step stops it.
    capsule: CapsuleProcess,
    live_id: String,
    /// The writer of a record whose door does not answer: unreachable. Held, never read: the
    /// process lives as long as the scene.
    _mute: TestProcess,
    mute_id: String,
    /// A script capsule without a door: live, until a step kills it.
    script: TestProcess,
    script_id: String,
    /// The process of a record whose capsule name is markup (spawned by a step).
    hostile: Option<TestProcess>,
    hostile_id: String,
    server: ServedBinary,
    token: String,
    browser: Browser,
    /// Screenshots taken so far, in order.
    shots: Vec<PathBuf>,
}

/// Run one step (`step!(name(&mut scene))`); a failure in it fails the test naming the step.
macro_rules! step {
    ($step:ident($($arg:expr),*)) => {
        run_step(concat!("dashboard step `", stringify!($step), "`"), $step($($arg),*)).await
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium + chromedriver (/usr/bin; Debian: apt-get install chromium chromium-driver)"]
async fn a_person_connects_watches_and_stops_a_capsule() {
    let began = Instant::now();
    let mut s = step!(set_up());
    step!(the_page_parses_awkward_stream_chunks(&mut s));
    step!(a_wrong_token_is_refused_and_not_kept(&mut s));
    step!(the_right_token_shows_the_sessions_live(&mut s));
    step!(a_busy_capsule_shows_its_cpu_and_every_row_its_memory(
        &mut s
    ));
    step!(without_a_fleet_the_switch_says_why(&mut s));
    step!(the_state_filter_hides_and_shows_rows(&mut s));
    step!(a_narrow_window_fits_without_sideways_scrolling(&mut s));
    step!(data_is_text_never_markup(&mut s));
    step!(kill_then_escape_sends_nothing(&mut s));
    step!(stop_confirmed_with_the_keyboard_ends_the_capsule(&mut s));
    step!(stop_says_what_the_capsule_canceled_and_left_running(&mut s));
    step!(kill_confirmed_with_the_mouse_ends_the_script_capsule(
        &mut s
    ));
    step!(a_mid_stream_snapshot_replaces_the_table(&mut s));
    step!(the_running_directory_goes_away_and_comes_back(&mut s));
    step!(the_registry_goes_away_and_comes_back_on_its_port(&mut s));
    let Scene {
        browser,
        server,
        shots,
        ..
    } = s;
    browser.quit().await;
    drop(server);
    eprintln!(
        "dashboard browser test: {:.1} s; screenshots: {}",
        began.elapsed().as_secs_f64(),
        shots
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Three sessions on disk (live with a door, unreachable, live without a door), the registry
/// serving them, and the browser on its page.
async fn set_up() -> Scene {
    let home = Home::new();

    // A real capsule whose door answers: live.
    let capsule = CapsuleProcess::single();
    let live_id = capsule.session_id();
    home.write(
        &capsule
            .record()
            .set("capsule_name", "researcher")
            .set("capsule_version", "0.3.1")
            .set("workdir", "/home/ada/work/papers")
            .set("outlives_launcher", true)
            .set(
                "started_at",
                started(Duration::from_secs(2 * 3600 + 14 * 60)),
            ),
    );
    // A process that is the writer but whose door does not answer: unreachable.
    let mute = TestProcess::sleeping();
    let mute_record = mute
        .record()
        .url("127.0.0.1:1")
        .set("capsule_name", "indexer")
        .set("capsule_version", "1.2.0")
        .set("workdir", "/home/ada/work/corpus")
        .set(
            "started_at",
            started(Duration::from_secs(26 * 3600 + 5 * 60)),
        );
    let mute_id = mute_record.session_id();
    home.write(&mute_record);
    // A script capsule: its process is alive and it has no door, so it is live without one.
    let script = TestProcess::sleeping();
    let script_record = script
        .record()
        .no_door()
        .set("capsule_name", "nightly-report")
        .set("capsule_version", "0.9.4")
        .set("workdir", "/home/ada/work/notes")
        .set("outlives_launcher", true)
        .set(
            "started_at",
            started(Duration::from_secs(5 * 3600 + 41 * 60)),
        );
    let script_id = script_record.session_id();
    home.write(&script_record);

    let server = serve(&home, "127.0.0.1:0").start();
    let token = home.token();
    let browser = Browser::launch().await;
    browser.goto(&server.url()).await;
    Scene {
        home,
        capsule,
        live_id,
        _mute: mute,
        mute_id,
        script,
        script_id,
        hostile: None,
        hostile_id: String::new(),
        server,
        token,
        browser,
        shots: Vec::new(),
    }
}

/// The page's stream parser, fed awkward chunks.
async fn the_page_parses_awkward_stream_chunks(s: &mut Scene) {
    let Scene { browser, .. } = s;
    // Line endings split across chunks (a CR now, its LF later), a comment, a field without a
    // space, data on two lines, a UTF-8 character split in two, a bare CR ending an event, and
    // a CRLF whose LF comes alone just before a blank line.
    let parsed = browser.js_async(SSE_CHUNKS, json!([])).await;
    assert_eq!(
        parsed,
        json!([
            ["snapshot", "{\"a\":\n1}", "7"],
            ["session.removed", "café", "8"],
            ["message", "z", "8"],
            ["message", "y", "8"],
        ]),
        "the page parses server-sent events as the standard says"
    );
}

/// The page asks for the token, and refuses a wrong one.
async fn a_wrong_token_is_refused_and_not_kept(s: &mut Scene) {
    let Scene { browser, shots, .. } = s;
    browser
        .wait_for("the token field is shown", SHOWN_TEXT, json!(["#login"]))
        .await;
    let field = browser
        .js(
            "const t = document.getElementById('token');
             return { type: t.type, label: t.labels[0].textContent, focused: document.activeElement === t };",
            json!([]),
        )
        .await;
    assert_eq!(field["type"], "password", "{field}");
    assert_eq!(field["label"], "Token", "{field}");
    assert_eq!(
        field["focused"], true,
        "the token field has the focus: {field}"
    );

    browser
        .type_into("#token", &format!("{}{ENTER}", "0".repeat(64)))
        .await;
    let refused = browser
        .wait_for(
            "the wrong token is refused",
            SHOWN_TEXT,
            json!(["#login-error"]),
        )
        .await;
    shots.push(browser.screenshot("dashboard-token-refused.png").await);
    assert!(
        refused.as_str().is_some_and(|t| t.contains("refused")
            && t.contains("the bearer token is not this registry's token")),
        "the form gives the 401's reason: {refused}"
    );
    let after_refusal = browser
        .js(
            "return { stored: sessionStorage.length, connection: document.getElementById('connection-text').textContent,
                      table: !document.getElementById('sessions').hidden };",
            json!([]),
        )
        .await;
    assert_eq!(
        after_refusal,
        json!({ "stored": 0, "connection": "Token refused", "table": false }),
        "a refused token is not kept and shows no table"
    );
}

/// The right token: the sessions, live.
async fn the_right_token_shows_the_sessions_live(s: &mut Scene) {
    let Scene {
        capsule,
        live_id,
        mute_id,
        script_id,
        server,
        token,
        browser,
        shots,
        ..
    } = s;
    browser
        .type_into("#token", &format!("{token}{ENTER}"))
        .await;
    for (id, state) in [
        (&live_id, "live"),
        (&mute_id, "unreachable"),
        (&script_id, "live"),
    ] {
        browser
            .wait_for(
                &format!("{id} shows as {state}"),
                ROW_IN_STATE,
                json!([id, state]),
            )
            .await;
    }
    shots.push(browser.screenshot("dashboard.png").await);
    let row = browser.js(ROW, json!([live_id])).await;
    assert_eq!(row["capsule"], "researcher", "{row}");
    assert_eq!(row["door"], capsule.url(), "{row}");
    assert_eq!(row["visible"], true, "{row}");
    let script_row = browser.js(ROW, json!([script_id])).await;
    assert_eq!(script_row["door"], "no door", "{script_row}");
    // Newest first, and the connection says it is live.
    let order = browser
        .js(
            "return [...document.querySelectorAll('#rows tr')].map(tr => tr.dataset.sessionId);",
            json!([]),
        )
        .await;
    assert_eq!(order, json!([live_id, script_id, mute_id]));
    let connection = browser.js(SHOWN_TEXT, json!(["#connection-text"])).await;
    assert_eq!(connection, "Connected, live");
    // Hours and minutes at that age (the seconds tick is checked on a younger session below).
    assert!(
        row["uptime"]
            .as_str()
            .is_some_and(|u| u.starts_with("2h 1")),
        "{row}"
    );

    the_token_is_kept_in_this_tab_only(browser, &server.url(), token, live_id).await;
}

/// The token is in this tab's sessionStorage and nowhere else the page could leak it; a
/// reload keeps it (no second prompt) and shows `live_id` live again.
async fn the_token_is_kept_in_this_tab_only(
    browser: &Browser,
    url: &str,
    token: &str,
    live_id: &str,
) {
    let storage = browser
        .js(
            "return { session: Object.values(sessionStorage), local: localStorage.length,
                      cookie: document.cookie, url: location.href };",
            json!([]),
        )
        .await;
    assert_eq!(storage["session"], json!([token]), "{storage}");
    assert_eq!(storage["local"], 0, "{storage}");
    assert_eq!(storage["cookie"], "", "{storage}");
    assert!(!storage["url"].as_str().unwrap_or("").contains(token));

    // A reload keeps the tab's token: no second prompt.
    browser.goto(url).await;
    browser
        .wait_for(
            "the table is back after a reload",
            ROW_IN_STATE,
            json!([live_id, "live"]),
        )
        .await;
    let login_shown = browser.js(SHOWN_TEXT, json!(["#login"])).await;
    assert!(login_shown.is_null(), "no token prompt after a reload");
}

/// CPU and memory per row, from the `resources` events: a capsule that spins shows a CPU share
/// above zero, and figures update in place (the spinner's row is never flashed as changed).
/// The spinner leaves again (its record removed), so later steps see the three sessions.
async fn a_busy_capsule_shows_its_cpu_and_every_row_its_memory(s: &mut Scene) {
    let Scene {
        home,
        script_id,
        browser,
        shots,
        ..
    } = s;
    let spinner = TestProcess::python("while True: pass");
    let record = spinner
        .record()
        .no_door()
        .set("capsule_name", "spinner")
        .set("workdir", "/home/ada/work/spin")
        .set("started_at", started(Duration::from_secs(60)));
    let spinner_id = record.session_id();
    let file = home.write(&record);
    browser
        .wait_for(
            "the spinner shows live",
            ROW_IN_STATE,
            json!([spinner_id, "live"]),
        )
        .await;
    let busy = browser
        .wait_for(
            "the spinner's CPU shows above zero",
            "const tr = document.querySelector(`tr[data-session-id='${arguments[0]}']`);
             const cpu = tr && tr.querySelector('.col-cpu').textContent;
             return cpu && parseFloat(cpu) > 0 ? cpu : null;",
            json!([spinner_id]),
        )
        .await;
    assert!(busy.as_str().is_some_and(|c| c.ends_with('%')), "{busy}");
    shots.push(browser.screenshot("dashboard-resources.png").await);
    let memory = browser
        .wait_for(
            "the script capsule's memory shows",
            "const tr = document.querySelector(`tr[data-session-id='${arguments[0]}']`);
             const mem = tr && tr.querySelector('.col-mem').textContent;
             return mem && /^[0-9.]+ (KiB|MiB|GiB)$/.test(mem) ? mem : null;",
            json!([script_id]),
        )
        .await;
    assert!(memory.is_string(), "{memory}");
    let flashed = browser
        .js(
            "const tr = document.querySelector(`tr[data-session-id='${arguments[0]}']`);
             return tr.classList.contains('flash');",
            json!([spinner_id]),
        )
        .await;
    assert_eq!(flashed, false, "new figures are no change of the session");
    std::fs::remove_file(&file).expect("remove the spinner's record");
    drop(spinner);
    browser
        .wait_for(
            "the spinner's row is gone",
            "return !document.querySelector(`tr[data-session-id='${arguments[0]}']`);",
            json!([spinner_id]),
        )
        .await;
}

/// Without `--fleet-etcd`: the fleet choice is disabled and says why, in the registry's words;
/// `#fleet` asked for in the address falls back to this host, saying so.
async fn without_a_fleet_the_switch_says_why(s: &mut Scene) {
    let Scene {
        live_id, browser, ..
    } = s;
    let note = browser
        .wait_for(
            "the switch says there is no fleet",
            SHOWN_TEXT,
            json!(["#scope-note"]),
        )
        .await;
    assert!(
        note.as_str()
            .is_some_and(|t| t.starts_with("Fleet view off: ")
                && t.contains("not part of a fleet")
                && t.contains("--fleet-etcd")),
        "{note}"
    );
    let switch = browser.js(SWITCH, json!([])).await;
    assert_eq!(
        switch,
        json!({ "host": true, "fleet": false, "fleetDisabled": true, "hostColumn": false,
                "hash": "", "title": "Sessions" }),
        "{switch}"
    );
    browser.js("location.hash = '#fleet';", json!([])).await;
    let said = browser
        .wait_for(
            "#fleet falls back to this host, saying why",
            "const t = document.getElementById('outcome').textContent;
             return t.startsWith('The fleet view is off: ') ? t : null;",
            json!([]),
        )
        .await;
    assert!(
        said.as_str().is_some_and(|t| t.contains("--fleet-etcd")),
        "{said}"
    );
    browser
        .wait_for(
            "this host's table is back",
            ROW_IN_STATE,
            json!([live_id, "live"]),
        )
        .await;
    assert_eq!(browser.js(SWITCH, json!([])).await, switch);
}

/// The filter.
async fn the_state_filter_hides_and_shows_rows(s: &mut Scene) {
    let Scene {
        live_id,
        mute_id,
        browser,
        ..
    } = s;
    browser.click("#filter option[value='live']").await;
    browser
        .wait_for(
            "only live rows are shown",
            "return [...document.querySelectorAll('#rows tr')].filter(tr => !tr.hidden).length === 2;",
            json!([]),
        )
        .await;
    let shown = browser.js(ROW, json!([live_id])).await;
    assert_eq!(shown["visible"], true);
    let hidden = browser.js(ROW, json!([mute_id])).await;
    assert_eq!(hidden["visible"], false);
    browser.click("#filter option[value='all']").await;
    browser
        .wait_for(
            "every row is shown again",
            "return [...document.querySelectorAll('#rows tr')].every(tr => !tr.hidden);",
            json!([]),
        )
        .await;
}

/// A narrow window: rows become cards, nothing scrolls sideways.
async fn a_narrow_window_fits_without_sideways_scrolling(s: &mut Scene) {
    let Scene { browser, shots, .. } = s;
    browser.resize(360, 800).await;
    browser
        .wait_for(
            "the page fits 360 px without sideways scrolling",
            "const w = document.documentElement;
             return window.innerWidth <= 360 && w.scrollWidth <= w.clientWidth;",
            json!([]),
        )
        .await;
    shots.push(browser.screenshot("dashboard-narrow.png").await);
    browser.resize(1280, 800).await;
}

/// Data is text, never markup.
async fn data_is_text_never_markup(s: &mut Scene) {
    let Scene {
        home,
        hostile,
        hostile_id,
        browser,
        ..
    } = s;
    let hostile = hostile.insert(TestProcess::sleeping());
    let hostile_name = "<img src=x onerror=\"document.title='owned'\"><b>bold</b>";
    let hostile_record = hostile
        .record()
        .url("127.0.0.1:1")
        .set("capsule_name", hostile_name)
        .set("started_at", started(Duration::from_secs(3)));
    *hostile_id = hostile_record.session_id();
    home.write(&hostile_record);
    browser
        .wait_for("a new record appears on its own", ROW, json!([hostile_id]))
        .await;
    let markup = browser
        .js(
            "return { name: document.querySelector(`tr[data-session-id='${arguments[0]}'] .capsule-name`).textContent,
                      elements: document.querySelectorAll('#rows img, #rows b').length, title: document.title };",
            json!([hostile_id]),
        )
        .await;
    assert_eq!(
        markup,
        json!({ "name": hostile_name, "elements": 0, "title": "murmur registry" })
    );
    // Its uptime (seconds, at that age) ticks on its own.
    let first = browser.js(ROW, json!([hostile_id])).await["uptime"].clone();
    browser
        .wait_for(
            "the uptime ticks",
            "return document.querySelector(`tr[data-session-id='${arguments[0]}'] .uptime`).textContent !== arguments[1];",
            json!([hostile_id, first]),
        )
        .await;
}

/// Kill, then Escape: nothing happens.
async fn kill_then_escape_sends_nothing(s: &mut Scene) {
    let Scene {
        capsule,
        live_id,
        browser,
        ..
    } = s;
    let kill_button = format!("tr[data-session-id='{live_id}'] button.kill");
    browser.click(&kill_button).await;
    let dialog = browser
        .wait_for(
            "the kill confirmation is open",
            "const d = document.getElementById('confirm');
             return d.open ? { title: document.getElementById('confirm-title').textContent,
                               focus: document.activeElement.id } : null;",
            json!([]),
        )
        .await;
    assert_eq!(
        dialog,
        json!({ "title": "Kill researcher?", "focus": "confirm-cancel" }),
        "the safe choice has the focus"
    );
    browser.press(ESCAPE).await;
    browser
        .wait_for(
            "Escape closes the dialog, focus back on Kill",
            "return !document.getElementById('confirm').open &&
                    document.activeElement.matches(arguments[0]);",
            json!([kill_button]),
        )
        .await;
    assert!(capsule.is_running(), "a cancelled kill sends nothing");
    assert_eq!(browser.js(ROW, json!([live_id])).await["state"], "live");
}

/// Stop, confirmed with the keyboard: the capsule ends and its row goes.
async fn stop_confirmed_with_the_keyboard_ends_the_capsule(s: &mut Scene) {
    let Scene {
        home,
        capsule,
        live_id,
        mute_id,
        browser,
        ..
    } = s;
    browser
        .click(&format!("tr[data-session-id='{live_id}'] button.stop"))
        .await;
    browser
        .wait_for(
            "the stop confirmation is open",
            "return document.getElementById('confirm').open &&
                    document.getElementById('confirm-title').textContent === 'Stop researcher?';",
            json!([]),
        )
        .await;
    browser.press(TAB).await;
    let focused = browser
        .js("return document.activeElement.id;", json!([]))
        .await;
    assert_eq!(focused, "confirm-ok", "Tab reaches the confirm button");
    browser.press(ENTER).await;
    let outcome = browser
        .wait_for(
            "the stop's outcome is shown",
            "const t = document.getElementById('outcome').textContent;
             return t.startsWith('Stopped') ? t : null;",
            json!([]),
        )
        .await;
    assert!(
        outcome.as_str().is_some_and(|t| t.contains("researcher")),
        "{outcome}"
    );
    browser
        .wait_for(
            "the stopped session's row goes",
            "return document.querySelector(`tr[data-session-id='${arguments[0]}']`) === null;",
            json!([live_id]),
        )
        .await;
    capsule.wait_exit(BROWSER_DEADLINE);
    assert!(
        !home.running_dir().join(format!("{live_id}.json")).exists(),
        "the stopped session's record is removed"
    );
    assert!(
        browser.js(ROW, json!([mute_id])).await.is_object(),
        "the other sessions stay"
    );
}

/// Stop of a capsule whose door serves `murmur.StopSession`: the outcome message says what it
/// canceled and what it leaves running, and SIGTERM then ends the process.
async fn stop_says_what_the_capsule_canceled_and_left_running(s: &mut Scene) {
    let Scene { home, browser, .. } = s;
    let id = common::session_id();
    let door = DoorServer::start(DoorMode::Stoppable(StoppableDoor::new(
        &id,
        StopAnswer::Answers {
            canceled: vec![json!("task_01"), json!("task_02")],
            residue: vec![json!("shell: npm run dev (pid 4242)")],
        },
    )));
    let mut process = TestProcess::sleeping();
    home.write(
        &RecordJson::new(&id)
            .process(process.pid(), &process.start_token())
            .url(door.url())
            .set("capsule_name", "summarizer"),
    );
    browser
        .wait_for(
            "the stoppable capsule's row is live",
            ROW_IN_STATE,
            json!([id, "live"]),
        )
        .await;
    browser
        .click(&format!("tr[data-session-id='{id}'] button.stop"))
        .await;
    browser
        .wait_for(
            "the stop confirmation is open",
            "return document.getElementById('confirm').open &&
                    document.getElementById('confirm-title').textContent === 'Stop summarizer?';",
            json!([]),
        )
        .await;
    browser.click("#confirm-ok").await;
    let outcome = browser
        .wait_for(
            "the stop's outcome is shown",
            "const t = document.getElementById('outcome').textContent;
             return t.startsWith('Stopped summarizer') ? t : null;",
            json!([]),
        )
        .await;
    let outcome = outcome.as_str().unwrap_or_default();
    assert!(
        outcome.contains("Canceled: task_01, task_02.")
            && outcome.contains("Left running: shell: npm run dev (pid 4242)."),
        "{outcome}"
    );
    let status = process.wait_exit(BROWSER_DEADLINE);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(15),
        "SIGTERM ended it after the door was asked"
    );
    assert_eq!(
        door.requests()
            .iter()
            .filter(|r| common::is_call_of(r, "murmur.StopSession"))
            .count(),
        1
    );
}

/// Kill, confirmed with the mouse: SIGKILL goes out, and the live view drops the row.
async fn kill_confirmed_with_the_mouse_ends_the_script_capsule(s: &mut Scene) {
    let Scene {
        script,
        script_id,
        browser,
        ..
    } = s;
    browser
        .click(&format!("tr[data-session-id='{script_id}'] button.kill"))
        .await;
    browser
        .wait_for(
            "the kill confirmation is open",
            "return document.getElementById('confirm').open &&
                    document.getElementById('confirm-title').textContent === 'Kill nightly-report?';",
            json!([]),
        )
        .await;
    browser.click("#confirm-ok").await;
    let killed = browser
        .wait_for(
            "the kill's outcome is shown",
            "const t = document.getElementById('outcome').textContent;
             return t.startsWith('Sent SIGKILL') ? t : null;",
            json!([]),
        )
        .await;
    assert!(
        killed
            .as_str()
            .is_some_and(|t| t.contains("nightly-report")),
        "{killed}"
    );
    let status = script.wait_exit(BROWSER_DEADLINE);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the script capsule died of SIGKILL"
    );
    browser
        .wait_for(
            "the killed session's row goes once the registry finds it gone",
            "return document.querySelector(`tr[data-session-id='${arguments[0]}']`) === null;",
            json!([script_id]),
        )
        .await;
}

/// A snapshot mid-stream replaces the whole table.
async fn a_mid_stream_snapshot_replaces_the_table(s: &mut Scene) {
    let Scene {
        mute_id, browser, ..
    } = s;
    // The registry sends one in place of many changes at once. Fed to the page's own handler
    // (listing only the mute session), it drops the other rows and the page stays live; the
    // reconnect below brings the real picture back.
    let replaced = browser
        .js(
            "dispatch('snapshot', JSON.stringify({ sessions: [model.sessions.get(arguments[0])], unreadable: 0 }));
             return { rows: [...document.querySelectorAll('#rows tr')].map(tr => tr.dataset.sessionId),
                      connection: document.getElementById('connection-text').textContent };",
            json!([mute_id]),
        )
        .await;
    assert_eq!(
        replaced,
        json!({ "rows": [mute_id], "connection": "Connected, live" }),
        "a mid-stream snapshot replaces the table"
    );
}

/// The running directory goes away, and comes back.
async fn the_running_directory_goes_away_and_comes_back(s: &mut Scene) {
    let Scene {
        home,
        mute_id,
        hostile_id,
        browser,
        shots,
        ..
    } = s;
    // The registry ends the stream and answers 503 while it is gone: the page says so in the
    // registry's words, keeps the table greyed out, and keeps retrying until it is back.
    let running = home.running_dir();
    let aside = running.with_extension("aside");
    std::fs::rename(&running, &aside).expect("move the running directory aside");
    let unavailable = browser
        .wait_for(
            "the page says the running directory is unavailable",
            "const status = document.getElementById('connection-text').textContent;
             const banner = document.getElementById('banner-text').textContent;
             return status === 'Registry unavailable, retrying…'
                 && document.body.classList.contains('stale')
                 && !document.getElementById('banner').hidden
                 && document.querySelector(`tr[data-session-id='${arguments[0]}']`) !== null
                 ? banner : null;",
            json!([mute_id]),
        )
        .await;
    shots.push(
        browser
            .screenshot("dashboard-running-dir-unavailable.png")
            .await,
    );
    assert!(
        unavailable.as_str().is_some_and(|t| t.starts_with(
            "The registry cannot serve the live view: the running directory is unavailable: it does not exist"
        )),
        "{unavailable}"
    );
    std::fs::rename(&aside, &running).expect("put the running directory back");
    browser
        .wait_for(
            "the page is live again once the directory is back, with the whole picture",
            "return document.getElementById('connection-text').textContent === 'Connected, live'
                 && !document.body.classList.contains('stale')
                 && document.querySelector(`tr[data-session-id='${arguments[0]}']`) !== null
                 && document.querySelector(`tr[data-session-id='${arguments[1]}']`) !== null;",
            json!([mute_id, hostile_id]),
        )
        .await;
}

/// The registry goes away, and comes back on the same port.
async fn the_registry_goes_away_and_comes_back_on_its_port(s: &mut Scene) {
    let Scene {
        home,
        mute_id,
        server,
        browser,
        shots,
        ..
    } = s;
    let addr = server.addr;
    server.kill();
    let down = browser
        .wait_for(
            "the page says the registry is unreachable",
            "const t = document.getElementById('connection-text').textContent;
             return t.includes('unreachable') && document.body.classList.contains('stale')
                 && !document.getElementById('banner').hidden ? t : null;",
            json!([]),
        )
        .await;
    assert_eq!(down, "Registry unreachable, reconnecting…");
    shots.push(browser.screenshot("dashboard-unreachable.png").await);
    *server = restart_on(home, addr);
    browser
        .wait_for(
            "the page reconnects by itself",
            "return document.getElementById('connection-text').textContent === 'Connected, live'
                 && !document.body.classList.contains('stale')
                 && document.querySelector(`tr[data-session-id='${arguments[0]}']`) !== null;",
            json!([mute_id]),
        )
        .await;
}

/// Start the registry again on `addr` (the port the page knows). The port was just freed, so
/// another process taking it meanwhile is unlikely but possible: retry until the deadline.
fn restart_on(home: &Home, addr: SocketAddr) -> ServedBinary {
    let start = Instant::now();
    loop {
        match serve(home, &addr.to_string()).try_start() {
            Ok(server) => return server,
            Err(why) if start.elapsed() > BROWSER_DEADLINE => panic!("{why}"),
            // Paces the retries only.
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fleet view (feature `fleet`): two registries against a real etcd
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// The login link, and rows painted before a hanging door answers
// ---------------------------------------------------------------------------------------------

/// The first rows' paint, measured by the page itself: the `murmur.rows-painted` mark, the
/// start of the page's no-door listing, both in ms since the page's navigation started; and
/// the state of the row named `arguments[0]` (whose door hangs) right now.
const FIRST_PAINT: &str = "
    const painted = performance.getEntriesByName('murmur.rows-painted')[0];
    const asked = performance.getEntriesByType('resource')
        .find((e) => e.name.endsWith('/sessions?probe=false'));
    const rows = document.querySelectorAll('#rows tr').length;
    if (!painted || !asked || rows < 4) return null;
    const hanging = document.querySelector(`tr[data-session-id='${arguments[0]}']`);
    return { painted: painted.startTime, asked: asked.startTime, rows,
             hanging: hanging && hanging.dataset.state };";

/// Every URL the page has requested so far (its own address included).
const REQUESTED: &str = "
    return [location.href, ...performance.getEntriesByType('resource').map((e) => e.name)];";

/// `dashboard` in `home` with a display and a stand-in `xdg-open`: answers the `file://` URL
/// the browser was given.
fn opened_login_page(home: &Home) -> String {
    let bin = tempfile::tempdir().expect("tempdir");
    let seen = bin.path().join("argv");
    let opener = bin.path().join("xdg-open");
    std::fs::write(
        &opener,
        format!(
            "#!/bin/sh\nprintf '%s' \"$1\" > {0}.tmp && mv {0}.tmp {0}\n",
            seen.display()
        ),
    )
    .expect("write the opener");
    std::fs::set_permissions(
        &opener,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o700),
    )
    .expect("chmod the opener");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = registry(home.path(), User::Me);
    cmd.arg("dashboard").env("PATH", path).env("DISPLAY", ":0");
    let done = common::binary::run(cmd);
    done.assert_success();
    common::wait_until("the opener ran", common::DEADLINE, || seen.exists());
    let page = std::fs::read_to_string(&seen).expect("the opener's argument");
    format!("file://{page}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium + chromedriver (/usr/bin; Debian: apt-get install chromium chromium-driver)"]
async fn a_login_link_connects_and_rows_show_before_a_hanging_door_answers() {
    let home = Home::new();
    let capsule = CapsuleProcess::single();
    home.write(&capsule.record());
    let script = TestProcess::sleeping();
    home.write(&script.record().no_door());
    home.write(&common::ExitedChild::spawn().record());
    let hanging_door = DoorServer::start(DoorMode::Silent);
    let hanging = TestProcess::sleeping();
    let hanging_record = hanging.record().url(hanging_door.url());
    let hanging_id = hanging_record.session_id();
    home.write(&hanging_record);
    let server = serve(&home, "127.0.0.1:0").start();
    let token = home.token();
    let browser = Browser::launch().await;

    // The browser opens the private redirect page, which leads to the login link.
    browser.goto(&opened_login_page(&home)).await;
    step!(rows_paint_before_the_hanging_door_answers(
        &browser,
        &capsule.session_id(),
        &hanging_id
    ));
    step!(the_token_leaves_the_address_bar_and_no_request(
        &browser, &token
    ));
    step!(a_link_with_a_route_follows_it(
        &browser,
        &server.url(),
        &token
    ));
    step!(a_wrong_token_in_a_link_shows_the_paste_form(
        &browser,
        &server.url()
    ));
    browser.quit().await;
    drop(server);
}

/// Four rows on screen within half a second of asking, the hanging door's row still
/// asking; then the live capsule live and the hanging door's verdict, unreachable.
async fn rows_paint_before_the_hanging_door_answers(
    browser: &Browser,
    live_id: &str,
    hanging_id: &str,
) {
    let first = browser
        .wait_for("four rows are on screen", FIRST_PAINT, json!([hanging_id]))
        .await;
    let painted = first["painted"].as_f64().expect("a paint time");
    let asked = first["asked"].as_f64().expect("a listing time");
    eprintln!(
        "dashboard: first rows {:.0} ms after the page's navigation, {:.0} ms after it asked",
        painted,
        painted - asked
    );
    assert_eq!(
        first["hanging"], "asking",
        "painted before the door answered: {first}"
    );
    assert!(
        painted - asked < 500.0,
        "rows within half a second of asking, not after the slowest door: {first}"
    );
    browser
        .wait_for(
            "the live capsule is live",
            ROW_IN_STATE,
            json!([live_id, "live"]),
        )
        .await;
    browser
        .wait_for(
            "the hanging door's verdict arrives",
            ROW_IN_STATE,
            json!([hanging_id, "unreachable"]),
        )
        .await;
}

/// The token left the address bar at once, stayed in this tab, and no request carried it.
async fn the_token_leaves_the_address_bar_and_no_request(browser: &Browser, token: &str) {
    let kept = browser
        .js(
            "return { hash: location.hash, stored: sessionStorage.getItem('murmur-registry.token') };",
            json!([]),
        )
        .await;
    assert_eq!(kept, json!({ "hash": "", "stored": token }), "{kept}");
    let requested = browser.js(REQUESTED, json!([])).await;
    assert!(!requested.to_string().contains(token), "{requested}");
}

/// A link with a route: the route is followed, the token taken all the same.
async fn a_link_with_a_route_follows_it(browser: &Browser, url: &str, token: &str) {
    browser.goto("about:blank").await;
    browser.goto(&format!("{url}#fleet&token={token}")).await;
    browser
        .wait_for(
            "#fleet was routed (and falls back: this registry has no fleet)",
            "const t = document.getElementById('outcome').textContent;
             return t.startsWith('The fleet view is off: ') ? t : null;",
            json!([]),
        )
        .await;
    let requested = browser.js(REQUESTED, json!([])).await;
    let urls = requested.as_array().expect("a list");
    assert!(
        urls.iter()
            .any(|u| u.as_str().is_some_and(|u| u.ends_with("/fleet/events"))),
        "the fleet view was asked for: {requested}"
    );
    assert!(!requested.to_string().contains(token), "{requested}");
}

/// A wrong token in a link: the paste form, with the registry's reason; nothing kept.
async fn a_wrong_token_in_a_link_shows_the_paste_form(browser: &Browser, url: &str) {
    browser.goto("about:blank").await;
    browser
        .goto(&format!("{url}#token={}", "0".repeat(64)))
        .await;
    let refused = browser
        .wait_for(
            "the linked token is refused",
            SHOWN_TEXT,
            json!(["#login-error"]),
        )
        .await;
    assert!(
        refused
            .as_str()
            .is_some_and(|t| t.contains("not this registry's token")),
        "{refused}"
    );
    let after = browser
        .js(
            "return { hash: location.hash, stored: sessionStorage.length };",
            json!([]),
        )
        .await;
    assert_eq!(after, json!({ "hash": "", "stored": 0 }), "{after}");
}

#[cfg(feature = "fleet")]
mod fleet {
    use super::common::etcd::Etcd;
    use super::*;

    /// A short lease and pass, so the fleet follows quickly; the TTL is three passes and more.
    const FLEET_TTL: &str = "3s";
    const EVENTS_INTERVAL: &str = "500ms";

    /// `serve` on `home` as host `host_id` of the fleet on `etcd`.
    fn serve_in_fleet(home: &Home, etcd: &Etcd, host_id: &str) -> ServedBinary {
        serve(home, "127.0.0.1:0")
            .args(["--fleet-etcd", &etcd.endpoint(), "--host-id", host_id])
            .args([
                "--fleet-ttl",
                FLEET_TTL,
                "--events-interval",
                EVENTS_INTERVAL,
            ])
            .start()
    }

    /// What the fleet steps share: etcd, host a (the page's registry) with its own capsule,
    /// host b with the capsules the steps start there, the browser on a's page.
    struct FleetScene {
        etcd: Etcd,
        /// a's own script capsule (no door): live, until a step kills it from the fleet view.
        own: TestProcess,
        own_id: String,
        server_a: ServedBinary,
        home_b: Home,
        server_b: ServedBinary,
        /// A real capsule on b (started by a step), and one whose name is markup.
        far: Option<CapsuleProcess>,
        far_id: String,
        hostile: Option<TestProcess>,
        hostile_id: String,
        browser: Browser,
        shots: Vec<PathBuf>,
        /// Held for their files: the registries read them.
        _home_a: Home,
    }

    /// The row of host `arguments[0]`'s session `arguments[1]`: its host cell, state, capsule,
    /// door and its note, the buttons in it and what stands in for them; or null.
    const FLEET_ROW: &str = "
        const tr = document.querySelector(
            `tr[data-host-id='${arguments[0]}'][data-session-id='${arguments[1]}']`);
        if (!tr) return null;
        const shown = (el) => !!el && !el.hidden && el.getClientRects().length > 0;
        return {
            host: tr.querySelector('.host-name').textContent,
            ownTag: shown(tr.querySelector('.host-tag')),
            state: tr.querySelector('.badge-text').textContent,
            capsule: tr.querySelector('.capsule-name').textContent,
            door: tr.querySelector('.door').textContent,
            doorScope: shown(tr.querySelector('.door-scope'))
                ? tr.querySelector('.door-scope').textContent : null,
            buttons: [...tr.querySelectorAll('button')].filter(shown).map((b) => b.textContent),
            allButtons: tr.querySelectorAll('button').length,
            remote: shown(tr.querySelector('.remote-note'))
                ? tr.querySelector('.remote-note').textContent : null,
        };";

    /// Whether host `arguments[0]`'s session `arguments[1]` has a row in state `arguments[2]`.
    const FLEET_ROW_IN_STATE: &str = "
        const tr = document.querySelector(
            `tr[data-host-id='${arguments[0]}'][data-session-id='${arguments[1]}']`);
        return !!tr && tr.querySelector('.badge-text').textContent === arguments[2];";

    /// Whether host `arguments[0]`'s session `arguments[1]` has no row.
    const FLEET_ROW_GONE: &str = "
        return document.querySelector(
            `tr[data-host-id='${arguments[0]}'][data-session-id='${arguments[1]}']`) === null;";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs chromium + chromedriver (/usr/bin; Debian: apt-get install chromium chromium-driver) and etcd (/usr/bin/etcd; Debian: apt-get install etcd-server)"]
    async fn a_person_switches_to_the_fleet_and_follows_another_host() {
        let began = Instant::now();
        let mut s = step!(set_up_fleet());
        step!(the_switch_shows_the_fleet_with_a_host_column(&mut s));
        step!(a_capsule_started_on_b_appears_live_without_actions(&mut s));
        step!(the_host_strip_shows_each_hosts_sessions_and_load(&mut s));
        step!(data_from_another_host_is_text_never_markup(&mut s));
        step!(a_capsule_killed_on_b_disappears_live(&mut s));
        step!(kill_on_an_own_row_in_the_fleet_view_ends_the_capsule(
            &mut s
        ));
        step!(etcd_frozen_the_fleet_is_not_shown_as_current(&mut s));
        step!(switching_back_shows_this_host_only(&mut s));
        let FleetScene {
            browser,
            server_a,
            server_b,
            shots,
            ..
        } = s;
        browser.quit().await;
        drop((server_a, server_b));
        eprintln!(
            "dashboard fleet browser test: {:.1} s; screenshots: {}",
            began.elapsed().as_secs_f64(),
            shots
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    /// etcd; registry a with its own script capsule; registry b, empty; the browser on a's
    /// page, connected with a's token, showing this host.
    async fn set_up_fleet() -> FleetScene {
        let etcd = Etcd::start().await;
        let home_a = Home::new();
        let own = TestProcess::sleeping();
        let own_record = own
            .record()
            .no_door()
            .set("capsule_name", "own-report")
            .set("capsule_version", "0.9.4")
            .set("workdir", "/home/ada/work/notes")
            .set("started_at", started(Duration::from_secs(3 * 3600)));
        let own_id = own_record.session_id();
        home_a.write(&own_record);
        let home_b = Home::new();
        home_b.running_dir();
        let server_a = serve_in_fleet(&home_a, &etcd, "a");
        let server_b = serve_in_fleet(&home_b, &etcd, "b");

        let browser = Browser::launch().await;
        browser.goto(&server_a.url()).await;
        browser
            .wait_for("the token field is shown", SHOWN_TEXT, json!(["#login"]))
            .await;
        browser
            .type_into("#token", &format!("{}{ENTER}", home_a.token()))
            .await;
        browser
            .wait_for(
                "a's own capsule shows, on this host's view",
                ROW_IN_STATE,
                json!([own_id, "live"]),
            )
            .await;
        FleetScene {
            etcd,
            own,
            own_id,
            server_a,
            home_b,
            server_b,
            far: None,
            far_id: String::new(),
            hostile: None,
            hostile_id: String::new(),
            browser,
            shots: Vec::new(),
            _home_a: home_a,
        }
    }

    /// The switch offers the fleet (a has one); chosen, it shows both hosts with a host column.
    async fn the_switch_shows_the_fleet_with_a_host_column(s: &mut FleetScene) {
        let FleetScene {
            own_id, browser, ..
        } = s;
        browser
            .wait_for(
                "the fleet choice is offered",
                "return !document.getElementById('scope-fleet').disabled
                     && document.getElementById('scope-note').hidden;",
                json!([]),
            )
            .await;
        let before = browser.js(SWITCH, json!([])).await;
        assert_eq!(
            before["hostColumn"], false,
            "no host column on this host's view"
        );
        browser.click("label[for='scope-fleet']").await;
        browser
            .wait_for(
                "the fleet view is live, with both hosts",
                "return document.getElementById('connection-text').textContent
                         === 'Connected, live (fleet)'
                     && document.getElementById('summary').textContent.includes('on 2 hosts');",
                json!([]),
            )
            .await;
        let switch = browser.js(SWITCH, json!([])).await;
        assert_eq!(
            switch,
            json!({ "host": false, "fleet": true, "fleetDisabled": false, "hostColumn": true,
                    "hash": "#fleet", "title": "Fleet sessions" }),
            "{switch}"
        );
        let header = browser
            .js(
                "return document.querySelector('th.col-host').innerText;",
                json!([]),
            )
            .await;
        assert_eq!(header, "HOST");
        let own = browser
            .wait_for("a's own row", FLEET_ROW, json!(["a", own_id]))
            .await;
        assert_eq!(own["host"], "a", "{own}");
        assert_eq!(own["ownTag"], true, "own rows say so: {own}");
        assert_eq!(own["buttons"], json!(["Stop", "Kill"]), "{own}");
        assert_eq!(own["remote"], Value::Null, "{own}");
    }

    /// A real capsule started on b appears on a's page by itself; its row has no actions.
    async fn a_capsule_started_on_b_appears_live_without_actions(s: &mut FleetScene) {
        let FleetScene {
            home_b,
            own_id,
            far,
            far_id,
            browser,
            shots,
            ..
        } = s;
        let far = far.insert(CapsuleProcess::single());
        *far_id = far.session_id();
        home_b.write(
            &far.record()
                .set("capsule_name", "far-researcher")
                .set("capsule_version", "0.3.1")
                .set("workdir", "/home/bea/work/papers")
                .set("started_at", started(Duration::from_secs(47 * 60))),
        );
        browser
            .wait_for(
                "b's capsule appears live",
                FLEET_ROW_IN_STATE,
                json!(["b", far_id, "live"]),
            )
            .await;
        let row = browser.js(FLEET_ROW, json!(["b", far_id])).await;
        assert_eq!(
            row,
            json!({ "host": "b", "ownTag": false, "state": "live", "capsule": "far-researcher",
                    "door": far.url(), "doorScope": "only from b", "buttons": [],
                    "allButtons": 0, "remote": "on host b" }),
            "another host's row: no Stop, no Kill"
        );
        let own = browser.js(FLEET_ROW, json!(["a", own_id])).await;
        assert_eq!(own["buttons"], json!(["Stop", "Kill"]), "{own}");
        shots.push(browser.screenshot("dashboard-fleet.png").await);
        browser.resize(360, 800).await;
        browser
            .wait_for(
                "the fleet fits 360 px without sideways scrolling",
                "const w = document.documentElement;
                 return window.innerWidth <= 360 && w.scrollWidth <= w.clientWidth;",
                json!([]),
            )
            .await;
        shots.push(browser.screenshot("dashboard-fleet-narrow.png").await);
        browser.resize(1280, 800).await;
    }

    /// Above the table, a card per host: its sessions, load and memory as it published them,
    /// this host's marked; a rewritten host entry (`host.changed`) replaces its card, and what
    /// a host wrote is text.
    async fn the_host_strip_shows_each_hosts_sessions_and_load(s: &mut FleetScene) {
        let FleetScene { browser, .. } = s;
        let cards = "const strip = document.getElementById('host-strip');
             const cards = [...strip.querySelectorAll('.host-card')];
             if (strip.hidden || cards.length !== 2) return null;
             return cards.map((c) => [c.dataset.host, c.innerText.replace(/\\s+/g, ' ')]);";
        let shown = browser.wait_for("a card per host", cards, json!([])).await;
        let shown: Vec<(String, String)> = serde_json::from_value(shown).expect("cards");
        let hosts: Vec<&str> = shown.iter().map(|(host, _)| host.as_str()).collect();
        assert_eq!(hosts, ["a", "b"], "{shown:?}");
        let (a, b) = (&shown[0].1, &shown[1].1);
        assert!(
            a.contains("this host") && !b.contains("this host"),
            "{shown:?}"
        );
        for (_, text) in &shown {
            assert!(text.contains("1 session"), "{text}");
            assert!(text.contains("load ") && text.contains(" CPU"), "{text}");
            assert!(text.contains(" free"), "{text}");
        }
        browser
            .js(
                "dispatch('host.changed', JSON.stringify({ host_id: 'b', host: { host_id: 'b',
                     load: { cpus: 64, load_1m: 7.5, load_5m: 1, load_15m: 1,
                             memory_total_bytes: 1073741824, memory_available_bytes: 536870912,
                             measured_at: '<b>now</b>' } } }));",
                json!([]),
            )
            .await;
        let b = browser
            .wait_for(
                "b's card follows its rewritten entry",
                "const card = document.querySelector(\"#host-strip [data-host='b']\");
                 const text = card && card.innerText.replace(/\\s+/g, ' ');
                 return text && text.includes('load 7.50 on 64 CPUs') ? text : null;",
                json!([]),
            )
            .await;
        let b = b.as_str().unwrap_or_default();
        assert!(b.contains("512.0 MiB of 1.0 GiB free"), "{b}");
        let markup = browser
            .js(
                "return document.querySelectorAll('#host-strip b').length;",
                json!([]),
            )
            .await;
        assert_eq!(markup, 0);
    }

    /// What another host publishes is shown as text: a capsule name that is markup stays text.
    async fn data_from_another_host_is_text_never_markup(s: &mut FleetScene) {
        let FleetScene {
            home_b,
            hostile,
            hostile_id,
            browser,
            ..
        } = s;
        let hostile = hostile.insert(TestProcess::sleeping());
        let hostile_name = "<img src=x onerror=\"document.title='owned'\"><b>bold</b>";
        let record = hostile
            .record()
            .url("127.0.0.1:1")
            .set("capsule_name", hostile_name)
            .set("workdir", "/tmp/<script>document.title='owned'</script>")
            .set("started_at", started(Duration::from_secs(60)));
        *hostile_id = record.session_id();
        home_b.write(&record);
        browser
            .wait_for(
                "b's record whose name is markup appears",
                FLEET_ROW,
                json!(["b", hostile_id]),
            )
            .await;
        let markup = browser
            .js(
                "const tr = document.querySelector(`tr[data-session-id='${arguments[0]}']`);
                 return { name: tr.querySelector('.capsule-name').textContent,
                          workdir: tr.querySelector('.workdir').textContent,
                          elements: document
                              .querySelectorAll('#rows img, #rows b, #rows script').length,
                          title: document.title };",
                json!([hostile_id]),
            )
            .await;
        assert_eq!(
            markup,
            json!({ "name": hostile_name, "workdir": "/tmp/<script>document.title='owned'</script>",
                    "elements": 0, "title": "murmur registry" })
        );
        // Events the page cannot use (not JSON, no session id, a host id that is no string, an
        // unknown name) change nothing.
        let rows = "return [...document.querySelectorAll('#rows tr')]
                        .map((tr) => tr.dataset.hostId + '/' + tr.dataset.sessionId);";
        let before = browser.js(rows, json!([])).await;
        let after = browser
            .js(
                &format!(
                    "dispatch('session.added', 'not json');
                     dispatch('session.added',
                         JSON.stringify({{ host_id: 'b', session: {{ host_id: 'b' }} }}));
                     dispatch('session.removed', JSON.stringify({{ host_id: 'b' }}));
                     dispatch('host.left', JSON.stringify({{ host_id: 5 }}));
                     dispatch('host.exploded', JSON.stringify({{ host_id: 'b' }}));
                     {rows}"
                ),
                json!([]),
            )
            .await;
        assert_eq!(after, before, "unusable events change nothing");
    }

    /// The capsule killed on b: b's registry finds it gone, and its row goes from a's page.
    async fn a_capsule_killed_on_b_disappears_live(s: &mut FleetScene) {
        let FleetScene {
            own_id,
            far,
            far_id,
            browser,
            ..
        } = s;
        let far = far.as_mut().expect("b's capsule");
        far.send_signal(9);
        far.wait_exit(BROWSER_DEADLINE);
        browser
            .wait_for(
                "the capsule killed on b leaves a's page",
                FLEET_ROW_GONE,
                json!(["b", far_id]),
            )
            .await;
        assert!(
            browser
                .js(FLEET_ROW, json!(["a", own_id]))
                .await
                .is_object(),
            "a's own row stays"
        );
    }

    /// Kill on a's own row, from the fleet view: this registry sends SIGKILL, the row goes.
    async fn kill_on_an_own_row_in_the_fleet_view_ends_the_capsule(s: &mut FleetScene) {
        let FleetScene {
            own,
            own_id,
            browser,
            ..
        } = s;
        browser
            .click(&format!(
                "tr[data-host-id='a'][data-session-id='{own_id}'] button.kill"
            ))
            .await;
        browser
            .wait_for(
                "the kill confirmation is open",
                "return document.getElementById('confirm').open &&
                        document.getElementById('confirm-title').textContent === 'Kill own-report?';",
                json!([]),
            )
            .await;
        browser.click("#confirm-ok").await;
        browser
            .wait_for(
                "the kill's outcome is shown",
                "const t = document.getElementById('outcome').textContent;
                 return t.startsWith('Sent SIGKILL') && t.includes('own-report') ? t : null;",
                json!([]),
            )
            .await;
        let status = own.wait_exit(BROWSER_DEADLINE);
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "a's own capsule died of SIGKILL"
        );
        browser
            .wait_for(
                "the killed own session's row goes",
                FLEET_ROW_GONE,
                json!(["a", own_id]),
            )
            .await;
    }

    /// etcd frozen (SIGSTOP: connections open, nothing answered): the page says the fleet is
    /// unavailable, in the registry's words, and shows the last fleet greyed out as possibly not
    /// current; etcd thawed: live again by itself. (Frozen rather than killed: a restart must
    /// find its ports free again, which a busy machine does not promise.)
    async fn etcd_frozen_the_fleet_is_not_shown_as_current(s: &mut FleetScene) {
        let FleetScene {
            etcd,
            hostile_id,
            browser,
            shots,
            ..
        } = s;
        etcd.freeze();
        let banner = browser
            .wait_for(
                "the page says the fleet is unavailable",
                "const status = document.getElementById('connection-text').textContent;
                 const banner = document.getElementById('banner-text').textContent;
                 return status === 'Fleet unavailable, retrying…'
                     && document.body.classList.contains('stale')
                     && !document.getElementById('banner').hidden
                     && document.getElementById('summary').textContent.includes('last known state')
                     ? banner : null;",
                json!([]),
            )
            .await;
        assert!(
            banner.as_str().is_some_and(|t| t
                .starts_with("The registry cannot serve the fleet: the fleet is unavailable")
                && t.contains("may no longer be current")),
            "{banner}"
        );
        shots.push(browser.screenshot("dashboard-fleet-unavailable.png").await);
        etcd.thaw();
        browser
            .wait_for(
                "the fleet is live again once etcd answers",
                "return document.getElementById('connection-text').textContent
                         === 'Connected, live (fleet)'
                     && !document.body.classList.contains('stale')
                     && document.querySelector(
                         `tr[data-host-id='b'][data-session-id='${arguments[0]}']`) !== null;",
                json!([hostile_id]),
            )
            .await;
    }

    /// Back to this host: the host column and b's rows go; a has no capsule left.
    async fn switching_back_shows_this_host_only(s: &mut FleetScene) {
        let FleetScene { browser, .. } = s;
        browser.click("label[for='scope-host']").await;
        let empty = browser
            .wait_for(
                "this host's view, empty",
                "return document.getElementById('connection-text').textContent === 'Connected, live'
                     && document.querySelectorAll('#rows tr').length === 0
                     ? document.getElementById('empty').textContent : null;",
                json!([]),
            )
            .await;
        assert_eq!(empty, "No capsule sessions are running on this machine.");
        let switch = browser.js(SWITCH, json!([])).await;
        assert_eq!(
            switch,
            json!({ "host": true, "fleet": false, "fleetDisabled": false, "hostColumn": false,
                    "hash": "", "title": "Sessions" }),
            "{switch}"
        );
    }
}
