//! The fleet's flags, shared by `serve` (publish and serve the fleet) and `ps --fleet` (read it).
//!
//! Invariant: every flag is accepted by every build, so the command line means the same with
//! or without the `fleet` feature; a build without it refuses `--fleet-etcd` at start, saying
//! which feature to build with, rather than ignoring it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

use crate::fleet::{DEFAULT_PREFIX, HostId};

/// Where the fleet is: etcd and the prefix (`serve` and `ps --fleet`).
#[derive(Debug, Args)]
pub(super) struct EtcdArgs {
    /// etcd endpoints (comma-separated `http://` or `https://` URLs) where the fleet is kept;
    /// `serve` publishes this host's verified sessions there and serves the fleet (off
    /// without it).
    #[arg(
        long,
        env = "MURMUR_REGISTRY_FLEET_ETCD",
        value_name = "URL[,URL...]",
        value_delimiter = ','
    )]
    pub(super) fleet_etcd: Vec<String>,
    /// Where the fleet's keys live in etcd.
    #[arg(long, value_name = "PREFIX", default_value = DEFAULT_PREFIX)]
    pub(super) fleet_prefix: String,
    /// CA certificate (PEM) to verify etcd's server certificate with (`https://` endpoints).
    #[arg(long, value_name = "FILE")]
    pub(super) fleet_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) to present to etcd; needs --fleet-key-file.
    #[arg(long, value_name = "FILE", requires = "fleet_key_file")]
    pub(super) fleet_cert_file: Option<PathBuf>,
    /// Private key (PEM) of --fleet-cert-file.
    #[arg(long, value_name = "FILE", requires = "fleet_cert_file")]
    pub(super) fleet_key_file: Option<PathBuf>,
    /// File holding etcd's `username:password` on one line, private (0600) like the token.
    #[arg(long, value_name = "FILE")]
    pub(super) fleet_credentials_file: Option<PathBuf>,
}

/// Where the fleet is and who this host is in it (`serve`).
#[derive(Debug, Args)]
pub(super) struct FleetArgs {
    #[command(flatten)]
    pub(super) etcd: EtcdArgs,
    /// This host's name in the fleet [default: the hostname]: 1 to 128 of A-Z a-z 0-9 . _ -,
    /// starting with a letter or digit.
    #[arg(long, value_name = "ID")]
    pub(super) host_id: Option<String>,
    /// How long this host's keys outlive its last completed pass: a host that stops (or whose
    /// verification loop hangs) leaves the fleet after this. At least 3 × --events-interval.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    pub(super) fleet_ttl: Duration,
    /// Where other hosts can reach this registry's API, published with the host (optional).
    #[arg(long, value_name = "URL")]
    pub(super) advertise_url: Option<String>,
}

impl EtcdArgs {
    /// Whether `--fleet-etcd` turned the fleet on.
    ///
    /// An empty value is off, so a compose file can pass an unset variable through.
    pub(super) fn enabled(&self) -> bool {
        self.fleet_etcd.iter().any(|url| !url.trim().is_empty())
    }

    /// The endpoints, each checked to be an `http://` or `https://` URL with a host.
    // Only a build with the fleet reads these (and `prefix`, `host_id`): without it, the fleet
    // is refused first ([`no_fleet_in_this_build`]). Kept in every build, with their tests.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub(super) fn endpoints(&self) -> anyhow::Result<Vec<String>> {
        self.fleet_etcd
            .iter()
            .filter(|url| !url.trim().is_empty())
            .map(|url| {
                let url = url.trim();
                let authority = url
                    .strip_prefix("http://")
                    .or_else(|| url.strip_prefix("https://"))
                    .map(|rest| rest.trim_end_matches('/'));
                match authority {
                    Some(a) if !a.is_empty() && !a.contains(['/', '?', '#', '@', ' ']) => {
                        Ok(url.to_owned())
                    }
                    _ => bail!(
                        "--fleet-etcd {url:?} is not an etcd endpoint: write it as http://HOST:PORT or https://HOST:PORT"
                    ),
                }
            })
            .collect()
    }

    /// The prefix, which must be an absolute key path.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub(super) fn prefix(&self) -> anyhow::Result<&str> {
        let prefix = self.fleet_prefix.trim_end_matches('/');
        if !prefix.starts_with('/') || prefix.len() < 2 || prefix.contains("//") {
            bail!(
                "--fleet-prefix {:?} must be a key path such as {DEFAULT_PREFIX}",
                self.fleet_prefix
            );
        }
        Ok(prefix)
    }

    /// How to reach etcd: `endpoints` (checked by [`EtcdArgs::endpoints`]) and the TLS and
    /// credential files.
    #[cfg(feature = "fleet")]
    pub(super) fn settings(&self, endpoints: Vec<String>) -> crate::fleet::etcd::EtcdSettings {
        crate::fleet::etcd::EtcdSettings {
            endpoints,
            ca_file: self.fleet_ca_file.clone(),
            client_cert_file: self.fleet_cert_file.clone(),
            client_key_file: self.fleet_key_file.clone(),
            credentials_file: self.fleet_credentials_file.clone(),
        }
    }
}

/// Why `what` (`--fleet-etcd`, `ps --fleet`) is refused by a build without the fleet, and how
/// to get one.
#[cfg_attr(feature = "fleet", allow(dead_code))]
pub(super) fn no_fleet_in_this_build(what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} needs the fleet: this build has none; build with `cargo build --release --features fleet` (needs protoc: apt-get install protobuf-compiler)"
    )
}

impl FleetArgs {
    /// Whether `--fleet-etcd` turned the fleet on.
    pub(super) fn enabled(&self) -> bool {
        self.etcd.enabled()
    }

    /// `--host-id`, or the hostname when it makes a valid host id.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub(super) fn host_id(&self) -> anyhow::Result<HostId> {
        if let Some(given) = &self.host_id {
            return given.parse().context("--host-id");
        }
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .context("cannot read the hostname for the fleet's host id; pass --host-id")?;
        let hostname = hostname.trim();
        hostname.parse().with_context(|| {
            format!("the hostname {hostname:?} cannot be a host id; pass --host-id")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        fleet: FleetArgs,
    }

    fn parse(args: &[&str]) -> FleetArgs {
        let mut argv = vec!["test"];
        argv.extend_from_slice(args);
        Command::try_parse_from(argv).expect("parses").fleet
    }

    #[test]
    fn off_unless_given_and_the_defaults_are_the_librarys() {
        let args = parse(&[]);
        assert!(!args.enabled());
        assert!(!parse(&["--fleet-etcd", ""]).enabled());
        assert_eq!(args.etcd.prefix().expect("default prefix"), DEFAULT_PREFIX);
        assert_eq!(args.fleet_ttl, crate::fleet::DEFAULT_TTL);
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        let args = parse(&["--fleet-prefix", "murmur", "--host-id", "a/b"]);
        assert!(
            args.etcd
                .prefix()
                .unwrap_err()
                .to_string()
                .contains("--fleet-prefix")
        );
        assert!(format!("{:#}", args.host_id().unwrap_err()).contains("--host-id"));
        assert_eq!(
            parse(&["--fleet-prefix", "/p/"])
                .etcd
                .prefix()
                .expect("trailing /"),
            "/p"
        );
        assert_eq!(
            parse(&["--host-id", "b-1"])
                .host_id()
                .expect("valid")
                .as_str(),
            "b-1"
        );
    }

    #[test]
    fn endpoints_are_urls_or_the_build_says_what_it_lacks() {
        let args = parse(&["--fleet-etcd", "http://127.0.0.1:2379,https://e2:2379/"]);
        assert!(args.enabled());
        assert_eq!(
            args.etcd.endpoints().expect("valid"),
            ["http://127.0.0.1:2379", "https://e2:2379/"]
        );
        for bad in ["127.0.0.1:2379", "http://", "http://a/b", "ftp://a:1"] {
            let error = parse(&["--fleet-etcd", bad]).etcd.endpoints().unwrap_err();
            assert!(error.to_string().contains("--fleet-etcd"), "{bad}: {error}");
        }
        let refused = no_fleet_in_this_build("--fleet-etcd").to_string();
        assert!(
            refused.starts_with("--fleet-etcd needs the fleet"),
            "{refused}"
        );
        assert!(refused.contains("--features fleet"), "{refused}");
    }

    #[test]
    fn a_client_certificate_needs_its_key() {
        let missing = Command::try_parse_from(["test", "--fleet-cert-file", "c.pem"]);
        assert!(missing.is_err());
    }
}
