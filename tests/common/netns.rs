//! A host behind a router, in network namespaces of its own, for the tests that cut it off
//! (`ip netns`, veth pairs; needs root and iproute2's `ip`).
//!
//! The topology ([`CutNetwork`]), all in `198.18.0.0/15` (set aside for tests, RFC 2544), one
//! /28 block per network:
//!
//! ```text
//!  root namespace (the test, etcd, the other registries)
//!    uplink  .1 ──── .2  router namespace (forwarding on)  .5 ──── .6  host namespace
//!    side    .9 ─────────────────────────────────────────────── .10   (the cut registry)
//! ```
//!
//! The host reaches the uplink's root address (where etcd listens) through the router only;
//! the side link is the test's own way to the host's HTTP, which no cut touches.
//!
//! Invariants: namespace and link names carry the test process's pid and a counter, so tests
//! in parallel (and other processes) never share one; a block is used only if no address of it
//! is configured already. Everything made is deleted on drop, also when the test panics
//! half-way (the root ends of the links first, which takes the pairs at once, then the
//! namespaces); the processes run inside must be ended before (they keep a namespace alive).
//! Namespaces a killed test process left behind are swept when the next network is built.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of every namespace made here, followed by `<pid>-<counter>-`.
const PREFIX: &str = "murmur-netcut-";
/// Blocks of 16 addresses in 198.18.0.0/15.
const BLOCKS: u32 = 1 << 13;

/// How the host is cut off, at the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The router's link to the host taken down: the host's end loses its carrier and the
    /// router answers etcd's packets for it with ICMP unreachable.
    LinkDown,
    /// `blackhole` routes in the router for both ends' addresses: forwarded packets either way
    /// are dropped without a word, so neither end sees an error (no netem on these kernels).
    Blackhole,
}

/// A router and a host namespace wired to the root namespace (see the module's picture).
pub struct CutNetwork {
    router: String,
    host: String,
    /// The root ends of the uplink and the side link.
    root_links: [String; 2],
    /// The block's first address.
    base: u32,
}

impl CutNetwork {
    /// Make the namespaces, links, addresses and routes; fails the test if `ip` does.
    pub fn build() -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        sweep_stale();
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let network = Self {
            router: format!("{PREFIX}{pid}-{n}-router"),
            host: format!("{PREFIX}{pid}-{n}-host"),
            // At most 15 bytes: "nc" + 7 digits + "x" + counter + 1.
            root_links: [format!("nc{pid}x{n}u"), format!("nc{pid}x{n}s")],
            base: free_block(pid.wrapping_mul(4).wrapping_add(n)),
        };
        // Held from here, so whatever was made is deleted if a step below fails.
        network.wire();
        network
    }

    fn wire(&self) {
        let (router, host) = (self.router.as_str(), self.host.as_str());
        let [uplink, side] = [self.root_links[0].as_str(), self.root_links[1].as_str()];
        let addr = |offset: u32| format!("{}/30", self.at(offset));
        for ns in [router, host] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&[
            "link", "add", uplink, "type", "veth", "peer", "name", "r-up", "netns", router,
        ]);
        ip(&[
            "-n", router, "link", "add", "r-down", "type", "veth", "peer", "name", "routed",
            "netns", host,
        ]);
        ip(&[
            "link", "add", side, "type", "veth", "peer", "name", "side", "netns", host,
        ]);
        for (ns, link, offset) in [
            (None, uplink, 1),
            (Some(router), "r-up", 2),
            (Some(router), "r-down", 5),
            (Some(host), "routed", 6),
            (None, side, 9),
            (Some(host), "side", 10),
        ] {
            let on = |args: &[&str]| match ns {
                Some(ns) => ip(&[&["-n", ns], args].concat()),
                None => ip(args),
            };
            on(&["addr", "add", &addr(offset), "dev", link]);
            on(&["link", "set", "dev", link, "up"]);
        }
        ip(&[
            "route",
            "add",
            &self.subnet(4),
            "via",
            &self.at(2).to_string(),
        ]);
        let via_router = self.at(5).to_string();
        ip(&[
            "-n",
            host,
            "route",
            "add",
            &self.subnet(0),
            "via",
            &via_router,
        ]);
        ip(&[
            "netns",
            "exec",
            router,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]);
    }

    /// The root namespace's address on the uplink: what the host reaches through the router
    /// only (etcd listens there).
    pub fn uplink_ip(&self) -> Ipv4Addr {
        self.at(1)
    }

    /// The host's address on the side link: where the test reaches it, never cut.
    pub fn host_ip(&self) -> Ipv4Addr {
        self.at(10)
    }

    /// `command` run inside the host namespace (`ip netns exec`, which execs it: the pid is
    /// the command's), with its arguments and environment; stdio is the caller's to set.
    pub fn inside(&self, command: &Command) -> Command {
        let mut wrapped = Command::new("ip");
        wrapped
            .args(["netns", "exec", &self.host])
            .arg(command.get_program())
            .args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => wrapped.env(key, value),
                None => wrapped.env_remove(key),
            };
        }
        if let Some(dir) = command.get_current_dir() {
            wrapped.current_dir(dir);
        }
        wrapped
    }

    /// Cut the host off at the router.
    pub fn cut(&self, how: Cut) {
        self.at_router(how, true);
    }

    /// Undo [`CutNetwork::cut`].
    pub fn heal(&self, how: Cut) {
        self.at_router(how, false);
    }

    fn at_router(&self, how: Cut, cut: bool) {
        let router = self.router.as_str();
        match how {
            Cut::LinkDown => {
                let state = if cut { "down" } else { "up" };
                ip(&["-n", router, "link", "set", "dev", "r-down", state]);
            }
            Cut::Blackhole => {
                let verb = if cut { "add" } else { "del" };
                for end in [self.uplink_ip(), self.at(6)] {
                    ip(&[
                        "-n",
                        router,
                        "route",
                        verb,
                        "blackhole",
                        &format!("{end}/32"),
                    ]);
                }
            }
        }
    }

    fn at(&self, offset: u32) -> Ipv4Addr {
        Ipv4Addr::from(self.base + offset)
    }

    fn subnet(&self, offset: u32) -> String {
        format!("{}/30", self.at(offset))
    }
}

impl Drop for CutNetwork {
    fn drop(&mut self) {
        // Quietly: on a panic half-way some of these were never made.
        for link in &self.root_links {
            let _ = quiet_ip(&["link", "del", link]);
        }
        for ns in [&self.host, &self.router] {
            let _ = quiet_ip(&["netns", "del", ns]);
        }
    }
}

/// The first block from `start` on (wrapping) of which no address is configured here.
fn free_block(start: u32) -> u32 {
    let first = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    (0..BLOCKS)
        .map(|i| first + ((start.wrapping_add(i)) % BLOCKS) * 16)
        .find(|&base| {
            let block = format!("{}/28", Ipv4Addr::from(base));
            quiet_ip(&["-4", "-o", "addr", "show", "to", &block]).is_some_and(|s| s.is_empty())
        })
        .expect("a free block of 198.18.0.0/15")
}

/// Delete the namespaces of test processes that no longer run (killed before their drop).
fn sweep_stale() {
    let Some(list) = quiet_ip(&["netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let pid = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = quiet_ip(&["netns", "del", name]);
        }
    }
}

/// Run `ip args`, failing the test with its stderr if it fails.
fn ip(args: &[&str]) {
    let output = run_ip(args);
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Run `ip args`: its stdout, or `None` if it failed.
fn quiet_ip(args: &[&str]) -> Option<String> {
    let output = run_ip(args);
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

fn run_ip<S: AsRef<OsStr>>(args: &[S]) -> std::process::Output {
    Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run ip (Debian: apt-get install iproute2): {e}"))
}
