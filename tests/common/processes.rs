//! Processes the tests own: live children of several shapes ([`TestProcess`]), a child that
//! exited and is not reaped yet ([`Zombie`]), the pid of one that was reaped ([`ExitedChild`]),
//! a real capsule serving doors ([`CapsuleProcess`]), and readers of their `/proc` entries.
//!
//! Invariant: every pid a test's record names is one of these or the test process itself, so
//! nothing else on the machine can ever be signalled; each live one is killed and reaped on
//! drop, also when the test fails half-way.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use murmur_registry::running::process_start_token;

use super::{DEADLINE, RecordJson, session_id, wait_until, within};

// ---------------------------------------------------------------------------------------------
// Reading /proc
// ---------------------------------------------------------------------------------------------

/// Field 3 (the state letter) of `/proc/<pid>/stat`, or `None` when there is no such entry.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_ascii_whitespace().next()?.chars().next()
}

/// Whether `pid` ignores signal `signo`, from the `SigIgn` mask of `/proc/<pid>/status`
/// (`false` when there is no such entry).
pub fn ignores_signal(pid: u32, signo: u32) -> bool {
    signal_mask_has(pid, "SigIgn", signo)
}

/// Whether bit `signo` is set in the `mask` line (`SigIgn`, `SigCgt` …) of
/// `/proc/<pid>/status`; `false` when there is no such entry.
fn signal_mask_has(pid: u32, mask: &str, signo: u32) -> bool {
    status_line(pid, mask)
        .and_then(|bits| u64::from_str_radix(bits.trim(), 16).ok())
        .is_some_and(|bits| bits & (1 << (signo - 1)) != 0)
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

fn spawn_quiet(program: &str, args: &[&str]) -> Child {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Live processes
// ---------------------------------------------------------------------------------------------

/// A live child process this test owns, in one of the shapes its constructors name. Each
/// constructor returns once `/proc` shows the shape (never after a sleep). Killed and reaped on
/// drop: SIGKILL ends every shape, a whole thread group included.
pub struct TestProcess {
    child: Child,
}

impl TestProcess {
    /// A plain live child: `sleep 1000`.
    pub fn sleeping() -> Self {
        Self::owning(spawn_quiet("sleep", &["1000"]))
    }

    /// A child that ignores SIGTERM, so only SIGKILL ends it: `sh -c "trap '' TERM; exec sleep
    /// 1000"` (`SIG_IGN` survives the `exec`). Ready once it runs `sleep` with SIGTERM ignored.
    pub fn ignoring_term() -> Self {
        let spawned = Self::shell("trap '' TERM; exec sleep 1000");
        let pid = spawned.pid();
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

    /// `python3 -c <script>`, for shapes `sleep` cannot take. The script must not end by itself.
    pub fn python(script: &str) -> Self {
        Self::owning(spawn_quiet("python3", &["-c", script]))
    }

    /// `sh -c <script>`. The script must not end by itself.
    pub fn shell(script: &str) -> Self {
        Self::owning(spawn_quiet("sh", &["-c", script]))
    }

    /// A live process whose main thread has exited while another thread runs on: its leader
    /// shows `Z` in `/proc/<pid>/stat`, yet the process is alive and can be signalled (`python3`
    /// starts a sleeping thread, then ends its main thread with `pthread_exit`).
    pub fn zombie_leader() -> Self {
        Self::zombie_leader_running(ZOMBIE_LEADER_SCRIPT)
    }

    /// [`TestProcess::zombie_leader`] whose live thread names itself with bytes that are not
    /// UTF-8 (`prctl(PR_SET_NAME)` takes any bytes), as its `/proc` stat line then shows.
    pub fn zombie_leader_with_non_utf8_thread_name() -> Self {
        let leader = Self::zombie_leader_running(ZOMBIE_LEADER_SCRIPT_NON_UTF8_NAME);
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

    fn zombie_leader_running(script: &str) -> Self {
        let leader = Self::python(script);
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

    /// A root-owned `python3` whose *real* uid is 65534 until SIGTERM arrives, and 0 after: the
    /// kernel lets a sender signal a process whose real uid is its own, so uid 65534 may deliver
    /// SIGTERM to it and is refused anything after (EPERM). Needs root.
    pub fn uid_flipping() -> Self {
        let flipping = Self::python(UID_FLIPPING_SCRIPT);
        let pid = flipping.pid();
        wait_until(
            &format!("pid {pid} runs as real uid 65534 with SIGTERM caught"),
            DEADLINE,
            || real_uid(pid) == Some(65534) && signal_mask_has(pid, "SigCgt", 15),
        );
        flipping
    }

    /// Owned before any wait for readiness, so a child that never gets ready is still reaped.
    fn owning(child: Child) -> Self {
        Self { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its real start token (a zombie leader's is the leader's, which `/proc` keeps while the
    /// process lives).
    pub fn start_token(&self) -> String {
        process_start_token(self.pid()).expect("a live child's start token")
    }

    /// A record naming this process with its real start token.
    pub fn record(&self) -> RecordJson {
        RecordJson::fresh().process(self.pid(), &self.start_token())
    }

    /// Whether the process has not exited (`waitpid(WNOHANG)`, which also proves it is not a
    /// zombie, and reports a thread group only once its last thread is gone).
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Reap the process once it exits, failing the test if it has not within `deadline`.
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let mut status = None;
        wait_until("the child exits", deadline, || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("set when the wait ends")
    }
}

impl Drop for TestProcess {
    fn drop(&mut self) {
        // After a successful wait std knows the child is reaped and sends nothing.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const ZOMBIE_LEADER_SCRIPT: &str = "import threading,time,ctypes; \
    t=threading.Thread(target=time.sleep,args=(1000,)); t.start(); \
    ctypes.CDLL(None).pthread_exit(None)";

const ZOMBIE_LEADER_SCRIPT_NON_UTF8_NAME: &str = "import threading,time,ctypes; \
    libc=ctypes.CDLL(None); \
    t=threading.Thread(target=lambda: (libc.prctl(15, b'\\xff\\xfew\\x80', 0, 0, 0), time.sleep(1000))); \
    t.start(); libc.pthread_exit(None)";

const UID_FLIPPING_SCRIPT: &str = "import os, signal, time\n\
    os.setresuid(65534, 0, 0)\n\
    signal.signal(signal.SIGTERM, lambda *_: os.setresuid(0, 0, 0))\n\
    while True: time.sleep(1000)\n";

// ---------------------------------------------------------------------------------------------
// Processes that ended
// ---------------------------------------------------------------------------------------------

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
// A real capsule
// ---------------------------------------------------------------------------------------------

/// A real capsule stand-in: one `python3` process (`tests/fixtures/capsule.py --card a2a`)
/// serving an A2A v1.0 card for each of its sessions, each on its own `127.0.0.1` port, like
/// `mur`'s doors. Ready once every door listens (the script says so on stdout). Killed and
/// reaped on drop. Signals keep their default dispositions: SIGTERM ends it.
///
/// SIGSTOP freezes every door (the kernel still accepts connections, nothing answers) and
/// SIGCONT thaws them, which is how a stopped capsule looks from outside.
pub struct CapsuleProcess {
    process: TestProcess,
    doors: Vec<(String, String)>,
}

impl CapsuleProcess {
    /// A capsule process holding one door for each of `session_ids`.
    pub fn spawn(session_ids: &[String]) -> Self {
        Self::spawn_with(Command::new("python3"), session_ids)
    }

    /// [`CapsuleProcess::spawn`], run by `command`: `python3`, or something that execs it (so
    /// the pid is python's), e.g. in another network namespace, whose loopback its doors use.
    pub fn spawn_with(mut command: Command, session_ids: &[String]) -> Self {
        use std::io::BufRead;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/capsule.py");
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
        let process = TestProcess::owning(child);
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
        Self { process, doors }
    }

    /// A capsule process with one door, for a fresh session id.
    pub fn single() -> Self {
        Self::spawn(&[session_id()])
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
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
        let token = self.process.start_token();
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

    /// Whether the process has not exited (see [`TestProcess::is_running`]).
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Reap the process once it exits, failing the test if it has not within `deadline`.
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        self.process.wait_exit(deadline)
    }
}
