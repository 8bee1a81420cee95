//! The door host: one process (this executable re-run as `--door-host`) holding many doors,
//! each answering for its own session, and counting the probes it gets.
//!
//! Invariant: a door answers only once it has read a whole request head, and counts it then, so
//! the request counter is the number of probes the registry made, no more.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use murmur_registry::running::process_start_token;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::pid_holders::PidHolders;
use crate::records::{private_temp_dir, write_record};

/// What a door host is asked to serve (its command line after `--door-host`).
pub struct DoorHostArgs {
    /// How many doors.
    pub count: usize,
    /// How long each door waits before it answers.
    pub delay: Duration,
    /// Four hex digits that make its session ids its own.
    pub tag: String,
    /// Threads it starts and parks, so `/proc/<pid>/stat` has that many to sum over.
    pub threads: usize,
}

/// The session door `index` of host `tag` answers for.
pub fn door_session(tag: &str, index: usize) -> String {
    format!("ses_{tag}{index:028x}")
}

/// Serve `count` doors on `127.0.0.1:0`, each answering for its own session after `delay`.
///
/// Prints each door's port on its own line, then `ready`. Then reads commands on stdin:
/// `stats` prints `<most requests one session had open at once> <requests>` and starts
/// counting afresh. Exits when stdin closes.
pub fn serve_doors(args: DoorHostArgs) {
    let DoorHostArgs {
        count,
        delay,
        tag,
        threads,
    } = args;
    let tag = tag.as_str();
    murmur_registry::test_support::raise_open_files_limit();
    park_threads(threads);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("door runtime");
    let open: Arc<Vec<AtomicUsize>> = Arc::new((0..count).map(|_| AtomicUsize::new(0)).collect());
    let most_open = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    runtime.block_on(async {
        let mut out = std::io::stdout().lock();
        for index in 0..count {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind door");
            writeln!(out, "{}", listener.local_addr().expect("addr").port()).expect("stdout");
            let body = format!(r#"{{"session_id":"{}"}}"#, door_session(tag, index));
            let answer: Arc<[u8]> = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
            .into();
            let (open, most_open, requests) = (open.clone(), most_open.clone(), requests.clone());
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (answer, open, most, requests) = (
                        answer.clone(),
                        open.clone(),
                        most_open.clone(),
                        requests.clone(),
                    );
                    tokio::spawn(async move {
                        answer_one(stream, &answer, delay, &open[index], &most, &requests).await;
                    });
                }
            });
        }
        writeln!(out, "ready").expect("stdout");
        out.flush().expect("stdout");
    });
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "stats" {
            let reply = format!(
                "{} {}",
                most_open.swap(0, Ordering::SeqCst),
                requests.swap(0, Ordering::SeqCst)
            );
            let mut out = std::io::stdout().lock();
            writeln!(out, "{reply}").expect("stdout");
            out.flush().expect("stdout");
        }
    }
    runtime.shutdown_background();
}

async fn answer_one(
    mut stream: TcpStream,
    answer: &[u8],
    delay: Duration,
    open: &AtomicUsize,
    most_open: &AtomicUsize,
    requests: &AtomicUsize,
) {
    // A probe is in flight from the moment its connection is accepted.
    let now_open = open.fetch_add(1, Ordering::SeqCst) + 1;
    most_open.fetch_max(now_open, Ordering::SeqCst);
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => {
                open.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    requests.fetch_add(1, Ordering::SeqCst);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    // Closed before the answer goes out: a probe that starts after this one ends is never
    // counted as overlapping it.
    open.fetch_sub(1, Ordering::SeqCst);
    let _ = stream.write_all(answer).await;
    let _ = stream.shutdown().await;
}

/// A running door host and the records that name it.
pub struct Doors {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub pid: u32,
    pub start_token: String,
    /// `(session id, door address)`, in door order.
    pub sessions: Vec<(String, String)>,
}

impl Doors {
    /// A door host of `count` doors answering after `delay`, its sessions tagged `tag`.
    pub fn start(count: usize, delay: Duration, tag: &str) -> Self {
        Self::start_with_threads(count, delay, tag, 0)
    }

    /// [`Doors::start`], the host also running `threads` parked threads.
    pub fn start_with_threads(count: usize, delay: Duration, tag: &str, threads: usize) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .args([
                "--door-host",
                &count.to_string(),
                &delay.as_millis().to_string(),
                tag,
                &threads.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn door host");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut sessions = Vec::with_capacity(count);
        loop {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("door host output");
            let line = line.trim();
            if line == "ready" || line.is_empty() {
                break;
            }
            let index = sessions.len();
            sessions.push((door_session(tag, index), format!("127.0.0.1:{line}")));
        }
        assert_eq!(sessions.len(), count, "door host started every door");
        let pid = child.id();
        let start_token = process_start_token(pid).expect("door host's start token");
        Self {
            child,
            stdin,
            stdout,
            pid,
            start_token,
            sessions,
        }
    }

    /// `(most requests one session had open at once, requests)` since the last call.
    pub fn stats(&mut self) -> (usize, usize) {
        writeln!(self.stdin, "stats").expect("door host stdin");
        self.stdin.flush().expect("door host stdin");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("door host stats");
        let mut fields = line.split_whitespace().map(|f| f.parse().unwrap_or(0));
        (fields.next().unwrap_or(0), fields.next().unwrap_or(0))
    }

    /// A private running directory with a record for each of the first `count` doors, every
    /// one naming the door host itself.
    pub fn running_dir(&self, count: usize) -> tempfile::TempDir {
        let dir = private_temp_dir();
        for (session_id, url) in self.sessions.iter().take(count) {
            write_record(dir.path(), session_id, url, self.pid, &self.start_token);
        }
        dir
    }

    /// A private running directory with one record per door, door `i`'s naming process `i`
    /// of `holders`: records of distinct processes, whose doors this host serves.
    pub fn running_dir_of(&self, holders: &PidHolders) -> tempfile::TempDir {
        assert_eq!(holders.len(), self.sessions.len(), "one process per door");
        let dir = private_temp_dir();
        for ((session_id, url), (pid, token)) in self.sessions.iter().zip(holders.processes()) {
            write_record(dir.path(), session_id, url, *pid, token);
        }
        dir
    }
}

impl Drop for Doors {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `count` threads that do nothing, for as long as the process lives.
fn park_threads(count: usize) {
    for _ in 0..count {
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| {
                loop {
                    std::thread::park();
                }
            })
            .expect("start a parked thread");
    }
}
