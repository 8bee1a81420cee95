//! Fixtures for the tests that run the `murmur-registry` binary itself as a separate process
//! (`tests/cli.rs`, `tests/serve_binary.rs`): a private temporary `HOME`, the command line
//! with its environment cleared (run as the test user, as uid 65534, as uid 65534 under a
//! `hidepid=2` `/proc`, or as the test user in a nested pid namespace), a finished run's
//! exit status, output and duration, and `serve` started in a `HOME` ([`ServedBinary::start`]).
//! Running as uid 65534 or in a new namespace needs root: tests that do are `#[ignore]`d.
//!
//! Every run is bounded by [`DEADLINE`]: a binary that does not exit by then is killed and
//! reaped, and the test fails. Use it from a test file with `use common::binary::*;` (or by
//! name) after `mod common;`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use super::{DEADLINE, RecordJson, ServedBinary};

pub use super::served::{drain, first_line};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_murmur-registry");

/// The unprivileged uid and gid (`nobody`) some tests run the binary as.
pub const NOBODY: u32 = 65534;

// ---------------------------------------------------------------------------------------------
// A private HOME
// ---------------------------------------------------------------------------------------------

/// A private temporary `HOME` (mode 0700) for one test.
pub struct Home {
    dir: TempDir,
}

impl Home {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("murmur-registry-home-")
            .tempdir()
            .expect("create a temporary HOME");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod HOME 0700");
        Self { dir }
    }

    /// A HOME owned by uid/gid 65534, for a binary run as that user (which creates what it
    /// needs below it itself).
    pub fn for_nobody() -> Self {
        let home = Self::new();
        chown_nobody(home.path());
        home
    }

    /// A HOME whose `~`, `~/.murmur` and `~/.murmur/running` belong to uid/gid 65534, for
    /// records planted by the test and read by the binary run as that user.
    pub fn for_nobody_with_running_dir() -> Self {
        let home = Self::for_nobody();
        let running = home.running_dir();
        chown_nobody(&home.path().join(".murmur"));
        chown_nobody(&running);
        home
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `~/.murmur/running`, created (0700, with `~/.murmur`) as the test user if missing.
    pub fn running_dir(&self) -> PathBuf {
        let murmur = self.path().join(".murmur");
        let running = murmur.join("running");
        for dir in [&murmur, &running] {
            if !dir.exists() {
                std::fs::create_dir(dir).expect("mkdir");
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .expect("chmod 0700");
            }
        }
        running
    }

    /// `~/.murmur/registry`, where the token file lives (nothing created).
    pub fn registry_dir(&self) -> PathBuf {
        self.path().join(".murmur").join("registry")
    }

    /// `~/.murmur/registry/token` (nothing created).
    pub fn token_path(&self) -> PathBuf {
        self.registry_dir().join("token")
    }

    /// Create `~/.murmur/registry` (0700) as the test user, for planting a token file.
    pub fn make_registry_dir(&self) -> PathBuf {
        for dir in [self.path().join(".murmur"), self.registry_dir()] {
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .expect("chmod 0700");
        }
        self.registry_dir()
    }

    /// The token as the token file holds it.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.token_path())
            .expect("read the token file")
            .trim()
            .to_owned()
    }

    /// Write `record` into the running directory; answers the file.
    pub fn write(&self, record: &RecordJson) -> PathBuf {
        record.write_in(&self.running_dir())
    }
}

/// `lchown` `path` to uid/gid 65534 (needs root).
pub fn chown_nobody(path: &Path) {
    std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY))
        .unwrap_or_else(|e| panic!("chown {} to {NOBODY}: {e}", path.display()));
}

/// Whether `token` is 64 lowercase hex digits, as a registry token is.
pub fn is_hex64(token: &str) -> bool {
    token.len() == 64
        && token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

// ---------------------------------------------------------------------------------------------
// The command line
// ---------------------------------------------------------------------------------------------

/// Who the binary runs as, and what `/proc` it sees.
#[derive(Debug, Clone, Copy)]
pub enum User {
    /// The test's own user (root).
    Me,
    /// uid/gid 65534 with no supplementary groups, through `setpriv`.
    Nobody,
    /// uid/gid 65534 in a private mount namespace whose `/proc` is mounted `hidepid=2`: other
    /// users' `/proc/<pid>` entries do not exist for it, while `kill(pid, 0)` gives EPERM.
    NobodyHiddenProc,
    /// The test's user as pid 1 of a new pid namespace with a `/proc` of its own (`unshare
    /// --pid --fork --mount-proc`), as in a container without `pid: host`: the host's pids
    /// name nothing there, and `/proc/self/status` shows one level of `NSpid`.
    NestedPidNamespace,
    /// The same new pid namespace with the host's `/proc` left mounted (`unshare --pid
    /// --fork`): `/proc/self/status` shows the pid at both levels of `NSpid`.
    ///
    /// In both, `unshare` waits for the binary, exits with its status, and kills it (and so the
    /// whole namespace) if `unshare` itself is killed at the deadline.
    NestedPidNamespaceHostProc,
}

/// `setpriv` and its arguments for running as uid/gid 65534 with no supplementary groups.
const SETPRIV_NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// The binary with `HOME` set to `home` and the environment that could steer it cleared;
/// the caller appends the subcommand and its arguments.
pub fn registry(home: &Path, user: User) -> Command {
    let mut cmd = match user {
        User::Me => Command::new(BIN),
        User::Nobody => {
            let mut cmd = Command::new(SETPRIV_NOBODY[0]);
            cmd.args(&SETPRIV_NOBODY[1..]).arg(BIN);
            cmd
        }
        User::NobodyHiddenProc => {
            let script = format!(
                "mount -t proc -o hidepid=2 proc /proc && exec {} \"$@\"",
                SETPRIV_NOBODY.join(" ")
            );
            let mut cmd = Command::new("unshare");
            cmd.args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
                .arg(BIN);
            cmd
        }
        User::NestedPidNamespace => {
            let mut cmd = Command::new("unshare");
            cmd.args(["--pid", "--fork", "--kill-child", "--mount-proc"])
                .arg(BIN);
            cmd
        }
        User::NestedPidNamespaceHostProc => {
            let mut cmd = Command::new("unshare");
            cmd.args(["--pid", "--fork", "--kill-child"]).arg(BIN);
            cmd
        }
    };
    cmd.env("HOME", home)
        .env_remove("MURMUR_REGISTRY_BIND")
        .env_remove("RUST_LOG")
        .env_remove("MURMUR_REGISTRY_FLEET_ETCD")
        .stdin(Stdio::null());
    match user {
        // The refusal under test.
        User::NestedPidNamespace | User::NestedPidNamespaceHostProc => {
            cmd.env_remove(NESTED_PID_NAMESPACE_ENV);
        }
        // The test's capsules are its own children, in whatever pid namespace the suite runs
        // (a container, say): the registry may trust pids there.
        User::Me | User::Nobody | User::NobodyHiddenProc => {
            cmd.env(NESTED_PID_NAMESPACE_ENV, "true");
        }
    }
    cmd
}

impl ServedBinary {
    /// `serve --bind 127.0.0.1:0` in `home`, as `user`.
    pub fn start(home: &Path, user: User) -> Self {
        let mut cmd = registry(home, user);
        cmd.args(["serve", "--bind", "127.0.0.1:0"]);
        Self::spawn(cmd)
    }

    /// `serve --bind 127.0.0.1:0` in `home`, as the test user, with `RUST_LOG=trace`.
    pub fn start_traced(home: &Path) -> Self {
        let mut cmd = registry(home, User::Me);
        cmd.env("RUST_LOG", "trace")
            .args(["serve", "--bind", "127.0.0.1:0"]);
        Self::spawn(cmd)
    }
}

/// The environment switch for `--nested-pid-namespace`.
pub const NESTED_PID_NAMESPACE_ENV: &str = "MURMUR_REGISTRY_NESTED_PID_NAMESPACE";

// ---------------------------------------------------------------------------------------------
// Running it to its end
// ---------------------------------------------------------------------------------------------

/// The exit status and output of a process that ran to its end, and how long it took.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Finished {
    pub fn stdout_lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    pub fn assert_success(&self) -> &Self {
        assert_eq!(self.status.code(), Some(0), "expected exit 0: {self:#?}");
        self
    }

    /// Exit status 1 with one `error: …` line on stderr (and nothing on stdout).
    pub fn assert_failure(&self) -> &Self {
        assert_eq!(self.status.code(), Some(1), "expected exit 1: {self:#?}");
        assert!(self.stdout.is_empty(), "nothing on stdout: {self:#?}");
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| l.starts_with("error"))
            .collect();
        assert_eq!(lines.len(), 1, "one clear error line: {self:#?}");
        self
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
}

/// Wait for `child` to exit, killing and reaping it and failing the test after `DEADLINE`.
pub fn wait_with_deadline(child: &mut Child, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Run `cmd` to its end, capturing its output; killed, and the test failed, after `DEADLINE`.
pub fn run(mut cmd: Command) -> Finished {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the binary");
    let stdout = drain(child.stdout.take().expect("stdout"));
    let stderr = drain(child.stderr.take().expect("stderr"));
    let status = wait_with_deadline(&mut child, &format!("{cmd:?}"));
    let took = started.elapsed();
    Finished {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
        took,
    }
}
