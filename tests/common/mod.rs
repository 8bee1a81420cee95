//! Shared fixtures for the integration tests: real files, real processes, real sockets.
//!
//! Every test builds its own world from these pieces and tears it down on drop:
//!
//! - **Running directories**: [`temp_dir`] gives each test its own [`TempDir`]; nothing here
//!   reads `HOME` or touches `~/.murmur`.
//! - **Session ids**: [`session_id`] hands out distinct ids shaped like murmur's
//!   (`ses_` + 32 lowercase hex), each one sorting after (newer than) the one before it.
//! - **Record files**: [`RecordJson`] builds a record as raw JSON and writes it with `std::fs`,
//!   so a test can also write what no murmur writes: missing keys, wrong types, unknown keys,
//!   secrets, a name that disagrees with the session id. [`write_raw`] writes arbitrary bytes.
//! - **Processes**: [`SleepingChild`] (a live `sleep 1000`, killed and reaped on drop),
//!   [`TermIgnoringChild`] (the same, ignoring SIGTERM, so only SIGKILL ends it),
//!   [`python_child`] (a live `python3 -c <script>`, for shapes `sleep` cannot take),
//!   [`ZombieLeader`] (a live process whose main thread has exited: its leader shows `Z` while
//!   another thread runs), [`UidFlippingChild`] (uid 65534 may SIGTERM it, and nothing after),
//!   [`ExitedChild`] (a child that exited and was reaped: its pid is free),
//!   [`Zombie`] (a child that exited and is not reaped yet), [`CapsuleProcess`] (a real
//!   `python3` process, `tests/fixtures/capsule.py`, serving a door for each of its sessions,
//!   as `mur` does). Every pid a record names in the
//!   tests is one of these or the test process itself, so nothing else on the machine can ever
//!   be signalled.
//! - **Doors**: [`DoorServer`] serves a hand-written HTTP/1.1 door on `127.0.0.1:0` in one of the
//!   [`DoorMode`]s (spec card, A2A v1.0 card, silent, garbage, HTTP 500, authenticated …),
//!   optionally after a delay, and records every request it received ([`Received`]).
//!
//! Synchronisation is by evidence, never by sleeping: a state is awaited by polling the thing
//! itself under a generous deadline ([`wait_until`], [`within`], [`DEADLINE`]).
//!
//! - **The binary**: [`binary`] runs `murmur-registry` itself as a separate process, for the
//!   tests of its command line and of `serve`.
//! - **The server in-process**: [`server`] serves the real app on `127.0.0.1:0` over its own
//!   token file and running directory ([`server::TestServer`]), shut down on drop.
//!
//! Use it from a test file with `mod common;`. It relies on running as root only where a test
//! says so (e.g. `chown` to another uid); everything else works unprivileged.

// Each test binary uses its own subset of these fixtures.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use murmur_registry::running::{MURMUR_CAPSULE_EXTENSION, RunningRecord, process_start_token};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

pub mod binary;
pub mod server;

/// The upper bound for anything a test waits on. Generous on purpose: it is never how long a
/// test takes, only how long a broken one takes to fail instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Directories and files
// ---------------------------------------------------------------------------------------------

/// A fresh, private (0700, as murmur makes its running directory) temporary directory for one
/// test (a running directory, or a fake home).
pub fn temp_dir() -> TempDir {
    let dir = tempfile::Builder::new()
        .prefix("murmur-registry-test-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .expect("create a temporary directory");
    assert_eq!(mode_of(dir.path()), 0o700, "a private test directory");
    dir
}

/// The permission bits of `path` (not following a symlink at its last component).
pub fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .mode()
        & 0o7777
}

/// What a directory entry is, as [`dir_snapshot`] records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySnapshot {
    /// `file`, `dir`, `symlink`, `fifo` or `other`.
    pub kind: &'static str,
    pub inode: u64,
    pub mode: u32,
    pub len: u64,
    pub modified: Option<SystemTime>,
    /// The link's target, for a symlink.
    pub target: Option<PathBuf>,
}

/// Every entry of `dir` by name, with enough detail to notice any change a reader could make
/// (a removal, a replacement, a chmod, a write), without opening anything.
pub fn dir_snapshot(dir: &Path) -> BTreeMap<String, EntrySnapshot> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.expect("directory entry");
            let meta = std::fs::symlink_metadata(entry.path()).expect("lstat entry");
            let ft = meta.file_type();
            let kind = if ft.is_file() {
                "file"
            } else if ft.is_dir() {
                "dir"
            } else if ft.is_symlink() {
                "symlink"
            } else if std::os::unix::fs::FileTypeExt::is_fifo(&ft) {
                "fifo"
            } else {
                "other"
            };
            let target = ft
                .is_symlink()
                .then(|| std::fs::read_link(entry.path()).expect("readlink"));
            let snapshot = EntrySnapshot {
                kind,
                inode: meta.ino(),
                mode: meta.mode() & 0o7777,
                len: meta.len(),
                modified: meta.modified().ok(),
                target,
            };
            (entry.file_name().to_string_lossy().into_owned(), snapshot)
        })
        .collect()
}

/// Write `bytes` to `dir/name` as a plain file, mode 0600 (what murmur gives a record).
///
/// The mode is set through the open file, not the path: a registry running beside the test
/// may read the record and prune it the moment it exists.
pub fn write_raw(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(bytes.as_ref())?;
        // An existing file keeps its mode through `open`.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
    };
    write().unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// Replace `dir/name` the way a writer does: stage a new file beside it, rename it over the name.
/// The file under the name afterwards is a different inode from the one before.
pub fn replace_by_rename(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let staged = write_raw(dir, &format!(".{name}.replacement.tmp"), bytes);
    let path = dir.join(name);
    std::fs::rename(&staged, &path).expect("rename the replacement into place");
    path
}

/// Create a FIFO at `path` (mode 0600).
pub fn make_fifo(path: &Path) {
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

/// How many bytes the *calling thread* has read through `read(2)`-like calls so far
/// (`rchar` of `/proc/thread-self/io`). Per thread, so tests running in parallel do not
/// disturb it; reading the file itself adds a few hundred bytes.
pub fn thread_bytes_read() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("read /proc/thread-self/io");
    io.lines()
        .find_map(|line| line.strip_prefix("rchar:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("rchar in /proc/thread-self/io")
}

// ---------------------------------------------------------------------------------------------
// Session ids and records
// ---------------------------------------------------------------------------------------------

/// A distinct session id shaped like murmur's: `ses_` + 32 lowercase hex digits.
///
/// Like murmur's UUIDv7 ids, each id sorts after every id handed out before it in this process
/// (a fixed time prefix, then a counter), so "newest first" is "descending".
pub fn session_id() -> String {
    static EPOCH_MS: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let epoch = *EPOCH_MS.get_or_init(|| {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_millis();
        u64::try_from(ms).expect("milliseconds fit u64") & 0xffff_ffff_ffff
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("ses_{epoch:012x}7{n:019x}")
}

/// The nine keys every generation of record carries.
pub const NINE_FIELDS: [&str; 9] = [
    "session_id",
    "url",
    "pid",
    "process_start",
    "capsule_name",
    "capsule_version",
    "workdir",
    "outlives_launcher",
    "started_at",
];

/// The start token of the test process itself: the one a record written by it would carry.
pub fn own_start_token() -> String {
    process_start_token(std::process::id()).expect("this process reads its own start token")
}

/// A start token that is certainly not `pid`'s: its real token plus one.
pub fn wrong_start_token(pid: u32) -> String {
    let real: u64 = process_start_token(pid)
        .expect("the start token of a live pid")
        .parse()
        .expect("start tokens are decimal on Linux");
    (real + 1).to_string()
}

/// A record as the raw JSON object a murmur writer would put on disk.
///
/// Starts as a spec-generation record (the nine fields) naming **the test process itself** with
/// its real start token, so by default layers 1 and 2 read it as alive and nothing can ever be
/// signalled through it (the registry refuses to signal itself). The door defaults to
/// `127.0.0.1:1`, where nothing listens. Every key can be replaced, removed or added.
#[derive(Debug, Clone)]
pub struct RecordJson {
    fields: serde_json::Map<String, Value>,
}

impl RecordJson {
    /// A nine-field record for `session_id`, naming the test process.
    pub fn new(session_id: &str) -> Self {
        let Value::Object(fields) = json!({
            "session_id": session_id,
            "url": "127.0.0.1:1",
            "pid": std::process::id(),
            "process_start": own_start_token(),
            "capsule_name": "test-capsule",
            "capsule_version": "0.1.0",
            "workdir": format!("/tmp/murmur-test/{session_id}"),
            "outlives_launcher": false,
            "started_at": "2026-11-30T04:52:00Z",
        }) else {
            unreachable!("a JSON object literal")
        };
        Self { fields }
    }

    /// A record with a fresh [`session_id`].
    pub fn fresh() -> Self {
        Self::new(&session_id())
    }

    /// The session id this record names.
    pub fn session_id(&self) -> String {
        self.fields["session_id"]
            .as_str()
            .expect("session_id is a string here")
            .to_owned()
    }

    /// The file name murmur would give it: `<session_id>.json`.
    pub fn file_name(&self) -> String {
        format!("{}.json", self.session_id())
    }

    /// Set any key to any JSON value (including unknown keys and wrong types).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(key.to_owned(), value.into());
        self
    }

    /// Remove a key.
    pub fn without(mut self, key: &str) -> Self {
        self.fields.remove(key);
        self
    }

    /// The process the record names.
    pub fn pid(self, pid: u32) -> Self {
        self.set("pid", pid)
    }

    /// The recorded start token.
    pub fn process_start(self, token: &str) -> Self {
        self.set("process_start", token)
    }

    /// The process and its start token.
    pub fn process(self, pid: u32, token: &str) -> Self {
        self.pid(pid).process_start(token)
    }

    /// The door's `host:port`.
    pub fn url(self, url: impl Into<String>) -> Self {
        self.set("url", url.into())
    }

    /// `"url": null`: a script capsule with no door.
    pub fn no_door(self) -> Self {
        self.set("url", Value::Null)
    }

    /// The operator bearer token of an authenticated door.
    pub fn door_token(self, token: &str) -> Self {
        self.set("door_token", token)
    }

    /// The record as a JSON value.
    pub fn to_json(&self) -> Value {
        Value::Object(self.fields.clone())
    }

    /// The record's bytes, as a writer would put them on disk.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(&self.fields).expect("serialize a JSON map")
    }

    /// Parse the bytes with the crate's parser, as a record built in memory (no file behind it).
    pub fn parse(&self) -> RunningRecord {
        RunningRecord::parse(&self.to_bytes()).expect("the record parses")
    }

    /// Write it as `<dir>/<session_id>.json`, mode 0600; answers the path.
    pub fn write_in(&self, dir: &Path) -> PathBuf {
        write_raw(dir, &self.file_name(), self.to_bytes())
    }

    /// Write it under another file name (e.g. one that disagrees with its session id).
    pub fn write_as(&self, dir: &Path, file_name: &str) -> PathBuf {
        write_raw(dir, file_name, self.to_bytes())
    }
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// Poll `done` until it holds, panicking with `what` after `deadline`. The pause between polls
/// only paces the loop; correctness never depends on it.
pub fn wait_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < deadline,
            "gave up after {deadline:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Field 3 (the state letter) of `/proc/<pid>/stat`, or `None` when there is no such entry.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_ascii_whitespace().next()?.chars().next()
}

/// Whether `pid` ignores signal `signo`, from the `SigIgn` mask of `/proc/<pid>/status`
/// (`false` when there is no such entry).
pub fn ignores_signal(pid: u32, signo: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signo - 1)) != 0)
}

/// Run `f` on its own thread and answer its result, failing the test if it takes longer than
/// `deadline` (for calls that would hang if the code under test were wrong, e.g. opening a FIFO).
pub fn within<T: Send + 'static>(
    what: &str,
    deadline: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(deadline) {
        Ok(value) => value,
        Err(e) => panic!("{what} did not finish within {deadline:?}: {e}"),
    }
}

fn spawn_quiet(program: &str, args: &[&str]) -> Child {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"))
}

/// A live child process (`sleep 1000`) that this test owns. Killed and reaped on drop.
pub struct SleepingChild {
    child: Child,
}

impl SleepingChild {
    pub fn spawn() -> Self {
        Self {
            child: spawn_quiet("sleep", &["1000"]),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its real start token.
    pub fn start_token(&self) -> String {
        process_start_token(self.pid()).expect("a live child's start token")
    }

    /// A record naming this child with its real start token.
    pub fn record(&self) -> RecordJson {
        RecordJson::fresh().process(self.pid(), &self.start_token())
    }

    /// Whether the child has not exited (checked with `waitpid(WNOHANG)`, which also proves it
    /// is not a zombie: a zombie would be reaped and reported here).
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Reap the child once it exits, failing the test if it has not within `deadline`.
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let mut status = None;
        wait_until("the child exits", deadline, || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("set when the wait ends")
    }
}

impl Drop for SleepingChild {
    fn drop(&mut self) {
        // After a successful wait std knows the child is reaped and sends nothing.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A live child that ignores SIGTERM, so only SIGKILL ends it: `sh -c "trap '' TERM; exec
/// sleep 1000"` (`SIG_IGN` survives the `exec`). Ready once it runs `sleep` with SIGTERM
/// ignored, as `/proc` shows. Killed and reaped on drop.
pub struct TermIgnoringChild {
    sleeping: SleepingChild,
}

impl TermIgnoringChild {
    pub fn spawn() -> Self {
        let child = spawn_quiet("sh", &["-c", "trap '' TERM; exec sleep 1000"]);
        let pid = child.id();
        // Owned before the wait, so a child that never gets ready is still killed and reaped.
        let spawned = Self {
            sleeping: SleepingChild { child },
        };
        // Wait for the evidence that SIGTERM is ignored, not for time to pass.
        wait_until(
            "the child runs sleep with SIGTERM ignored",
            DEADLINE,
            || {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                comm.trim() == "sleep" && ignores_signal(pid, 15)
            },
        );
        spawned
    }

    pub fn pid(&self) -> u32 {
        self.sleeping.pid()
    }

    /// A record naming this child with its real start token.
    pub fn record(&self) -> RecordJson {
        self.sleeping.record()
    }

    /// Reap the child once it exits, failing the test if it has not within `deadline`.
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        self.sleeping.wait_exit(deadline)
    }
}

/// A live `python3 -c <script>` child, for process shapes `sleep` cannot take. The script must
/// not end by itself. Killed and reaped on drop, like any [`SleepingChild`].
pub fn python_child(script: &str) -> SleepingChild {
    SleepingChild {
        child: spawn_quiet("python3", &["-c", script]),
    }
}

/// A real capsule stand-in: one `python3` process (`tests/fixtures/capsule.py --card a2a`)
/// serving an A2A v1.0 card for each of its sessions, each on its own `127.0.0.1` port, like
/// `mur`'s doors. Ready once every door listens (the script says so on stdout). Killed and
/// reaped on drop. Signals keep their default dispositions: SIGTERM ends it.
///
/// SIGSTOP freezes every door (the kernel still accepts connections, nothing answers) and
/// SIGCONT thaws them, which is how a stopped capsule looks from outside.
pub struct CapsuleProcess {
    child: SleepingChild,
    doors: Vec<(String, String)>,
}

impl CapsuleProcess {
    /// A capsule process holding one door for each of `session_ids`.
    pub fn spawn(session_ids: &[String]) -> Self {
        use std::io::BufRead;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/capsule.py");
        let mut command = Command::new("python3");
        command.arg(script).args(["--card", "a2a"]);
        for session_id in session_ids {
            command.args(["--session", session_id]);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn python3 {script}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        // Owned before the wait, so a capsule that never gets ready is still killed and reaped.
        let child = SleepingChild { child };
        let count = session_ids.len();
        let doors = within("the capsule's doors listen", DEADLINE, move || {
            let mut doors = Vec::new();
            for line in std::io::BufReader::new(stdout).lines().take(count) {
                let line = line.expect("read the capsule's stdout");
                let mut words = line.split(' ');
                let (Some("ready"), Some(port), Some(session_id)) =
                    (words.next(), words.next(), words.next())
                else {
                    panic!("\"ready <port> <session_id>\", got {line:?}");
                };
                doors.push((session_id.to_owned(), format!("127.0.0.1:{port}")));
            }
            doors
        });
        assert_eq!(doors.len(), session_ids.len(), "one door per session");
        Self { child, doors }
    }

    /// A capsule process with one door, for a fresh session id.
    pub fn single() -> Self {
        Self::spawn(&[session_id()])
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The session id of the first door.
    pub fn session_id(&self) -> String {
        self.doors[0].0.clone()
    }

    /// The `host:port` of the first door.
    pub fn url(&self) -> String {
        self.doors[0].1.clone()
    }

    /// The record `mur` would write for the first door: this process, its real start token,
    /// the door's address.
    pub fn record(&self) -> RecordJson {
        self.records().remove(0)
    }

    /// One record per door, in the order the session ids were given.
    pub fn records(&self) -> Vec<RecordJson> {
        let token = self.child.start_token();
        self.doors
            .iter()
            .map(|(session_id, url)| {
                RecordJson::new(session_id)
                    .process(self.pid(), &token)
                    .url(url.clone())
            })
            .collect()
    }

    /// Send `signo` to the capsule process (the test's own doing, not the registry's).
    pub fn send_signal(&self, signo: i32) {
        let status = Command::new("kill")
            .arg(format!("-{signo}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signo} {}", self.pid());
    }

    /// Whether the process has not exited (see [`SleepingChild::is_running`]).
    pub fn is_running(&mut self) -> bool {
        self.child.is_running()
    }

    /// Reap the process once it exits, failing the test if it has not within `deadline`.
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        self.child.wait_exit(deadline)
    }
}

/// A live `sh -c <script>` child. The script must not end by itself. Killed and reaped on
/// drop, like any [`SleepingChild`].
pub fn shell_child(script: &str) -> SleepingChild {
    SleepingChild {
        child: spawn_quiet("sh", &["-c", script]),
    }
}

/// The states of every task (thread) of `pid`, from `/proc/<pid>/task/*/stat`; empty when
/// there is no such process.
pub fn task_states(pid: u32) -> Vec<char> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| {
            // Bytes: a thread's name may be any bytes, UTF-8 or not.
            let stat = std::fs::read(task.ok()?.path().join("stat")).ok()?;
            let after_comm = &stat[stat.iter().rposition(|b| *b == b')')? + 1..];
            after_comm
                .split(u8::is_ascii_whitespace)
                .find(|field| !field.is_empty())
                .and_then(|state| state.first())
                .map(|state| char::from(*state))
        })
        .collect()
}

/// A live process whose main thread has exited while another thread runs on: its leader shows
/// `Z` in `/proc/<pid>/stat`, yet the process is alive and can be signalled. `python3` starts a
/// thread that sleeps, then ends its main thread with `pthread_exit`. Ready once the leader is
/// `Z` and another task is not. Killed (SIGKILL ends the whole thread group) and reaped on drop.
pub struct ZombieLeader {
    child: SleepingChild,
}

impl ZombieLeader {
    pub const SCRIPT: &str = "import threading,time,ctypes; \
        t=threading.Thread(target=time.sleep,args=(1000,)); t.start(); \
        ctypes.CDLL(None).pthread_exit(None)";

    /// The same, but the thread that lives on names itself with bytes that are not UTF-8
    /// (`prctl(PR_SET_NAME)` takes any bytes), as its `/proc` stat line then shows.
    pub const SCRIPT_NON_UTF8_NAME: &str = "import threading,time,ctypes; \
        libc=ctypes.CDLL(None); \
        t=threading.Thread(target=lambda: (libc.prctl(15, b'\\xff\\xfew\\x80', 0, 0, 0), time.sleep(1000))); \
        t.start(); libc.pthread_exit(None)";

    pub fn spawn() -> Self {
        Self::spawn_script(Self::SCRIPT)
    }

    /// A zombie leader whose live thread's name is not UTF-8.
    pub fn spawn_with_non_utf8_thread_name() -> Self {
        let leader = Self::spawn_script(Self::SCRIPT_NON_UTF8_NAME);
        let pid = leader.pid();
        wait_until(
            &format!("pid {pid}'s live thread to take a name that is not UTF-8"),
            DEADLINE,
            || {
                std::fs::read_dir(format!("/proc/{pid}/task"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|task| std::fs::read(task.path().join("comm")).ok())
                    .any(|name| std::str::from_utf8(&name).is_err())
            },
        );
        leader
    }

    fn spawn_script(script: &str) -> Self {
        // Owned before the wait, so a child that never gets ready is still killed and reaped.
        let leader = Self {
            child: python_child(script),
        };
        let pid = leader.pid();
        wait_until(
            &format!("pid {pid}'s leader is a zombie while another thread lives"),
            DEADLINE,
            || {
                let tasks = task_states(pid);
                proc_state(pid) == Some('Z') && tasks.iter().any(|s| !matches!(s, 'Z' | 'X'))
            },
        );
        leader
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Its real start token (the leader's, which `/proc` keeps while the process lives).
    pub fn start_token(&self) -> String {
        self.child.start_token()
    }

    /// A record naming this process with its real start token.
    pub fn record(&self) -> RecordJson {
        self.child.record()
    }

    /// Whether the process has not exited (`waitpid(WNOHANG)`: a thread group is reported only
    /// once its last thread is gone).
    pub fn is_running(&mut self) -> bool {
        self.child.is_running()
    }

    /// Reap the process once it exits, failing the test if it has not within `deadline`.
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        self.child.wait_exit(deadline)
    }
}

/// One `Name:` line of `/proc/<pid>/status`, without the name; `None` when there is none.
pub fn status_line(pid: u32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::to_owned))
}

/// The real uid of `pid` (the first field of `Uid:` in `/proc/<pid>/status`).
pub fn real_uid(pid: u32) -> Option<u32> {
    status_line(pid, "Uid")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A root-owned `python3` whose *real* uid is 65534 until SIGTERM arrives, and 0 again after:
/// the kernel lets a sender signal a process whose real uid is its own, so uid 65534 may deliver
/// SIGTERM to it, and is refused anything after (EPERM). A stop by uid 65534 thus sends SIGTERM
/// and then cannot send SIGKILL. Ready once it runs as real uid 65534 with SIGTERM caught.
/// Needs root. Killed and reaped on drop.
pub struct UidFlippingChild {
    child: SleepingChild,
}

impl UidFlippingChild {
    pub const SCRIPT: &str = "import os, signal, time\n\
        os.setresuid(65534, 0, 0)\n\
        signal.signal(signal.SIGTERM, lambda *_: os.setresuid(0, 0, 0))\n\
        while True: time.sleep(1000)\n";

    pub fn spawn() -> Self {
        // Owned before the wait, so a child that never gets ready is still killed and reaped.
        let flipping = Self {
            child: python_child(Self::SCRIPT),
        };
        let pid = flipping.pid();
        wait_until(
            &format!("pid {pid} runs as real uid 65534 with SIGTERM caught"),
            DEADLINE,
            || {
                let caught = status_line(pid, "SigCgt")
                    .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
                    .is_some_and(|mask| mask & (1 << (15 - 1)) != 0);
                real_uid(pid) == Some(65534) && caught
            },
        );
        flipping
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// A record naming this process with its real start token.
    pub fn record(&self) -> RecordJson {
        self.child.record()
    }

    /// Whether the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child.is_running()
    }
}

/// A child that exited and was reaped: no process holds its pid any more (until the kernel
/// hands the number out again, which with sequential allocation takes a full cycle of pids).
#[derive(Debug, Clone)]
pub struct ExitedChild {
    pub pid: u32,
    /// The start token it had, read while it was still a zombie.
    pub start_token: String,
}

impl ExitedChild {
    pub fn spawn() -> Self {
        let zombie = Zombie::spawn();
        let exited = Self {
            pid: zombie.pid(),
            start_token: zombie.start_token.clone(),
        };
        drop(zombie); // reaps it
        exited
    }

    /// A record naming the reaped child with the token it had.
    pub fn record(&self) -> RecordJson {
        RecordJson::fresh().process(self.pid, &self.start_token)
    }
}

/// A child that has exited but is not reaped yet (state `Z`). Reaped on drop.
pub struct Zombie {
    child: Child,
    /// Its start token, read from its `/proc` entry while it is a zombie.
    pub start_token: String,
}

impl Zombie {
    /// Spawn `true` and wait (by polling `/proc/<pid>/stat`) until it is a zombie.
    pub fn spawn() -> Self {
        let child = spawn_quiet("true", &[]);
        let pid = child.id();
        wait_until(&format!("pid {pid} is a zombie"), DEADLINE, || {
            proc_state(pid) == Some('Z')
        });
        let start_token =
            process_start_token(pid).expect("a zombie's /proc entry has a start time");
        Self { child, start_token }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A record naming the zombie with its real start token.
    pub fn record(&self) -> RecordJson {
        RecordJson::fresh().process(self.pid(), &self.start_token)
    }
}

impl Drop for Zombie {
    fn drop(&mut self) {
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Doors
// ---------------------------------------------------------------------------------------------

/// The path of the public agent card.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// A spec-generation card: the session id at top level.
pub fn spec_card(session_id: &str) -> Value {
    json!({
        "name": "test-capsule",
        "version": "0.1.0",
        "session_id": session_id,
    })
}

/// An A2A v1.0 card naming `session_id` in the murmur capsule extension, preceded by a decoy
/// extension whose `sessionId` must not be taken.
pub fn a2a_card(session_id: &str) -> Value {
    json!({
        "protocolVersion": "1.0",
        "name": "test-capsule",
        "version": "0.1.0",
        "capabilities": {
            "streaming": true,
            "extensions": [
                {"uri": "https://example.invalid/another-extension",
                 "params": {"sessionId": "ses_decoy00000000000000000000000000"}},
                {"uri": MURMUR_CAPSULE_EXTENSION, "required": false,
                 "params": {"sessionId": session_id}},
            ],
        },
    })
}

/// The public card of an authenticated door: it names no session.
pub fn public_card_without_session() -> Value {
    json!({
        "protocolVersion": "1.0",
        "name": "test-capsule",
        "supportsAuthenticatedExtendedCard": true,
        "capabilities": {"extensions": [{"uri": MURMUR_CAPSULE_EXTENSION, "params": {}}]},
    })
}

/// How an authenticated door turns away a wrong or missing bearer token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// `401 Unauthorized`.
    Http401,
    /// `200` with a JSON-RPC error object.
    JsonRpcError,
    /// `200` with a JSON-RPC error whose message quotes the `Authorization` header it received
    /// (a careless door: its words must not carry the token into a reason).
    EchoingJsonRpcError,
}

/// What a [`DoorServer`] does with a request.
#[derive(Debug, Clone)]
pub enum DoorMode {
    /// `GET /.well-known/agent-card.json` answers [`spec_card`]; anything else is a 404.
    SpecCard(String),
    /// `GET /.well-known/agent-card.json` answers [`a2a_card`]; anything else is a 404.
    A2aCard(String),
    /// Accepts connections, reads the request, never answers.
    Silent,
    /// Answers `200` with a body that is not JSON.
    NotJson,
    /// Answers bytes that are not HTTP at all.
    NotHttp,
    /// Answers `500` — with a body that is a valid card for this session, so only the status
    /// can make the probe fail.
    ServerError(String),
    /// An authenticated door: `POST /` with JSON-RPC `GetExtendedAgentCard` and
    /// `Authorization: Bearer <token>` answers the [`a2a_card`] in `result`; a wrong or missing
    /// token is turned away as `rejection` says; `GET` of the public card answers
    /// [`public_card_without_session`].
    Authenticated {
        session_id: String,
        token: String,
        rejection: Rejection,
    },
}

/// One request a door received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Received {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A door on `127.0.0.1:<ephemeral>`, served on its own thread and runtime (so it works from
/// sync and async tests alike) until dropped. Every request is recorded before it is answered.
pub struct DoorServer {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DoorServer {
    /// A door answering at once.
    pub fn start(mode: DoorMode) -> Self {
        Self::start_slow(mode, Duration::ZERO)
    }

    /// A door that waits `delay` after reading each request before it answers.
    pub fn start_slow(mode: DoorMode, delay: Duration) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = listener.local_addr().expect("local address");
        let received = Arc::new(Mutex::new(Vec::new()));
        let (shutdown, mut stop) = oneshot::channel::<()>();
        let log = Arc::clone(&received);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("door runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    tokio::select! {
                        _ = &mut stop => break,
                        accepted = listener.accept() => {
                            if let Ok((stream, _)) = accepted {
                                let mode = mode.clone();
                                let log = Arc::clone(&log);
                                connections.spawn(serve_connection(stream, mode, delay, log));
                            }
                            while connections.try_join_next().is_some() {}
                        }
                    }
                }
                // Dropping the set aborts connections still held open (a silent door's).
            });
        });
        Self {
            addr,
            received,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The door as a record's `url`: `127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.addr.to_string()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().expect("request log").clone()
    }
}

impl Drop for DoorServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A `127.0.0.1:<port>` where nothing listens: a port bound and released at once.
pub fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    addr.to_string()
}

async fn serve_connection(
    mut stream: TcpStream,
    mode: DoorMode,
    delay: Duration,
    log: Arc<Mutex<Vec<Received>>>,
) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    log.lock().expect("request log").push(request.clone());
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let answer = match answer(&mode, &request) {
        Some(answer) => answer,
        None => {
            // Silent: hold the connection open until the door shuts down.
            std::future::pending::<()>().await;
            return;
        }
    };
    let _ = stream.write_all(&answer).await;
    let _ = stream.shutdown().await;
}

/// Read one HTTP/1.1 request: the head up to the blank line, then `Content-Length` bytes.
async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn http(status: &str, body: &[u8]) -> Vec<u8> {
    let mut answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(body);
    answer
}

fn ok_json(value: &Value) -> Vec<u8> {
    http("200 OK", value.to_string().as_bytes())
}

fn not_found() -> Vec<u8> {
    http("404 Not Found", br#"{"error":"not found"}"#)
}

/// The bytes a door in `mode` answers `request` with; `None` for a silent door.
fn answer(mode: &DoorMode, request: &Received) -> Option<Vec<u8>> {
    let is_card_get = request.method == "GET" && request.path == CARD_PATH;
    Some(match mode {
        DoorMode::Silent => return None,
        DoorMode::SpecCard(id) if is_card_get => ok_json(&spec_card(id)),
        DoorMode::A2aCard(id) if is_card_get => ok_json(&a2a_card(id)),
        DoorMode::SpecCard(_) | DoorMode::A2aCard(_) => not_found(),
        DoorMode::NotJson => http("200 OK", b"<html>this is not an agent card"),
        DoorMode::NotHttp => b"SSH-2.0-OpenSSH_9.6\r\n\x00\x01\x02 garbage".to_vec(),
        DoorMode::ServerError(id) => http(
            "500 Internal Server Error",
            spec_card(id).to_string().as_bytes(),
        ),
        DoorMode::Authenticated { .. } if is_card_get => ok_json(&public_card_without_session()),
        DoorMode::Authenticated {
            session_id,
            token,
            rejection,
        } => {
            if request.method != "POST" || request.path != "/" {
                return Some(not_found());
            }
            let call: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
            if call["jsonrpc"] != "2.0" || call["method"] != "GetExtendedAgentCard" {
                return Some(ok_json(&json!({
                    "jsonrpc": "2.0", "id": call["id"],
                    "error": {"code": -32601, "message": "method not found"},
                })));
            }
            let presented = request.header("authorization").unwrap_or("");
            if presented == format!("Bearer {token}") {
                ok_json(
                    &json!({"jsonrpc": "2.0", "id": call["id"], "result": a2a_card(session_id)}),
                )
            } else {
                match rejection {
                    Rejection::Http401 => http("401 Unauthorized", br#"{"error":"unauthorized"}"#),
                    Rejection::JsonRpcError => ok_json(&json!({
                        "jsonrpc": "2.0", "id": call["id"],
                        "error": {"code": -32001, "message": "unauthorized"},
                    })),
                    Rejection::EchoingJsonRpcError => ok_json(&json!({
                        "jsonrpc": "2.0", "id": call["id"],
                        "error": {"code": -32001, "message": format!("bad credentials: {presented}")},
                    })),
                }
            }
        }
    })
}

/// Fail unless nothing at all (not even a dangling symlink) exists at `path`.
pub fn assert_absent(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Ok(meta) => panic!("{} still exists ({:?})", path.display(), meta.file_type()),
        Err(e) => panic!("lstat {}: {e}", path.display()),
    }
}
