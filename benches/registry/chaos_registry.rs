//! Scenario `chaos`: the registry under test, the real binary, SIGKILLed and started again over
//! the same `HOME` (so the same token and running directory, and whatever a killed prune left
//! in quarantine there) on a fresh port.
//!
//! Invariant: [`ChaosRegistry::restart`] hands back only once the new process listens; what
//! every process wrote to stderr is kept, so a panic in any of them is found at the end.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use crate::records::private_temp_dir;
use crate::served::ServedBinary;

/// The flags every start gets: a quick monitor and short door deadlines, so a hung door costs a
/// listing one second and the pictures settle within seconds of a quiet world.
const FLAGS: [&str; 6] = [
    "--events-interval",
    "500ms",
    "--probe-connect-timeout",
    "1s",
    "--probe-answer-timeout",
    "1s",
];

pub struct ChaosRegistry {
    home: TempDir,
    extra: Vec<String>,
    served: Option<ServedBinary>,
    /// stderr of every process killed so far.
    logs: String,
}

impl ChaosRegistry {
    /// A private `HOME` with `~/.murmur/running` (0700), and the registry serving it.
    pub fn start(extra: Vec<String>) -> Self {
        let home = private_temp_dir();
        let mut registry = Self {
            home,
            extra,
            served: None,
            logs: String::new(),
        };
        std::fs::create_dir_all(registry.running_dir()).expect("running dir");
        std::fs::set_permissions(
            registry.running_dir(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod 700");
        registry.launch();
        registry
    }

    pub fn running_dir(&self) -> PathBuf {
        self.home.path().join(".murmur").join("running")
    }

    /// `http://127.0.0.1:<port>` of the process running now.
    pub fn base(&self) -> String {
        let served = self.served.as_ref().expect("the registry runs");
        format!("http://{}", served.addr)
    }

    /// The token in `~/.murmur/registry/token`, the same for every start.
    pub fn token(&self) -> String {
        let file = self.home.path().join(".murmur/registry/token");
        std::fs::read_to_string(file)
            .expect("token file")
            .trim()
            .to_owned()
    }

    /// `kill -9` it (a crash: nothing flushed, nothing removed) and start it again.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Kill it for good; answers everything every process wrote to stderr.
    pub fn finish(mut self) -> String {
        self.kill();
        self.logs
    }

    fn kill(&mut self) {
        if let Some(mut served) = self.served.take() {
            self.logs.push_str(&served.kill());
        }
    }

    fn launch(&mut self) {
        let mut cmd = Command::new(Path::new(env!("CARGO_BIN_EXE_murmur-registry")));
        cmd.arg("serve")
            .args(["--bind", "127.0.0.1:0"])
            .arg("--running-dir")
            .arg(self.running_dir())
            .args(FLAGS)
            .args(&self.extra)
            .env("HOME", self.home.path())
            .env("RUST_LOG", "warn");
        let served = ServedBinary::launch(cmd)
            .startup_deadline(Duration::from_secs(120))
            .start();
        self.served = Some(served);
    }
}
