//! `dashboard`: the login link to the running registry's dashboard, printed, and opened in a
//! browser when there is a display.
//!
//! Invariants kept here:
//! - The token travels in the link's fragment (`/#token=…`), which a browser never sends; the
//!   page takes it from there and removes it from the address bar.
//! - The token is never on a command line (`/proc/<pid>/cmdline` is readable by every user):
//!   the browser is given the `file://` path of a 0600 redirect page in the registry's own
//!   0700 directory, written whole, which holds the link.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, bail};
use clap::Args;

use super::status::NOT_RUNNING;
use super::{discovery_dir, runtime, shown};
use crate::discovery::{Found, find, plain_client};
use crate::private_fs::{open_dir, write_atomically};
use crate::token;

/// The redirect page's name, beside the discovery file.
const REDIRECT_NAME: &str = "dashboard.html";

#[derive(Debug, Args)]
pub(super) struct DashboardArgs {
    /// The registry's token file; its discovery file is beside it
    /// [default: $HOME/.murmur/registry/token].
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Only print the link; do not open a browser.
    #[arg(long)]
    no_open: bool,
}

pub(super) fn dashboard(args: DashboardArgs) -> anyhow::Result<ExitCode> {
    let dir = discovery_dir(args.token_file.as_ref())?;
    let client = plain_client().context("cannot build an HTTP client")?;
    let info = match runtime()?.block_on(find(&dir, &client)) {
        Found::Running(info) => info,
        Found::NotRunning(why) => {
            writeln!(
                std::io::stdout(),
                "not running: {}; start it with `murmur-registry serve`",
                crate::control_chars::escaped(&why)
            )?;
            return Ok(ExitCode::from(NOT_RUNNING));
        }
        Found::Untrusted(why) => bail!(why),
    };
    let addr = info
        .address()
        .context("the discovery file names no address")?;
    let token = token::read_existing(&info.token_file)?;
    let link = login_link(addr, &token);
    writeln!(std::io::stdout(), "{link}")?;
    if !args.no_open && has_display() {
        let page = write_redirect(&dir, &link)?;
        open_in_browser(&page);
    }
    Ok(ExitCode::SUCCESS)
}

/// `http://ADDR/#token=TOKEN`, the token percent-encoded beyond the unreserved characters.
fn login_link(addr: SocketAddr, token: &str) -> String {
    let mut link = format!("http://{addr}/#token=");
    for byte in token.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            link.push(char::from(byte));
        } else {
            link.push_str(&format!("%{byte:02X}"));
        }
    }
    link
}

/// Whether a browser could be shown: an X11 or Wayland display is named.
fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// Write the redirect page to `link` (0600, whole) in `dir`; answers its path.
fn write_redirect(dir: &Path, link: &str) -> anyhow::Result<PathBuf> {
    // `link` holds only an IP address, a port and unreserved or percent-encoded characters:
    // nothing HTML or an attribute would read as markup.
    let page = format!(
        "<!doctype html>\n<meta charset=\"utf-8\">\n<meta name=\"referrer\" content=\"no-referrer\">\n\
         <meta http-equiv=\"refresh\" content=\"0;url={link}\">\n<title>murmur registry</title>\n\
         <p><a href=\"{link}\">Open the murmur registry dashboard</a></p>\n"
    );
    let path = dir.join(REDIRECT_NAME);
    let dir_fd = open_dir(dir).with_context(|| format!("cannot open {}", shown(dir)))?;
    write_atomically(&dir_fd, REDIRECT_NAME, page.as_bytes())
        .with_context(|| format!("cannot write {}", shown(&path)))?;
    Ok(path)
}

/// Ask the desktop to open `page` (`xdg-open`, not waited for); a failure is said, not fatal:
/// the link is printed already.
fn open_in_browser(page: &Path) {
    let opened = Command::new("xdg-open")
        .arg(page)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Err(error) = opened {
        let _ = writeln!(
            std::io::stderr(),
            "could not open a browser (xdg-open: {error}); open the link above"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_encoded_into_the_fragment() {
        let addr: SocketAddr = "127.0.0.1:7420".parse().unwrap();
        assert_eq!(
            login_link(addr, "ab12-_.~"),
            "http://127.0.0.1:7420/#token=ab12-_.~"
        );
        assert_eq!(
            login_link(addr, "a&b#c\"<"),
            "http://127.0.0.1:7420/#token=a%26b%23c%22%3C"
        );
    }
}
