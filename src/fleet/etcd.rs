//! How this registry reaches etcd: endpoints, deadlines, and (for real clusters) TLS and a
//! username/password.
//!
//! Invariants: no call to etcd can wait longer than its deadline, and a connection that goes
//! silent (a frozen or partitioned server) is noticed by HTTP/2 keepalive within a third of
//! the lease's TTL, so neither publishing nor reading ever rests on a dead connection. The
//! password is read only from a file only this user can read (no symlink, a regular file of
//! ours, mode 0600 or narrower: `private_fs::read_private_file`, as the token file), never
//! from a flag. The files are read at each connection, so a file mended while the registry
//! runs is taken at its next try.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::{Instant, timeout_at};

use super::cache::{ColdRead, FleetCache, ParsedPage, Skipped};
use super::keys::FleetKeys;
use super::pages_parsing::PagesParsing;
use crate::private_fs::{PrivateFileProblem, read_private_file};
use etcd_client::{
    Certificate, Client, ConnectOptions, GetResponse, Identity, KvClient, TlsOptions,
};

/// Credentials files larger than this are not credentials files.
const MAX_CREDENTIALS_FILE_BYTES: u64 = 4096;

/// Where etcd is and how to talk to it (`--fleet-etcd` and the TLS and credential flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdSettings {
    /// `http://host:port` or `https://host:port`, one per member.
    pub endpoints: Vec<String>,
    /// The CA certificate (PEM) the members' certificates are checked against. Setting it (or
    /// a client certificate) turns TLS on; the endpoints must then be `https://`.
    pub ca_file: Option<PathBuf>,
    /// This registry's client certificate (PEM), for members that ask for one; needs
    /// `client_key_file`.
    pub client_cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM); needs `client_cert_file`.
    pub client_key_file: Option<PathBuf>,
    /// A file holding `username:password` for etcd's authentication, mode 0600 or narrower.
    pub credentials_file: Option<PathBuf>,
}

/// The largest answer of one read of the fleet taken in.
const MAX_FLEET_READ_BYTES: usize = 256 << 20;

/// The most keys one read of the fleet asks for: at the 64 KiB a value may hold, with its key,
/// a page stays within [`MAX_FLEET_READ_BYTES`]; at a usual entry's 600–700 bytes it is about
/// 3 MB, so a fleet of any size is read in pages etcd and the client each hold one of.
pub(crate) const READ_PAGE_KEYS: i64 = 4_000;

/// How a read of the fleet is paged: how many keys a range asks for, and how long each range
/// may take. The deadline is a page's, never the whole read's: a fleet of any size is read
/// while etcd answers each page in time (a whole-read deadline made a large fleet's read
/// begin again for ever, issue 27).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadPaging {
    /// The most keys one range asks for (at least 1).
    pub(crate) keys: i64,
    /// How long one range may take to answer.
    pub(crate) deadline: Duration,
}

/// Why a paged read of the fleet failed.
#[derive(Debug)]
pub(crate) enum ReadFailed {
    /// etcd refused a range (a compaction past the read's revision among the reasons).
    Etcd(etcd_client::Error),
    /// Range number `page` (from 0) did not answer within its deadline.
    Silent { page: usize },
    /// The runtime is shutting down, and the read with it.
    Stopped,
}

/// Every entry under `keys`' prefix, read in pages of [`READ_PAGE_KEYS`] all at the revision
/// of the first (so the pages are one consistent picture): the cache at that revision, and
/// the entries it skipped. What `ps --fleet` reads, on a connection made for
/// [`DEFAULT_TTL`](super::DEFAULT_TTL): each range within that connection's request deadline.
pub async fn read_fleet(
    client: &Client,
    keys: &FleetKeys,
) -> Result<(FleetCache, Vec<Skipped>), etcd_client::Error> {
    let paging = ReadPaging {
        keys: READ_PAGE_KEYS,
        deadline: request_deadline(super::DEFAULT_TTL),
    };
    read_fleet_paged(client, keys, paging, None)
        .await
        .map_err(|failed| match failed {
            ReadFailed::Etcd(error) => error,
            ReadFailed::Silent { page } => etcd_client::Error::IoError(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("etcd did not answer page {page} of the fleet"),
            )),
            ReadFailed::Stopped => etcd_client::Error::IoError(std::io::Error::other(
                "the read of the fleet was stopped",
            )),
        })
}

/// Every entry under `keys`' prefix, read in ranges as `paging` says, all at the revision of
/// the first (so the pages are one consistent picture), each within `paging.deadline` of being
/// asked for and the first also by `first_by` when given: the cache at that revision, and the
/// entries it skipped. Each page is asked for before the one before it is taken in, and parsed
/// on the blocking pool, several at once ([`PagesParsing`]), so etcd serves one while this
/// process parses others. Nothing of a read that fails is kept, so no caller can serve half of
/// one. A compaction past that revision while the pages are read
/// fails the read (etcd says so).
pub(crate) async fn read_fleet_paged(
    client: &Client,
    keys: &FleetKeys,
    paging: ReadPaging,
    first_by: Option<Instant>,
) -> Result<(FleetCache, Vec<Skipped>), ReadFailed> {
    let kv = client
        .kv_client()
        .max_decoding_message_size(MAX_FLEET_READ_BYTES);
    let prefix = keys.all().into_bytes();
    let end = prefix_end(&prefix);
    let mut asked = PageAsked::new(&kv, prefix, &end, 0, paging);
    if let Some(first_by) = first_by {
        asked.by = asked.by.min(first_by);
    }
    let mut response = asked.answer(0).await?;
    let at = response.header().map_or(0, |header| header.revision());
    let mut read = ColdRead::new(keys.clone(), at);
    let mut parsing = PagesParsing::default();
    let mut page = 0;
    loop {
        let kvs = response.take_kvs();
        let next = match (response.more(), kvs.last()) {
            (true, Some(last)) => {
                // The least key after the last one read.
                let mut from = last.key().to_vec();
                from.push(0);
                Some(PageAsked::new(&kv, from, &end, at, paging))
            }
            _ => None,
        };
        let keys = keys.clone();
        parsing.push(move || ParsedPage::of(&keys, kvs.iter().map(|kv| (kv.key(), kv.value()))));
        let Some(mut next) = next else { break };
        while parsing.full()
            && let Some(oldest) = parsing.oldest().await
        {
            read.take(oldest?);
        }
        page += 1;
        response = next.answer(page).await?;
    }
    while let Some(oldest) = parsing.oldest().await {
        read.take(oldest?);
    }
    Ok(read.finish())
}

/// One range asked of etcd, under way on its own task; dropping it abandons the request.
struct PageAsked {
    answer: tokio::task::JoinHandle<Result<GetResponse, etcd_client::Error>>,
    /// When it must have answered.
    by: Instant,
}

impl PageAsked {
    /// Ask for at most `paging.keys` keys from `from` to `end` at revision `at` (0: the
    /// latest), now.
    fn new(kv: &KvClient, from: Vec<u8>, end: &[u8], at: i64, paging: ReadPaging) -> Self {
        let options = (etcd_client::GetOptions::new())
            .with_range(end.to_vec())
            .with_limit(paging.keys.max(1))
            .with_revision(at);
        let mut kv = kv.clone();
        Self {
            answer: tokio::spawn(async move { kv.get(from, Some(options)).await }),
            by: Instant::now() + paging.deadline,
        }
    }

    /// Its answer, page number `page` of the read (for the failure's words).
    async fn answer(&mut self, page: usize) -> Result<GetResponse, ReadFailed> {
        match timeout_at(self.by, &mut self.answer).await {
            Ok(Ok(answer)) => answer.map_err(ReadFailed::Etcd),
            // The request's task panicked or was cancelled: no answer came.
            Ok(Err(_)) | Err(_) => Err(ReadFailed::Silent { page }),
        }
    }
}

impl Drop for PageAsked {
    fn drop(&mut self) {
        self.answer.abort();
    }
}

/// The end of the range of keys that start with `prefix` (etcd's own rule: the prefix with
/// its last byte below 0xff raised by one, what follows cut).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: to the end of the keyspace.
    vec![0]
}

/// A client for `settings`, whose deadlines fit a lease of `ttl`.
///
/// Every request and the HTTP/2 keepalive answer within `ttl / 3`, so a silent server is
/// noticed, and a lease can still be renewed in time, well within one TTL. A TLS file or
/// credentials file that cannot be used is refused as `InvalidArgs`, naming the file.
pub async fn connect(settings: &EtcdSettings, ttl: Duration) -> Result<Client, etcd_client::Error> {
    let deadline = request_deadline(ttl);
    let mut options = ConnectOptions::new()
        .with_connect_timeout(deadline)
        .with_timeout(deadline)
        .with_keep_alive(deadline / 2, deadline)
        .with_keep_alive_while_idle(true);
    if let Some(tls) = tls_options(settings).map_err(etcd_client::Error::InvalidArgs)? {
        options = options.with_tls(tls);
    }
    if let Some(path) = &settings.credentials_file {
        let (user, password) = credentials(path).map_err(etcd_client::Error::InvalidArgs)?;
        options = options.with_user(user, password);
    }
    Client::connect(settings.endpoints.clone(), Some(options)).await
}

/// Read the TLS and credentials files `settings` name, as [`connect`] will, so that a start
/// with a file that cannot be used is refused at once, naming it, instead of retried for ever.
/// (Each connection still reads them again: a file mended later is taken at the next try.)
pub fn check_files(settings: &EtcdSettings) -> Result<(), String> {
    tls_options(settings)?;
    if let Some(path) = &settings.credentials_file {
        credentials(path)?;
    }
    Ok(())
}

/// The username and password in the credentials file at `path`.
fn credentials(path: &Path) -> Result<(String, String), String> {
    let text = read_private_text(path)?;
    parse_credentials(&text).map_err(|why| in_file(path, why))
}

/// How long any one call to etcd may take under a lease of `ttl`: a third of it (at least
/// 200 ms), so a call that times out still leaves time to renew before the lease lapses.
pub(crate) fn request_deadline(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(200))
}

/// The TLS configuration the settings ask for, if any.
fn tls_options(settings: &EtcdSettings) -> Result<Option<TlsOptions>, String> {
    let identity = match (&settings.client_cert_file, &settings.client_key_file) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(Identity::from_pem(read(cert)?, read(key)?)),
        _ => {
            return Err(
                "a client certificate and its key go together: give both files or neither"
                    .to_owned(),
            );
        }
    };
    if settings.ca_file.is_none() && identity.is_none() {
        return Ok(None);
    }
    let mut tls = TlsOptions::new();
    if let Some(ca) = &settings.ca_file {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    if let Some(identity) = identity {
        tls = tls.identity(identity);
    }
    Ok(Some(tls))
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn in_file(path: &Path, problem: &str) -> String {
    format!("etcd credentials file {}: {problem}", path.display())
}

/// `username:password` (one line; the password may hold `:`), both non-empty.
fn parse_credentials(text: &str) -> Result<(String, String), &'static str> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => {
            Ok((user.to_owned(), password.to_owned()))
        }
        _ => Err("expected one line `username:password`, both non-empty"),
    }
}

/// The text of a file only this user can read: not a symlink, a regular file of ours, no bit
/// for group or others, small, UTF-8. Refused otherwise, naming the file and what is wrong.
fn read_private_text(path: &Path) -> Result<String, String> {
    let (bytes, _) = read_private_file(path, MAX_CREDENTIALS_FILE_BYTES).map_err(|problem| {
        let problem = match problem {
            PrivateFileProblem::Io(e) => e.to_string(),
            PrivateFileProblem::Symlink => "it is a symlink; name the file itself".to_owned(),
            PrivateFileProblem::NotRegular => "it is not a regular file".to_owned(),
            PrivateFileProblem::ForeignOwner { owner, me } => {
                format!("it is owned by uid {owner}, not by this user (uid {me})")
            }
            PrivateFileProblem::OpenToOthers { mode } => format!(
                "its mode {mode:04o} lets group or others read it, so the password may be \
                 known: chmod 600 it (and change the password)"
            ),
            PrivateFileProblem::TooLarge => "it is too large to be a credentials file".to_owned(),
        };
        in_file(path, &problem)
    })?;
    String::from_utf8(bytes).map_err(|_| in_file(path, "it is not text"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_prefix_ends_where_etcd_ends_it() {
        assert_eq!(prefix_end(b"/p/"), b"/p0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), [0]);
    }

    #[test]
    fn a_call_may_take_a_third_of_the_ttl_and_no_less_than_200_ms() {
        assert_eq!(
            request_deadline(Duration::from_secs(15)),
            Duration::from_secs(5)
        );
        assert_eq!(
            request_deadline(Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(
            request_deadline(Duration::from_millis(300)),
            Duration::from_millis(200)
        );
    }

    #[test]
    fn credentials_are_one_line_of_user_colon_password() {
        let pair = |u: &str, p: &str| Ok((u.to_owned(), p.to_owned()));
        assert_eq!(parse_credentials("root:s3cret\n"), pair("root", "s3cret"));
        assert_eq!(parse_credentials("root:a:b\r\n"), pair("root", "a:b"));
        for bad in ["", "\n", "root", ":pw", "root:", "root:\n"] {
            assert!(parse_credentials(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_credentials_file_others_can_read_or_a_symlink_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("etcd-credentials");
        std::fs::write(&file, "root:pw\n").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(read_private_text(&file), Ok("root:pw\n".to_owned()));

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let refused = read_private_text(&file).expect_err("group-readable");
        assert!(refused.contains(&file.display().to_string()), "{refused}");
        assert!(
            refused.contains("0640") && refused.contains("chmod 600"),
            "{refused}"
        );

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert!(
            read_private_text(&link)
                .expect_err("a symlink")
                .contains("symlink")
        );
        assert!(
            read_private_text(dir.path())
                .expect_err("a directory")
                .contains("regular")
        );
        let missing = read_private_text(&dir.path().join("missing")).expect_err("missing");
        assert!(missing.contains("missing"), "{missing}");
    }

    #[test]
    fn tls_is_off_unless_asked_and_a_certificate_needs_its_key() {
        assert_eq!(
            tls_options(&EtcdSettings::default()).map(|t| t.is_some()),
            Ok(false)
        );
        let half = EtcdSettings {
            client_cert_file: Some("/nonexistent/cert.pem".into()),
            ..EtcdSettings::default()
        };
        assert!(
            tls_options(&half)
                .expect_err("no key")
                .contains("go together")
        );
        let unreadable = EtcdSettings {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..EtcdSettings::default()
        };
        assert!(
            tls_options(&unreadable)
                .expect_err("no file")
                .contains("/nonexistent/ca.pem")
        );
    }
}
