//! The `murmur-registry serve` process, started and read the one way every test and the bench
//! share: spawn it with stdout piped, take the address from its first line, `listening on
//! http://<addr>`, and kill and reap it on drop.
//!
//! Invariant: a [`ServedBinary`] is only handed out once its first line named an address, so
//! the server already listens; a server that exits or stays silent first is reaped and said so
//! with its stderr. Self-contained (std and rustix only), so `benches/registry.rs` includes
//! this file with `#[path]` without the rest of the test fixtures.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

/// How long a server gets to print its first line unless the caller says otherwise: generous,
/// never how long a start takes, only how long a broken one takes to fail.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(10);

/// The prefix of the first stdout line of `serve`.
const LISTENING: &str = "listening on http://";

/// A running `murmur-registry serve`. Killed and reaped on drop.
pub struct ServedBinary {
    /// The address its first line names (the real port, for `--bind 127.0.0.1:0`).
    pub addr: SocketAddr,
    /// Its first stdout line, exactly.
    pub first_line: String,
    child: Child,
    /// `None` when its stderr was left to the terminal.
    stderr: Option<JoinHandle<String>>,
}

/// How a [`ServedBinary`] is started: the command (the binary, or a wrapper such as `setpriv`
/// that runs it, with `serve` and its arguments), where its stderr goes, how long it may take.
pub struct ServeLaunch {
    cmd: Command,
    stderr_to_terminal: bool,
    deadline: Duration,
}

impl ServeLaunch {
    /// Append an argument.
    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.arg(arg);
        self
    }

    /// Append arguments.
    pub fn args<S: AsRef<std::ffi::OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.cmd.args(args);
        self
    }

    /// Set an environment variable.
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Leave its stderr (its log) on the terminal instead of capturing it (the bench does).
    pub fn stderr_to_terminal(mut self) -> Self {
        self.stderr_to_terminal = true;
        self
    }

    /// Wait at most `deadline` for the first line (default [`STARTUP_DEADLINE`]).
    pub fn startup_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Start it; fails the test when it does not start.
    pub fn start(self) -> ServedBinary {
        self.try_start().unwrap_or_else(|why| panic!("{why}"))
    }

    /// Start it, answering why it did not (it exited first, e.g. on a port in use, or stayed
    /// silent past the deadline) instead of failing the test. Either way it is reaped.
    pub fn try_start(mut self) -> Result<ServedBinary, String> {
        let what = format!("{:?}", self.cmd);
        let stderr_to = if self.stderr_to_terminal {
            Stdio::inherit()
        } else {
            Stdio::piped()
        };
        let mut child = self
            .cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr_to)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let stderr = child.stderr.take().map(drain);
        let lines = first_line(child.stdout.take().expect("piped stdout"));
        // The channel closes without a line when the server exits first.
        let line = match lines.recv_timeout(self.deadline) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().expect("wait for the server");
                let stderr = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
                return Err(format!(
                    "{what} printed no first line ({e}); it exited {status}: {stderr}"
                ));
            }
        };
        let Some(addr) = line
            .strip_prefix(LISTENING)
            .and_then(|a| a.parse::<SocketAddr>().ok())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{what}: unexpected first line {line:?}"));
        };
        Ok(ServedBinary {
            addr,
            first_line: line,
            child,
            stderr,
        })
    }
}

impl ServedBinary {
    /// Start `cmd` (see [`ServeLaunch`]); the builder sets stdio itself.
    pub fn launch(cmd: Command) -> ServeLaunch {
        ServeLaunch {
            cmd,
            stderr_to_terminal: false,
            deadline: STARTUP_DEADLINE,
        }
    }

    /// Start `cmd` with every launch option at its default; fails the test when it does not.
    pub fn spawn(cmd: Command) -> Self {
        Self::launch(cmd).start()
    }

    /// `http://<addr>/`, as a browser opens it.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The server's pid (or its wrapper's, when one such as `setpriv` execs it, the same).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `signal`, wait (at most [`STARTUP_DEADLINE`]) for the exit, and answer the status
    /// and everything on stderr. Killed, and the test failed, if it does not exit by then.
    pub fn stop_with(mut self, signal: Signal) -> (ExitStatus, String) {
        let pid = Pid::from_raw(i32::try_from(self.pid()).expect("pid fits i32"))
            .expect("a positive pid");
        rustix::process::kill_process(pid, signal).expect("signal the server");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if started.elapsed() > STARTUP_DEADLINE {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the server did not exit within {STARTUP_DEADLINE:?} of {signal:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        (status, self.take_stderr())
    }

    /// Kill it outright (no graceful shutdown: as if it crashed), reap it, and answer its
    /// stderr. Dropping it afterwards does nothing more.
    pub fn kill(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.take_stderr()
    }

    /// Everything it wrote to stderr (empty when that went to the terminal); call once it
    /// exited.
    fn take_stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for ServedBinary {
    fn drop(&mut self) {
        // After a successful wait std knows the child is reaped and sends nothing.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read a pipe to its end on its own thread.
pub fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Read a pipe's first line on its own thread, then keep draining it, so the writer (a
/// server logging to stdout) never blocks on a full pipe. The receiver gets the line, or
/// disconnects without one when the pipe closes first (the writer exited).
pub fn first_line(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(pipe).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    rx
}
