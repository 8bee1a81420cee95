//! The registry's pidfds end to end: `murmur-registry serve` as a real process over real
//! records of real processes, its pidfds read from outside through `/proc/<its pid>/fdinfo`
//! (a pidfd's `Pid:` line names its process), never through a counter of its own.
//!
//! Why these tests exist: a held pidfd replaces layers 1–2 for every record naming its process,
//! and tells the live view the moment that process exits. So what it holds must be exactly
//! right, and must never outlive the process it names:
//!
//! - one pidfd per distinct live process the records name (records sharing a process share
//!   it), none for a record of an exited process or of a live one with another start token; a
//!   record rewritten for a new process gets a new pidfd, and the old one is dropped once no
//!   record names it, within three whole-directory passes (listings), as is the pidfd of a
//!   removed record; a zombie is no live process, a live one whose main thread exited is;
//! - a pid reused after its capsule died never inherits the old pidfd's verdict: the dead
//!   capsule's record is gone while a new process holds its number (started at that exact pid
//!   with `clone3`'s `set_tid`), and that new process's own record is live, with a pidfd of
//!   its own, as is the dead capsule's record once rewritten for it (needs root);
//! - a capsule killed while a listener reads `/events` is reported `changed` to gone and
//!   `removed` (pruned, the file unlinked) with `--events-interval 1h`, `--door-recheck 1h`
//!   and no door in its record: only the exit can explain the events. Also for another user's capsule, the
//!   registry run as uid 65534 (needs root);
//! - with an open-files limit too low to pin every live process, some are pinned and the rest
//!   read through `/proc`, every listing still right (a pinned and an unpinned process killed
//!   both read gone), and the log says so once;
//! - where `pidfd_open` fails with ENOSYS (a seccomp filter, `tests/fixtures/no_pidfd.py`,
//!   shown to block it), the registry says so once in its log, holds no pidfd, still tells
//!   live from gone on every listing, and still reports a killed capsule gone and removed at
//!   its next pass.
//!
//! Nothing sleeps to synchronise: the stream is read with a per-event deadline that only bounds
//! how long a broken test takes to fail; a pidfd being dropped is checked after a counted
//! number of listings, not after a time.

mod common;

use std::process::Command;

use common::binary::{Home, User, chown_nobody, registry, run};
use common::pidfds::{
    NO_PIDFD, ProcessAtPid, pidfd_pids, pidfds_held_by, seccomp_mode, with_open_files_limit,
    without_pidfd_open,
};
use common::{
    CapsuleProcess, DEADLINE, EVENT_DEADLINE, EventStream, ExitedChild, RecordJson, ServedBinary,
    SseEvent, TestProcess, Zombie, replace_by_rename, wait_until, wrong_start_token,
};
use murmur_registry::running::reason_exited;
use rustix::process::Signal;
use serde_json::Value;

/// How many whole-directory passes (listings) it takes at most to drop a pidfd no record names:
/// one no reading named during two passes in a row is dropped as the third begins (two, not
/// one, because a listing's pass and the live view's may begin back to back).
const PASSES_TO_DROP: usize = 3;

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

/// `murmur-registry serve` on `127.0.0.1:0` in its own `HOME`, asked over HTTP with its token.
struct Server {
    binary: ServedBinary,
    token: String,
    client: reqwest::Client,
}

impl Server {
    /// `serve` as `user`, with `args` after `serve --bind 127.0.0.1:0`.
    fn start(home: &Home, user: User, args: &[&str]) -> Self {
        let mut cmd = registry(home.path(), user);
        cmd.args(["serve", "--bind", "127.0.0.1:0"]).args(args);
        Self::spawn(home, cmd)
    }

    /// [`Server::start`] as the test user with its open-files limit, soft and hard, at `limit`.
    fn start_with_open_files_limit(home: &Home, limit: u32) -> Self {
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["serve", "--bind", "127.0.0.1:0"]);
        Self::spawn(home, with_open_files_limit(cmd, limit))
    }

    /// [`Server::start`] as the test user where `pidfd_open` fails with ENOSYS.
    fn start_without_pidfd_open(home: &Home, args: &[&str]) -> Self {
        let mut cmd = registry(home.path(), User::Me);
        cmd.args(["serve", "--bind", "127.0.0.1:0"]).args(args);
        Self::spawn(home, without_pidfd_open(cmd))
    }

    fn spawn(home: &Home, cmd: Command) -> Self {
        let binary = ServedBinary::spawn(cmd);
        Self {
            binary,
            token: home.token(),
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("an HTTP client"),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.binary.addr)
    }

    /// The pid of every pidfd the server holds (see [`pidfds_held_by`]).
    fn pidfds(&self) -> Vec<i64> {
        pidfds_held_by(self.binary.pid())
    }

    /// `GET /sessions<query>`, which must answer 200: one whole-directory pass.
    async fn list(&self, query: &str) -> Listing {
        let response = self
            .client
            .get(self.url(&format!("/sessions{query}")))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("the registry answers GET /sessions");
        let status = response.status().as_u16();
        let body = response.text().await.expect("a body");
        assert_eq!(status, 200, "GET /sessions{query}: {body}");
        Listing(serde_json::from_str(&body).expect("a JSON listing"))
    }

    /// List (full, then `probe=false`, alternately) until the server's pidfds satisfy `done`,
    /// failing the test if they do not after `at_most` listings.
    async fn list_until(&self, at_most: usize, what: &str, done: impl Fn(&[i64]) -> bool) {
        for n in 0..at_most {
            let query = if n % 2 == 0 { "" } else { "?probe=false" };
            self.list(query).await;
            if done(&self.pidfds()) {
                return;
            }
        }
        panic!(
            "after {at_most} listings, not yet {what}: pidfds for {:?}",
            self.pidfds()
        );
    }

    /// Open `/events` and read its snapshot.
    async fn listen(&self) -> (EventStream, SseEvent) {
        let response = self
            .client
            .get(self.url("/events"))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("the registry answers GET /events");
        let mut stream = EventStream::new(response, EVENT_DEADLINE);
        let snapshot = stream.snapshot().await;
        (stream, snapshot)
    }
}

/// A `GET /sessions` answer.
struct Listing(Value);

impl Listing {
    /// The `liveness` of session `id`, which must be listed.
    fn liveness(&self, id: &str) -> &Value {
        let session = self.0["sessions"]
            .as_array()
            .expect("a listing lists sessions")
            .iter()
            .find(|s| s["session_id"] == id)
            .unwrap_or_else(|| panic!("{id} is not listed: {}", self.0));
        &session["liveness"]
    }

    /// The process verdict (`alive`, `gone` …) of session `id`.
    fn process(&self, id: &str) -> &str {
        self.liveness(id)["process"].as_str().unwrap_or_default()
    }

    /// Assert that session `id`'s process reads `expected`, showing the listing if not.
    #[track_caller]
    fn assert_process(&self, id: &str, expected: &str) {
        assert_eq!(self.process(id), expected, "{id} in {}", self.0);
    }

    /// The reason given for session `id` (empty when none).
    fn reason(&self, id: &str) -> &str {
        self.liveness(id)["reason"].as_str().unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// Reading `/events` (the reader itself is `common::sse`'s)
// ---------------------------------------------------------------------------------------------

/// The state of session `id` in `snapshot`, empty when it is not in it.
fn state_in_snapshot<'a>(snapshot: &'a SseEvent, id: &str) -> &'a str {
    snapshot.data["sessions"]
        .as_array()
        .and_then(|sessions| sessions.iter().find(|s| s["session_id"] == id))
        .and_then(|s| s["liveness"]["state"].as_str())
        .unwrap_or_default()
}

/// The next event about session `id`, skipping events about others; fails the test if the
/// stream ends first.
async fn next_about(events: &mut EventStream, id: &str) -> SseEvent {
    let about = format!("an event about {id}");
    events
        .until(&about, |_| true, |e| e.session_id() == id)
        .await
}

// ---------------------------------------------------------------------------------------------
// One pidfd per live process
// ---------------------------------------------------------------------------------------------

/// `owned` (of `own`) rewritten, staged and renamed into place, for a new process (new pid,
/// new start token): the new process gets a pidfd, the old one's is dropped although it still
/// runs, and the pidfds of `others` stay. The new process, kept running.
async fn a_rewritten_record_moves_to_its_new_process(
    server: &Server,
    home: &Home,
    (owned, own): (&RecordJson, &TestProcess),
    others: [u32; 2],
) -> TestProcess {
    let successor = TestProcess::sleeping();
    let rewritten = RecordJson::new(&owned.session_id())
        .process(successor.pid(), &successor.start_token())
        .no_door();
    replace_by_rename(
        &home.running_dir(),
        &owned.file_name(),
        rewritten.to_bytes(),
    );
    let listing = server.list("").await;
    listing.assert_process(&owned.session_id(), "alive");
    assert!(
        server.pidfds().contains(&i64::from(successor.pid())),
        "the rewritten record's new process gets a pidfd: {:?}",
        server.pidfds()
    );
    let wanted = pidfd_pids(&[others[0], successor.pid(), others[1]]);
    server
        .list_until(PASSES_TO_DROP, "the old process's pidfd dropped", |pids| {
            pids == wanted
        })
        .await;
    assert_eq!(
        common::proc_state(own.pid()).map(|s| s != 'Z'),
        Some(true),
        "the old process still runs: its pidfd was dropped because no record names it"
    );
    successor
}

/// Both `records` name process `shared`; beside it the registry holds pidfds of `others`
/// only. Its pidfd stays while one record remains, and goes with the last.
async fn a_process_two_records_name_keeps_its_pidfd_while_one_remains(
    server: &Server,
    home: &Home,
    records: [&RecordJson; 2],
    shared: u32,
    others: [u32; 2],
) {
    let with_shared = pidfd_pids(&[shared, others[0], others[1]]);
    std::fs::remove_file(home.running_dir().join(records[0].file_name())).expect("unlink");
    for _ in 0..PASSES_TO_DROP {
        server.list("").await;
        assert_eq!(
            server.pidfds(),
            with_shared,
            "another record still names the shared process"
        );
    }
    std::fs::remove_file(home.running_dir().join(records[1].file_name())).expect("unlink");
    server
        .list_until(
            PASSES_TO_DROP,
            "the removed records' pidfd dropped",
            |pids| pids == pidfd_pids(&others),
        )
        .await;
}

#[tokio::test]
async fn the_registry_holds_one_pidfd_per_live_process_and_drops_those_no_record_names() {
    let home = Home::new();
    let server = Server::start(&home, User::Me, &[]);
    let shared = TestProcess::sleeping();
    let own = TestProcess::sleeping();
    let other_token = TestProcess::sleeping();
    // Alive: its main thread exited while another runs on (the kernel says so only once the
    // whole thread group has exited).
    let leader = TestProcess::zombie_leader();
    let exited = ExitedChild::spawn();
    let zombie = Zombie::spawn();

    let shared_first = shared.record().no_door();
    let shared_second = shared.record().no_door();
    let owned = own.record().no_door();
    let mistaken = other_token
        .record()
        .process_start(&wrong_start_token(other_token.pid()))
        .no_door();
    let dead = exited.record().no_door();
    let unreaped = zombie.record().no_door();
    let threaded = leader.record().no_door();
    let records = [
        &shared_first,
        &shared_second,
        &owned,
        &mistaken,
        &dead,
        &unreaped,
        &threaded,
    ];
    for record in records {
        home.write(record);
    }

    let listing = server.list("").await;
    for live in [&shared_first, &shared_second, &owned, &threaded] {
        listing.assert_process(&live.session_id(), "alive");
    }
    for gone in [&mistaken, &dead, &unreaped] {
        listing.assert_process(&gone.session_id(), "gone");
    }
    assert_eq!(
        server.pidfds(),
        pidfd_pids(&[shared.pid(), own.pid(), leader.pid()]),
        "one pidfd per distinct live process the records name, none for the others"
    );
    server.list("?probe=false").await;
    assert_eq!(
        server.pidfds(),
        pidfd_pids(&[shared.pid(), own.pid(), leader.pid()]),
        "a listing without probes uses the same pidfds"
    );

    let successor = a_rewritten_record_moves_to_its_new_process(
        &server,
        &home,
        (&owned, &own),
        [shared.pid(), leader.pid()],
    )
    .await;
    let others = [successor.pid(), leader.pid()];
    let shared_records = [&shared_first, &shared_second];
    a_process_two_records_name_keeps_its_pidfd_while_one_remains(
        &server,
        &home,
        shared_records,
        shared.pid(),
        others,
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// A reused pid
// ---------------------------------------------------------------------------------------------

#[tokio::test]
#[ignore = "needs root: starts a process at the pid of one that died (clone3 with set_tid)"]
async fn a_pid_reused_after_its_capsule_died_never_inherits_the_old_pidfds_verdict() {
    let home = Home::new();
    let server = Server::start(&home, User::Me, &[]);
    let mut first = TestProcess::sleeping();
    let pid = first.pid();
    let first_token = first.start_token();
    let died = first.record().no_door();
    home.write(&died);
    let listing = server.list("").await;
    listing.assert_process(&died.session_id(), "alive");
    assert_eq!(server.pidfds(), pidfd_pids(&[pid]), "the capsule is pinned");

    // It dies and is reaped; with no reading in between, a new process takes its number. A
    // start token counts clock ticks: one started in the same tick would carry the same token,
    // and no record could tell the two apart, so that one is put back and started again.
    kill_child(pid);
    first.wait_exit(DEADLINE);
    drop(first);
    let mut reused = None;
    wait_until(
        &format!("a new process at pid {pid} with a token of its own"),
        DEADLINE,
        || {
            let candidate = ProcessAtPid::sleeping(pid);
            let differs = candidate.start_token() != first_token;
            if differs {
                reused = Some(candidate);
            }
            differs
        },
    );
    let reused = reused.expect("set when the wait ends");

    let listing = server.list("").await;
    listing.assert_process(&died.session_id(), "gone");
    assert_reason_of_a_reused_pid(&listing, &died, pid);
    assert_eq!(
        server.pidfds(),
        Vec::<i64>::new(),
        "the dead capsule's pidfd is closed, and nothing names the new process yet"
    );

    let new = reused.record().no_door();
    home.write(&new);
    for query in ["", "?probe=false", ""] {
        let listing = server.list(query).await;
        listing.assert_process(&new.session_id(), "alive");
        listing.assert_process(&died.session_id(), "gone");
        assert_reason_of_a_reused_pid(&listing, &died, pid);
        assert_eq!(
            server.pidfds(),
            pidfd_pids(&[pid]),
            "one pidfd, naming the live process at pid {pid} (a dead one's reads -1)"
        );
    }

    // The dead capsule's record rewritten for the new process (same pid, its own token).
    let rewritten = RecordJson::new(&died.session_id())
        .process(pid, reused.start_token())
        .no_door();
    replace_by_rename(&home.running_dir(), &died.file_name(), rewritten.to_bytes());
    let listing = server.list("").await;
    listing.assert_process(&died.session_id(), "alive");
    listing.assert_process(&new.session_id(), "alive");
    assert_eq!(
        server.pidfds(),
        pidfd_pids(&[pid]),
        "both records share one"
    );
}

/// The reason a record of a dead capsule whose pid was reused is gone: its process exited (what
/// its pidfd saw) or the pid's holder started at another time (what `/proc` shows).
fn assert_reason_of_a_reused_pid(listing: &Listing, died: &RecordJson, pid: u32) {
    let reason = listing.reason(&died.session_id());
    assert!(
        reason == reason_exited(pid)
            || reason == format!("pid {pid} is held by a process that started at another time"),
        "{reason}"
    );
}

/// SIGKILL a child of this test by pid (the test reaps it afterwards, so the number is still its).
fn kill_child(pid: u32) {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .expect("a child's pid");
    rustix::process::kill_process(pid, Signal::KILL).expect("signal the test's child");
}

// ---------------------------------------------------------------------------------------------
// An exit seen at once
// ---------------------------------------------------------------------------------------------

/// A capsule killed while a listener reads `/events`, the directory passes an hour apart and
/// no door to ask: the session must be reported gone and removed on the exit alone.
async fn a_killed_capsule_is_reported_gone_and_removed_without_a_pass(user: User) {
    let home = match user {
        User::Nobody => Home::for_nobody_with_running_dir(),
        _ => Home::new(),
    };
    let server = Server::start(
        &home,
        user,
        &["--events-interval", "1h", "--door-recheck", "1h"],
    );
    let mut capsule = TestProcess::sleeping();
    let record = capsule.record().no_door();
    let id = record.session_id();
    let file = home.write(&record);
    if matches!(user, User::Nobody) {
        chown_nobody(&file);
    }

    let (mut events, snapshot) = server.listen().await;
    assert_eq!(state_in_snapshot(&snapshot, &id), "live", "{snapshot:?}");
    assert_eq!(
        server.pidfds(),
        pidfd_pids(&[capsule.pid()]),
        "the registry watches the capsule"
    );

    kill_child(capsule.pid());
    capsule.wait_exit(DEADLINE);
    let changed = next_about(&mut events, &id).await;
    assert_eq!(changed.name, "session.changed", "{changed:?}");
    assert_eq!(changed.data["new_state"], "gone", "{changed:?}");
    assert_eq!(
        changed.data["reason"],
        reason_exited(capsule.pid()),
        "{changed:?}"
    );
    let removed = next_about(&mut events, &id).await;
    assert_eq!(removed.name, "session.removed", "{removed:?}");
    assert_eq!(removed.data["reason"], "pruned", "{removed:?}");
    assert!(!file.exists(), "the record is unlinked");
    assert_eq!(server.pidfds(), Vec::<i64>::new(), "no pidfd outlives it");
}

#[tokio::test]
async fn a_capsule_killed_while_a_listener_reads_is_gone_and_removed_without_waiting_for_a_pass() {
    a_killed_capsule_is_reported_gone_and_removed_without_a_pass(User::Me).await;
}

#[tokio::test]
#[ignore = "needs root: serves as uid 65534 (setpriv) beside a root-owned capsule"]
async fn another_users_capsule_killed_while_a_listener_reads_is_gone_and_removed_at_once() {
    a_killed_capsule_is_reported_gone_and_removed_without_a_pass(User::Nobody).await;
}

// ---------------------------------------------------------------------------------------------
// Where pidfd_open does not exist
// ---------------------------------------------------------------------------------------------

/// `python3 -c` calling `os.pidfd_open` on itself: what it printed (`opened`, or the errno's
/// name).
fn pidfd_open_in_python(cmd: Command) -> String {
    let done = run(cmd);
    assert_eq!(done.status.code(), Some(0), "{done:#?}");
    done.stdout.trim().to_owned()
}

const OPEN_OWN_PIDFD: &str = "import errno, os\n\
    try:\n    os.pidfd_open(os.getpid()); print('opened')\n\
    except OSError as e:\n    print(errno.errorcode[e.errno])\n";

#[test]
fn the_seccomp_helper_makes_pidfd_open_fail_with_enosys_and_only_under_it() {
    let mut plain = Command::new("python3");
    plain.args(["-c", OPEN_OWN_PIDFD]);
    assert_eq!(
        pidfd_open_in_python(plain),
        "opened",
        "this kernel has pidfds, so the fallback tests are not vacuous"
    );
    let mut python = Command::new("python3");
    python.args(["-c", OPEN_OWN_PIDFD]);
    assert_eq!(pidfd_open_in_python(without_pidfd_open(python)), "ENOSYS");
    let mut refused = Command::new("python3");
    refused.arg(NO_PIDFD);
    let done = run(refused);
    assert_eq!(
        done.status.code(),
        Some(1),
        "no program, no exec: {done:#?}"
    );
}

#[tokio::test]
async fn without_pidfd_open_the_registry_says_so_once_and_still_tells_live_from_gone() {
    let home = Home::new();
    let server = Server::start_without_pidfd_open(&home, &["--events-interval", "100ms"]);
    assert_eq!(
        seccomp_mode(server.binary.pid()),
        Some(2),
        "the registry runs under the filter"
    );
    let alive = TestProcess::sleeping();
    let other_token = TestProcess::sleeping();
    let exited = ExitedChild::spawn();
    let mut capsule = CapsuleProcess::single();
    let live = alive.record().no_door();
    let mistaken = other_token
        .record()
        .process_start(&wrong_start_token(other_token.pid()))
        .no_door();
    let dead = exited.record().no_door();
    let door = capsule.record();
    for record in [&live, &mistaken, &dead, &door] {
        home.write(record);
    }

    for query in ["", "?probe=false", "", "?probe=false"] {
        let listing = server.list(query).await;
        listing.assert_process(&live.session_id(), "alive");
        listing.assert_process(&door.session_id(), "alive");
        listing.assert_process(&dead.session_id(), "gone");
        assert_eq!(
            listing.reason(&dead.session_id()),
            format!("no process holds pid {}", exited.pid)
        );
        listing.assert_process(&mistaken.session_id(), "gone");
        assert_eq!(
            listing.reason(&mistaken.session_id()),
            format!(
                "pid {} is held by a process that started at another time",
                other_token.pid()
            )
        );
        if query.is_empty() {
            assert_eq!(listing.liveness(&door.session_id())["state"], "live");
        }
        assert_eq!(
            server.pidfds(),
            Vec::<i64>::new(),
            "no pidfd without pidfd_open"
        );
    }

    let (mut events, snapshot) = server.listen().await;
    let id = door.session_id();
    assert_eq!(state_in_snapshot(&snapshot, &id), "live", "{snapshot:?}");
    capsule.send_signal(9);
    capsule.wait_exit(DEADLINE);
    let changed = next_about(&mut events, &id).await;
    assert_eq!(changed.name, "session.changed", "{changed:?}");
    assert_eq!(changed.data["new_state"], "gone", "{changed:?}");
    let removed = next_about(&mut events, &id).await;
    assert_eq!(removed.name, "session.removed", "{removed:?}");
    assert_eq!(removed.data["reason"], "pruned", "{removed:?}");
    assert!(!home.running_dir().join(door.file_name()).exists());
    assert_eq!(server.pidfds(), Vec::<i64>::new());

    drop(events);
    let (status, stderr) = server.binary.stop_with(Signal::TERM);
    assert!(status.success(), "{status}: {stderr}");
    let said = stderr
        .lines()
        .filter(|line| line.contains("pidfds are unavailable"))
        .count();
    assert_eq!(said, 1, "said once, whatever read how often:\n{stderr}");
    assert!(
        !stderr.contains("cannot pin every live process"),
        "{stderr}"
    );
}

// ---------------------------------------------------------------------------------------------
// Too few descriptors to pin them all
// ---------------------------------------------------------------------------------------------

/// The open-files limit the registry gets: enough to serve, too few to pin [`PROCESSES`].
const FEW_DESCRIPTORS: u32 = 64;
/// How many live processes the records name.
const PROCESSES: usize = 48;

#[tokio::test]
async fn with_too_few_descriptors_the_rest_are_read_through_proc_and_it_is_said_once() {
    let home = Home::new();
    let server = Server::start_with_open_files_limit(&home, FEW_DESCRIPTORS);
    let mut processes: Vec<TestProcess> = (0..PROCESSES).map(|_| TestProcess::sleeping()).collect();
    let records: Vec<RecordJson> = processes.iter().map(|p| p.record().no_door()).collect();
    for record in &records {
        home.write(record);
    }

    for query in ["", "?probe=false"] {
        let listing = server.list(query).await;
        for record in &records {
            listing.assert_process(&record.session_id(), "alive");
        }
    }
    let pinned = server.pidfds();
    assert!(
        !pinned.is_empty() && pinned.len() < PROCESSES,
        "some processes pinned, not all {PROCESSES}: {pinned:?}"
    );

    // One pinned process and one read through /proc die; both read gone, the others alive.
    let pinned_at = processes
        .iter()
        .position(|p| pinned.contains(&i64::from(p.pid())))
        .expect("a pinned process");
    let unpinned_at = processes
        .iter()
        .position(|p| !pinned.contains(&i64::from(p.pid())))
        .expect("a process read through /proc");
    for at in [pinned_at, unpinned_at] {
        kill_child(processes[at].pid());
        processes[at].wait_exit(DEADLINE);
    }
    for query in ["", "?probe=false"] {
        let listing = server.list(query).await;
        for (at, record) in records.iter().enumerate() {
            let expected = if at == pinned_at || at == unpinned_at {
                "gone"
            } else {
                "alive"
            };
            listing.assert_process(&record.session_id(), expected);
        }
    }

    let (status, stderr) = server.binary.stop_with(Signal::TERM);
    assert!(status.success(), "{status}: {stderr}");
    let said = stderr
        .lines()
        .filter(|line| line.contains("cannot pin every live process"))
        .count();
    assert_eq!(said, 1, "said once, whatever read how often:\n{stderr}");
    assert!(!stderr.contains("pidfds are unavailable"), "{stderr}");
}
