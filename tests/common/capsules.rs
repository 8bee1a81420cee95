//! Capsule stand-ins for the soaks (`tests/soak.rs` and the bench's `chaos` scenario):
//! [`tests/fixtures/capsule.py`] started as a child of the soak with the behaviour a
//! [`CapsuleSpec`] asks for, its signal log read back, and the seeded [`Rng`] both soaks pace
//! their churn with.
//!
//! Invariant: a [`SoakCapsule`] is handed out only once the capsule printed `ready`, so every
//! door listens and every record it was asked to write is in place: reading that line is the
//! evidence, never a pause. Self-contained (std only), so the bench includes this file with
//! `#[path]` without the rest of the test fixtures.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

/// The stand-in capsule script.
pub const CAPSULE_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/capsule.py");

/// What its door does when asked for the card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Door {
    /// Answers with a card naming its own session.
    Answers,
    /// Reads the request and never answers (until the client closes).
    Hangs,
    /// Answers with a card naming this other session.
    AnswersFor(String),
}

/// How to start one capsule.
#[derive(Debug, Clone)]
pub struct CapsuleSpec {
    pub session_id: String,
    /// Where it writes its own record; `None` for a process with no record of its own.
    pub running_dir: Option<PathBuf>,
    /// Where it logs every catchable signal it receives.
    pub log: PathBuf,
    /// SIGTERM ends it with status 0 (after logging it); otherwise SIGTERM is logged, survived.
    pub exit_on_term: bool,
    pub door: Door,
    /// Its stdin closing ends it cleanly: its record removed, status 0.
    pub exit_on_eof: bool,
}

impl CapsuleSpec {
    /// A capsule answering for `session_id`, logging to `logs/<id>.log`, nothing else asked.
    pub fn new(session_id: &str, logs: &Path) -> Self {
        Self {
            session_id: session_id.to_owned(),
            running_dir: None,
            log: logs.join(format!("{session_id}.log")),
            exit_on_term: false,
            door: Door::Answers,
            exit_on_eof: false,
        }
    }
}

/// A running capsule, a child of this process (so `waitpid` tells how it ended).
pub struct SoakCapsule {
    pub child: Child,
    pub pid: u32,
    pub session_id: String,
    /// Its record, where it wrote one (the path whether or not it exists now).
    pub record: Option<PathBuf>,
    pub log: PathBuf,
    /// Held for [`CapsuleSpec::exit_on_eof`]: dropping it ends the capsule.
    pub stdin: Option<ChildStdin>,
}

impl SoakCapsule {
    /// Start it and wait for its `ready` line; an error if it exits or says anything else.
    pub fn spawn(spec: &CapsuleSpec) -> std::io::Result<Self> {
        let mut command = Command::new("python3");
        command
            .arg(CAPSULE_SCRIPT)
            .args(["--session", &spec.session_id, "--log"])
            .arg(&spec.log)
            .stdin(if spec.exit_on_eof {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(dir) = &spec.running_dir {
            command.arg("--running-dir").arg(dir);
        }
        if spec.exit_on_term {
            command.arg("--exit-on-term");
        }
        if spec.exit_on_eof {
            command.arg("--exit-on-eof");
        }
        match &spec.door {
            Door::Answers => {}
            Door::Hangs => {
                command.args(["--door", "hang"]);
            }
            Door::AnswersFor(other) => {
                command.args(["--card-session", other]);
            }
        }
        let mut child = command.spawn()?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or(std::io::ErrorKind::BrokenPipe)?;
        BufReader::new(stdout).read_line(&mut line)?;
        let ready = line
            .strip_prefix("ready ")
            .and_then(|rest| rest.split(' ').next())
            .is_some_and(|port| port.parse::<u16>().is_ok());
        if !ready {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other(format!(
                "capsule did not start: {line:?}"
            )));
        }
        Ok(Self {
            child,
            pid,
            session_id: spec.session_id.clone(),
            record: spec
                .running_dir
                .as_ref()
                .map(|dir| dir.join(format!("{}.json", spec.session_id))),
            log: spec.log.clone(),
            stdin,
        })
    }

    /// Every signal number it logged so far, in order.
    pub fn signals(&self) -> Vec<i32> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

/// Deterministic pseudo-randomness (xorshift): a soak prints its seed so a run can be retold.
pub struct Rng(pub u64);

impl Rng {
    /// Seeded from the clock (never zero).
    pub fn from_clock() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64);
        Self(nanos | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 for `n` 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
