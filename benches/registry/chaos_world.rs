//! Scenario `chaos`: the world the registry watches, every process in it a child of this one
//! (so `waitpid` tells what ended it), and the checks the kernel can answer.
//!
//! - **Capsules** ([`tests/fixtures/capsule.py`]): *protected* ones, never asked about, live
//!   for the whole soak (one with a door that hangs, one answering for another session);
//!   *targets*, which the HTTP clients stop and signal, and the churn ends every way: SIGTERM,
//!   SIGKILL, a clean exit (stdin closed: the capsule removes its record, exits 0). A target's
//!   door answers, hangs, or answers for another session.
//! - **Decoys**: `sleep` processes, no capsules, that end by themselves with status 0; records
//!   crafted to name them (or this process) with a wrong start token, as after pid reuse.
//! - **Records rewritten in place**: a live capsule's record replaced under its name (staged,
//!   then renamed over it, as murmur writes).
//!
//! Invariants checked ([`World::check`]): the record of a capsule whose process has not exited
//! is in place (looked at before `waitpid`, so a record removed just before an exit is never
//! blamed); no decoy ends by a signal; a protected capsule never ends and never logs a signal;
//! a target logs SIGTERM only and ends with status 0 or by SIGKILL.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use murmur_registry::running::process_start_token;
use rustix::process::{Pid, Signal};

use crate::capsules::{CapsuleSpec, Door, Rng, SoakCapsule};
use crate::chaos_tally::Shared;

/// Targets kept running at once.
const TARGETS: usize = 6;
/// Decoys kept running at once.
const DECOYS: usize = 4;
/// Session ids (targets' and crafted records') the clients pick from: the latest ones.
const ASKABLE_KEPT: usize = 48;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Protected,
    Target,
}

struct Capsule {
    role: Role,
    process: SoakCapsule,
    /// Its stdin was closed: it removes its own record and exits 0.
    ending_cleanly: bool,
    exited: Option<ExitStatus>,
}

struct Decoy {
    child: Child,
    pid: u32,
}

/// The processes and records of the soak.
pub struct World {
    running: PathBuf,
    logs: PathBuf,
    capsules: Vec<Capsule>,
    decoys: Vec<Decoy>,
    /// Session ids of targets and crafted records: what clients stop, signal and prune.
    askable: VecDeque<String>,
    /// Crafted records' ids: the registry must never signal through them.
    pub crafted: HashSet<String>,
    /// Session ids of protected capsules: never removed, never asked about.
    pub protected: BTreeSet<String>,
    /// Pids of processes of this soak that have ended (for counting reuse).
    dead_pids: HashSet<u32>,
}

impl World {
    pub fn new(running: &Path, logs: &Path) -> Self {
        Self {
            running: running.to_owned(),
            logs: logs.to_owned(),
            capsules: Vec::new(),
            decoys: Vec::new(),
            askable: VecDeque::new(),
            crafted: HashSet::new(),
            protected: BTreeSet::new(),
            dead_pids: HashSet::new(),
        }
    }

    /// Three protected capsules: one whose door answers, one whose door hangs, one whose door
    /// answers for another session.
    pub fn start_protected(&mut self, shared: &Shared) {
        let other = session_id();
        for door in [Door::Answers, Door::Hangs, Door::AnswersFor(other)] {
            let mut spec = CapsuleSpec::new(&session_id(), &self.logs);
            spec.running_dir = Some(self.running.clone());
            spec.door = door;
            let process = SoakCapsule::spawn(&spec).expect("a protected capsule starts");
            self.protected.insert(process.session_id.clone());
            self.adopt(shared, Role::Protected, process);
        }
    }

    /// A session id a client may ask about (a target's or a crafted record's).
    pub fn pick_askable(&self, rng: &mut Rng) -> Option<String> {
        let n = self.askable.len();
        (n > 0).then(|| self.askable[rng.below(n)].clone())
    }

    fn adopt(&mut self, shared: &Shared, role: Role, process: SoakCapsule) {
        shared.operations.add("capsules started");
        if self.dead_pids.remove(&process.pid) {
            shared.operations.add("pids reused by a new process");
        }
        if role == Role::Target {
            self.remember_askable(process.session_id.clone());
        }
        self.capsules.push(Capsule {
            role,
            process,
            ending_cleanly: false,
            exited: None,
        });
    }

    fn remember_askable(&mut self, id: String) {
        self.askable.push_back(id);
        // Crafted ids stay in `crafted` for good: a request may still be in flight on one.
        if self.askable.len() > ASKABLE_KEPT {
            self.askable.pop_front();
        }
    }

    fn running_targets(&self) -> Vec<usize> {
        (0..self.capsules.len())
            .filter(|&i| {
                let c = &self.capsules[i];
                c.role == Role::Target && c.exited.is_none() && !c.ending_cleanly
            })
            .collect()
    }
}

/// A session id shaped like murmur's (`ses_` + 32 hex), distinct within this process.
pub fn session_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        & 0xffff_ffff_ffff;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("ses_{ms:012x}7{n:019x}")
}

/// One step of the churn: top the targets and decoys up, then one random change. Spawning
/// happens outside the world's lock, so the monitor keeps checking meanwhile.
pub fn churn_step(shared: &Shared, world: &std::sync::Mutex<World>, rng: &mut Rng) {
    let (running, logs, targets, decoys) = {
        let w = lock(world);
        (
            w.running.clone(),
            w.logs.clone(),
            w.running_targets().len(),
            w.decoys.len(),
        )
    };
    if targets < TARGETS {
        let process = spawn_target(shared, &running, &logs, rng);
        lock(world).adopt(shared, Role::Target, process);
    }
    if decoys < DECOYS {
        let decoy = spawn_decoy(rng);
        let mut w = lock(world);
        shared.operations.add("decoys started");
        if w.dead_pids.remove(&decoy.pid) {
            shared.operations.add("pids reused by a new process");
        }
        w.decoys.push(decoy);
    }
    let mut w = lock(world);
    match rng.below(12) {
        0 => end_target(shared, &mut w, rng, "capsules ended: SIGTERM from the soak"),
        1 => end_target(shared, &mut w, rng, "capsules ended: SIGKILL from the soak"),
        2 => end_target(shared, &mut w, rng, "capsules ended: clean exit"),
        3 | 4 => craft_decoy_record(shared, &mut w, rng),
        5 => craft_own_pid_record(shared, &mut w),
        6 | 7 => rewrite_in_place(shared, &mut w, rng),
        _ => {}
    }
}

fn spawn_target(shared: &Shared, running: &Path, logs: &Path, rng: &mut Rng) -> SoakCapsule {
    let mut spec = CapsuleSpec::new(&session_id(), logs);
    spec.running_dir = Some(running.to_owned());
    spec.exit_on_term = true;
    spec.exit_on_eof = true;
    spec.door = match rng.below(8) {
        0 => {
            shared.operations.add("targets with a hung door");
            Door::Hangs
        }
        1 => {
            shared
                .operations
                .add("targets whose door answers for another session");
            Door::AnswersFor(session_id())
        }
        _ => Door::Answers,
    };
    SoakCapsule::spawn(&spec).expect("a target capsule starts")
}

fn spawn_decoy(rng: &mut Rng) -> Decoy {
    let secs = 1 + rng.below(8);
    let child = Command::new("sleep")
        .arg(secs.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a decoy");
    Decoy {
        pid: child.id(),
        child,
    }
}

fn end_target(shared: &Shared, w: &mut World, rng: &mut Rng, how: &'static str) {
    let running = w.running_targets();
    if running.is_empty() {
        return;
    }
    let capsule = &mut w.capsules[running[rng.below(running.len())]];
    let ended = match how {
        "capsules ended: SIGTERM from the soak" => signal(capsule.process.pid, Signal::TERM),
        "capsules ended: SIGKILL from the soak" => capsule.process.child.kill().is_ok(),
        _ => {
            // Marked first, under the lock, so no check blames the removal it is about to do.
            capsule.ending_cleanly = true;
            capsule.process.stdin.take().is_some()
        }
    };
    if ended {
        shared.operations.add(how);
    }
}

fn signal(pid: u32, signal: Signal) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    rustix::process::kill_process(pid, signal).is_ok()
}

/// A record naming a live decoy with a start token it never had: a reused pid.
fn craft_decoy_record(shared: &Shared, w: &mut World, rng: &mut Rng) {
    if w.decoys.is_empty() {
        return;
    }
    let pid = w.decoys[rng.below(w.decoys.len())].pid;
    if let Some(token) = process_start_token(pid) {
        craft(w, pid, &wrong(&token));
        shared
            .operations
            .add("records crafted: a decoy's pid, wrong start token");
    }
}

/// A record naming this very process with a wrong start token: signalling through it would
/// end the soak, which fails it.
fn craft_own_pid_record(shared: &Shared, w: &mut World) {
    let pid = std::process::id();
    if let Some(token) = process_start_token(pid) {
        craft(w, pid, &wrong(&token));
        shared
            .operations
            .add("records crafted: this soak's pid, wrong start token");
    }
}

fn wrong(token: &str) -> String {
    token
        .parse::<u64>()
        .map_or_else(|_| "1".to_owned(), |t| (t + 1).to_string())
}

fn craft(w: &mut World, pid: u32, token: &str) {
    let id = session_id();
    crate::records::write_record(&w.running, &id, "127.0.0.1:1", pid, token);
    w.crafted.insert(id.clone());
    w.remember_askable(id);
}

/// Replace a live capsule's record under its name (staged, renamed over it), changed.
fn rewrite_in_place(shared: &Shared, w: &mut World, rng: &mut Rng) {
    let live: Vec<usize> = (0..w.capsules.len())
        .filter(|&i| w.capsules[i].exited.is_none() && !w.capsules[i].ending_cleanly)
        .collect();
    if live.is_empty() {
        return;
    }
    let capsule = &w.capsules[live[rng.below(live.len())]];
    let Some(record) = capsule.process.record.clone() else {
        return;
    };
    let Ok(mut json) = std::fs::read(&record)
        .map_err(|_| ())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).map_err(|_| ()))
    else {
        return;
    };
    json["capsule_version"] = format!("0.1.{}", rng.below(1000)).into();
    let staged = w
        .running
        .join(format!(".{}.rewrite.tmp", capsule.process.session_id));
    if std::fs::write(&staged, json.to_string()).is_ok()
        && std::fs::rename(&staged, &record).is_ok()
    {
        shared
            .operations
            .add("records rewritten in place (renamed over)");
    }
}

impl World {
    /// The kernel's side of the invariants, once over every process; reaps what has ended.
    pub fn check(&mut self, shared: &Shared) {
        for capsule in &mut self.capsules {
            if capsule.exited.is_some() {
                continue;
            }
            let missing = capsule.process.record.as_ref().is_some_and(|r| !r.exists());
            shared
                .invariants
                .add("live capsule's record in place (kernel checks)");
            match capsule.process.child.try_wait() {
                Ok(Some(status)) => {
                    capsule.exited = Some(status);
                    self.dead_pids.insert(capsule.process.pid);
                    judge_exit(shared, capsule, status);
                }
                Ok(None) if missing && !capsule.ending_cleanly => shared.violation(format!(
                    "the record of live {:?} capsule {} (pid {}) was removed",
                    capsule.role, capsule.process.session_id, capsule.process.pid
                )),
                _ => {}
            }
        }
        // Ended targets are judged once (above); keep the list short over a long soak.
        self.capsules
            .retain(|c| c.exited.is_none() || c.role == Role::Protected);
        let mut ended = Vec::new();
        for (i, decoy) in self.decoys.iter_mut().enumerate() {
            shared
                .invariants
                .add("decoy not ended by a signal (waitpid checks)");
            if let Ok(Some(status)) = decoy.child.try_wait() {
                if let Some(signo) = status.signal() {
                    shared.violation(format!("decoy pid {} ended by signal {signo}", decoy.pid));
                } else {
                    shared
                        .operations
                        .add("decoys ended by themselves (status 0)");
                }
                ended.push(i);
            }
        }
        for i in ended.into_iter().rev() {
            let decoy = self.decoys.swap_remove(i);
            self.dead_pids.insert(decoy.pid);
        }
    }

    /// Every protected capsule's signal log is still empty (read throughout, not only at the end).
    pub fn check_protected_logs(&self, shared: &Shared) {
        for capsule in self.capsules.iter().filter(|c| c.role == Role::Protected) {
            shared
                .invariants
                .add("protected capsules' signal logs empty (read throughout)");
            let signals = capsule.process.signals();
            if !signals.is_empty() {
                shared.violation(format!(
                    "protected capsule pid {} was signalled: {signals:?}",
                    capsule.process.pid
                ));
            }
        }
    }

    /// The end of the soak: every protected capsule still runs and logged nothing; then every
    /// child is killed and reaped.
    pub fn finish(mut self, shared: &Shared) {
        self.check(shared);
        for capsule in &mut self.capsules {
            shared.invariants.add("signal logs read");
            let signals = capsule.process.signals();
            if capsule.role == Role::Protected {
                if capsule.exited.is_some() || !signals.is_empty() {
                    shared.violation(format!(
                        "protected capsule pid {} ended ({:?}) or was signalled ({signals:?})",
                        capsule.process.pid, capsule.exited
                    ));
                }
            } else if signals.iter().any(|&s| s != Signal::TERM.as_raw()) {
                shared.violation(format!(
                    "target pid {} got {signals:?}",
                    capsule.process.pid
                ));
            }
            let _ = capsule.process.child.kill();
            let _ = capsule.process.child.wait();
        }
        for decoy in &mut self.decoys {
            let _ = decoy.child.kill();
            let _ = decoy.child.wait();
        }
    }
}

/// How an ended capsule ended, against what its role allows.
fn judge_exit(shared: &Shared, capsule: &Capsule, status: ExitStatus) {
    shared
        .invariants
        .add("capsule exits judged (waitpid, signal log)");
    let signals = capsule.process.signals();
    let pid = capsule.process.pid;
    let fine = match capsule.role {
        Role::Protected => false,
        Role::Target => {
            signals.iter().all(|&s| s == Signal::TERM.as_raw())
                && match status.signal() {
                    Some(signo) => signo == Signal::KILL.as_raw(),
                    None => status.code() == Some(0),
                }
        }
    };
    if !fine {
        shared.violation(format!(
            "{:?} capsule pid {pid} ended {status} having logged signals {signals:?}",
            capsule.role
        ));
    }
}

pub fn lock(world: &std::sync::Mutex<World>) -> std::sync::MutexGuard<'_, World> {
    world
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
