//! Many distinct live processes for records to name: this executable re-run as
//! `--pid-holders N` forks N children that only sleep, and reports their pids.
//!
//! Invariants: the holder reaps every child that dies (a SIGKILLed one leaves no zombie, so its
//! pid is free as soon as it is reaped), and no child outlives the holder: when the bench closes
//! the holder's stdin, or the holder dies, every child is killed (the children also ask the
//! kernel for SIGKILL at their parent's death, so a holder killed outright takes them along).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use murmur_registry::running::process_start_token;
use rustix::process::{Pid, Signal, WaitOptions};

unsafe extern "C" {
    fn fork() -> i32;
    fn _exit(status: i32) -> !;
}

/// The holder: fork `count` sleeping children, print their pids one a line and `ready`, then
/// reap them as they die until stdin closes, and kill the rest then.
pub fn hold_pids(count: usize) {
    let holder = rustix::process::getpid();
    let mut children = Vec::with_capacity(count);
    for _ in 0..count {
        // SAFETY: the holder has one thread here (no runtime, nothing spawned yet), so the child
        // inherits no lock another thread held; it only makes raw syscalls and sleeps.
        let pid = unsafe { fork() };
        match pid {
            0 => sleep_until_killed(holder),
            pid if pid > 0 => children.push(pid),
            _ => panic!("fork: {}", std::io::Error::last_os_error()),
        }
    }
    let mut out = std::io::stdout().lock();
    for pid in &children {
        writeln!(out, "{pid}").expect("stdout");
    }
    writeln!(out, "ready").expect("stdout");
    out.flush().expect("stdout");
    drop(out);
    let reaper = std::thread::spawn(|| {
        // Ends with ECHILD once every child has been reaped.
        while rustix::process::wait(WaitOptions::empty()).is_ok() {}
    });
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    for pid in children {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
    let _ = reaper.join();
}

/// A child's whole life: die with the holder, otherwise sleep.
fn sleep_until_killed(holder: Pid) -> ! {
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    // The holder may have died before the request above was made: then nothing would kill us.
    if rustix::process::getppid() != Some(holder) {
        // SAFETY: ends this process at once, running nothing of the parent's copied state.
        unsafe { _exit(0) }
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// A running holder and its children, each `(pid, start token)`.
pub struct PidHolders {
    child: Child,
    stdin: Option<ChildStdin>,
    processes: Vec<(u32, String)>,
}

impl PidHolders {
    /// Fork `count` distinct processes (through a holder process) and read their start tokens.
    pub fn start(count: usize) -> Self {
        let began = Instant::now();
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .args(["--pid-holders", &count.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the pid holder");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut processes = Vec::with_capacity(count);
        loop {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("pid holder output");
            let line = line.trim();
            if line == "ready" || line.is_empty() {
                break;
            }
            let pid: u32 = line.parse().expect("a pid");
            let token = process_start_token(pid).expect("a held process's start token");
            processes.push((pid, token));
        }
        assert_eq!(processes.len(), count, "the holder forked every process");
        eprintln!(
            "pid holder {}: {count} processes in {:.1} s",
            child.id(),
            began.elapsed().as_secs_f64()
        );
        Self {
            child,
            stdin,
            processes,
        }
    }

    pub fn len(&self) -> usize {
        self.processes.len()
    }

    /// `(pid, start token)` of each process, in order.
    pub fn processes(&self) -> &[(u32, String)] {
        &self.processes
    }

    /// SIGKILL process `index`; the holder reaps it.
    pub fn kill(&self, index: usize) {
        let pid = i32::try_from(self.processes[index].0).expect("pid fits i32");
        let pid = Pid::from_raw(pid).expect("a positive pid");
        rustix::process::kill_process(pid, Signal::KILL).expect("kill a held process");
    }
}

impl Drop for PidHolders {
    fn drop(&mut self) {
        // Closing stdin makes the holder kill and reap its children, then exit.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}
