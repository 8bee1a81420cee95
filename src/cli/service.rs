//! `service install` / `service uninstall`: the systemd user unit that starts this binary's
//! `serve` at login and restarts it when it fails.
//!
//! Invariants kept here:
//! - The unit names this binary by its canonical path and passes the serve options word for
//!   word: each is quoted and escaped per systemd.syntax(7), and the options are parsed by the
//!   real `serve` parser first; anything refused writes nothing.
//! - A unit file is replaced only when it is byte for byte what this command would write, or
//!   with `--force`; it is written whole (staged and renamed) or not at all.
//! - A unit is removed only while it carries this command's marker (or with `--force`) and
//!   only once it is no longer enabled; a missing unit is reported, not an error.
//! - The hardening never hides the user's processes from the registry: no `ProtectProc`, no
//!   `PrivatePIDs`, nothing that implies `PrivateUsers` in a user unit.
//!
//! `HOME` comes from the parent module; `XDG_CONFIG_HOME` is read here, where it is used.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::{Cli, Command};
use crate::private_fs::{FileFate, unlink_checked, write_atomically};

/// The unit's file name, and the name `systemctl --user` knows it by.
const UNIT_NAME: &str = "murmur-registry.service";

/// The first line of every unit this command writes: how it tells its own from another's.
const MARKER: &str = "# Written by `murmur-registry service install`; \
                      `murmur-registry service uninstall` removes it.";

/// What to run after an install, to start the registry now and at every login.
const ENABLE_LINE: &str =
    "systemctl --user daemon-reload && systemctl --user enable --now murmur-registry.service";

/// What to run after a unit was replaced, for a registry that runs already.
const RESTART_LINE: &str =
    "systemctl --user daemon-reload && systemctl --user restart murmur-registry.service";

/// What to run before an uninstall, so no enabled unit is left without its file.
const DISABLE_LINE: &str = "systemctl --user disable --now murmur-registry.service";

#[derive(Debug, Args)]
pub(super) struct ServiceArgs {
    #[command(subcommand)]
    action: ServiceAction,
}

#[derive(Debug, Subcommand)]
enum ServiceAction {
    /// Write the systemd user unit that runs `serve` (with the options after `--`) at login.
    #[command(after_help = "Examples:\n  murmur-registry service install\n  \
        murmur-registry service install -- --bind 127.0.0.1:7421 --events-interval 5s\n\n\
        The unit goes to $XDG_CONFIG_HOME/systemd/user (default ~/.config/systemd/user).")]
    Install(InstallArgs),
    /// Remove the systemd user unit written by `service install` (disable it first).
    #[command(after_help = "Example:\n  \
        systemctl --user disable --now murmur-registry.service\n  \
        murmur-registry service uninstall")]
    Uninstall(UninstallArgs),
}

#[derive(Debug, Args)]
struct InstallArgs {
    /// Replace a unit this command did not write, or one that differs from what it would write.
    #[arg(long)]
    force: bool,
    /// Options for `serve`, after `--`; checked by the serve parser before anything is written.
    #[arg(last = true, value_name = "SERVE-OPTIONS")]
    serve_options: Vec<String>,
}

#[derive(Debug, Args)]
struct UninstallArgs {
    /// Remove the unit even if this command did not write it, or it is still enabled.
    #[arg(long)]
    force: bool,
}

pub(super) fn service(args: ServiceArgs) -> anyhow::Result<ExitCode> {
    match args.action {
        ServiceAction::Install(args) => install(&args),
        ServiceAction::Uninstall(args) => uninstall(&args),
    }
}

fn install(args: &InstallArgs) -> anyhow::Result<ExitCode> {
    check_serve_options(&args.serve_options)?;
    let binary = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("cannot find this binary's own path for the unit's ExecStart")?;
    let unit = unit_text(&binary, &args.serve_options)?;
    let dir = unit_dir()?;
    create_private_dirs(&dir)?;
    let dir_fd = open_unit_dir(&dir).with_context(|| format!("cannot open {}", dir.display()))?;
    let path = dir.join(UNIT_NAME);
    let mut out = std::io::stdout().lock();
    let existing = read_unit(&dir_fd, &path)?;
    match &existing {
        Some(existing) if existing == unit.as_bytes() => {
            writeln!(
                out,
                "unchanged: {} already holds this unit",
                super::shown(&path)
            )?;
        }
        Some(existing) if !args.force => {
            let why = if is_ours(existing) {
                "differs from the unit this install would write (other options, another binary, \
                 or edited)"
            } else {
                "was not written by `murmur-registry service install`"
            };
            bail!(
                "{} {why}; left as it is: pass --force to replace it",
                path.display()
            );
        }
        _ => {
            write_atomically(&dir_fd, UNIT_NAME, unit.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            writeln!(out, "wrote {}", super::shown(&path))?;
        }
    }
    if existing.is_some_and(|existing| existing != unit.as_bytes()) {
        writeln!(
            out,
            "if it runs already, apply the new unit:\n  {RESTART_LINE}"
        )?;
    }
    writeln!(
        out,
        "to start it now and at every login, run:\n  {ENABLE_LINE}"
    )?;
    Ok(ExitCode::SUCCESS)
}

fn uninstall(args: &UninstallArgs) -> anyhow::Result<ExitCode> {
    let dir = unit_dir()?;
    let path = dir.join(UNIT_NAME);
    let mut out = std::io::stdout().lock();
    let dir_fd = match open_unit_dir(&dir) {
        Ok(fd) => fd,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            writeln!(out, "no unit at {}: nothing to remove", super::shown(&path))?;
            return Ok(ExitCode::SUCCESS);
        }
        Err(error) => return Err(error).context(format!("cannot open {}", dir.display())),
    };
    let Some(existing) = read_unit(&dir_fd, &path)? else {
        writeln!(out, "no unit at {}: nothing to remove", super::shown(&path))?;
        return Ok(ExitCode::SUCCESS);
    };
    if !args.force {
        if !is_ours(&existing) {
            bail!(
                "{} was not written by `murmur-registry service install`; left as it is: pass \
                 --force to remove it",
                path.display()
            );
        }
        // `systemctl --user disable` needs the unit file to find what to undo.
        if is_enabled(&dir) {
            bail!(
                "{} is still enabled; left as it is: run `{DISABLE_LINE}` first",
                path.display()
            );
        }
    }
    // Removed only if it still is the file judged above: a unit written meanwhile stays.
    let judged = |fd: &OwnedFd, name: &str| {
        args.force || read_at(fd, name).is_ok_and(|bytes| bytes == existing)
    };
    // A failed unlink is a fate like the others: the unit stays, and the words say why.
    let fate = unlink_checked(&dir_fd, UNIT_NAME, judged).unwrap_or_else(|e| FileFate::Kept {
        error: e.to_string(),
    });
    match fate {
        FileFate::Removed => {
            writeln!(out, "removed {}", super::shown(&path))?;
            writeln!(
                out,
                "if it still runs, stop it and forget it:\n  \
                 systemctl --user stop murmur-registry.service; systemctl --user daemon-reload"
            )?;
            Ok(ExitCode::SUCCESS)
        }
        FileFate::AlreadyGone => {
            writeln!(out, "no unit at {}: nothing to remove", super::shown(&path))?;
            Ok(ExitCode::SUCCESS)
        }
        FileFate::Replaced => bail!(
            "{} changed while it was being removed; left as it is: run uninstall again",
            path.display()
        ),
        FileFate::Kept { error } => bail!("cannot remove {}: {error}", path.display()),
    }
}

/// Refuse serve options the real `serve` parser refuses, with its own one-line reason.
fn check_serve_options(options: &[String]) -> anyhow::Result<()> {
    let words = ["murmur-registry", "serve"]
        .into_iter()
        .chain(options.iter().map(String::as_str));
    match Cli::try_parse_from(words) {
        Ok(Cli {
            command: Command::Serve(_),
        }) => Ok(()),
        Ok(_) => bail!("the serve options are not serve's; nothing written"),
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            bail!("--help and --version print and exit: not options to serve with; nothing written")
        }
        Err(error) => {
            let rendered = error.to_string();
            let reason = rendered
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ");
            bail!("serve refuses these options, so nothing was written: {reason}")
        }
    }
}

/// Whether a unit file carries the marker this command writes first.
fn is_ours(unit: &[u8]) -> bool {
    unit.split(|&b| b == b'\n').next() == Some(MARKER.as_bytes())
}

/// Whether `systemctl --user enable` has linked the unit into a target in `dir`.
fn is_enabled(dir: &Path) -> bool {
    WANTED_BY_DIRS
        .iter()
        .any(|wants| std::fs::symlink_metadata(dir.join(wants).join(UNIT_NAME)).is_ok())
}

/// The `.wants` directories `enable` links the unit into: the unit's own `WantedBy=`, and
/// the default target's other name, should an operator have enabled it there by hand.
const WANTED_BY_DIRS: [&str; 2] = ["default.target.wants", "graphical-session.target.wants"];

/// The directory of the user's own units: `$XDG_CONFIG_HOME/systemd/user`, or
/// `$HOME/.config/systemd/user` when that is unset, empty or relative (as the XDG spec says).
fn unit_dir() -> anyhow::Result<PathBuf> {
    let config = match std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        _ => super::home()?.join(".config"),
    };
    Ok(config.join("systemd").join("user"))
}

/// Create `dir` and any missing parents, private (0700); existing ones are left as they are.
fn create_private_dirs(dir: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// Open the unit directory. It may be a symlink: dotfile managers often make it one, and it is
/// the user's own configuration either way.
fn open_unit_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The unit file's bytes, or `None` if there is none. A symlink counts as someone else's unit
/// (`systemctl --user link` makes those): its bytes are the link's target path.
fn read_unit(dir_fd: &OwnedFd, path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    match read_at(dir_fd, UNIT_NAME) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The bytes of `dir_fd`/`name` without following a symlink (a symlink gives its target path).
fn read_at(dir_fd: &OwnedFd, name: &str) -> std::io::Result<Vec<u8>> {
    let opened = rustix::fs::openat(
        dir_fd,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    );
    match opened {
        Ok(fd) => {
            let mut bytes = Vec::new();
            std::fs::File::from(fd).read_to_end(&mut bytes)?;
            Ok(bytes)
        }
        Err(Errno::LOOP) => {
            let target = rustix::fs::readlinkat(dir_fd, name, Vec::new())?;
            Ok(target.into_bytes())
        }
        Err(errno) => Err(errno.into()),
    }
}

/// The unit file: `binary serve OPTIONS…` restarted on failure, hardened as far as it can be
/// without hiding the user's capsules from it.
fn unit_text(binary: &Path, serve_options: &[String]) -> anyhow::Result<String> {
    let exec_start = exec_start_line(binary, serve_options)?;
    Ok(format!(
        "{MARKER}
[Unit]
Description=murmur-registry: the verified registry of running murmur capsules
Documentation=man:murmur-registry(1)

[Service]
Type=exec
ExecStart={exec_start}
Restart=on-failure
# Pauses a crash loop without making a real restart wait long.
RestartSec=2s
UMask=0077
# Hardening that leaves every process of the user visible and signallable: no ProtectProc,
# no PrivatePIDs, and nothing that implies PrivateUsers in a user unit (ProtectSystem,
# ProtectHome, PrivateTmp, PrivateDevices, ProtectKernel*, ProtectClock and the like).
NoNewPrivileges=yes
# Loopback TCP for the API and the doors, unix sockets for the journal. Resolving `localhost`
# opens a netlink socket only to sort addresses, and resolves without it.
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
# No SystemCallFilter: no test here can run the registry under one, and a call it misses
# would fail a pidfd, a signal or a probe in the field.

[Install]
WantedBy=default.target
"
    ))
}

/// `ExecStart=`'s value: the binary, `serve` and the options, each one word to systemd.
fn exec_start_line(binary: &Path, serve_options: &[String]) -> anyhow::Result<String> {
    let binary = binary.to_str().with_context(|| {
        format!(
            "{} is not UTF-8, which a unit file must be",
            binary.display()
        )
    })?;
    // systemd refuses a program path with quotes, backslashes or control characters
    // (string_is_safe), and expands `$` only in the arguments, not in the path it runs, so
    // no escape reaches both: such a path is refused rather than run as some other file.
    if let Some(bad) = binary
        .chars()
        .find(|&c| matches!(c, '$' | '"' | '\'' | '\\') || c.is_control())
    {
        bail!(
            "this binary's path {binary:?} holds {bad:?}, which systemd does not accept in the \
             program a unit runs; nothing written: move the binary and run install from there"
        );
    }
    let mut words = vec![quote_word(binary), quote_word("serve")];
    for option in serve_options {
        // A bare `;` separates commands, an empty word is dropped: neither passes through.
        if option.is_empty() || option == ";" {
            bail!(
                "the serve option {option:?} cannot pass through a unit's ExecStart; write it \
                 joined to its flag (--flag=value); nothing written"
            );
        }
        words.push(quote_word(option));
    }
    Ok(words.join(" "))
}

/// One word as systemd reads it back unchanged: double-quoted, with `\` and `"` and control
/// characters C-escaped, `%` doubled (specifiers are expanded first, on the whole line) and `$`
/// doubled (variables are expanded last, in each word).
fn quote_word(word: &str) -> String {
    let mut quoted = String::with_capacity(word.len() + 2);
    quoted.push('"');
    for c in word.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            '%' => quoted.push_str("%%"),
            '$' => quoted.push_str("$$"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            c if c.is_control() => {
                for byte in c.to_string().bytes() {
                    quoted.push_str(&format!("\\x{byte:02x}"));
                }
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_and_escaped_for_systemd() {
        assert_eq!(quote_word("serve"), r#""serve""#);
        assert_eq!(quote_word("a b"), r#""a b""#);
        assert_eq!(quote_word(r#"q"b\"#), r#""q\"b\\""#);
        assert_eq!(quote_word("%h$HOME"), r#""%%h$$HOME""#);
        assert_eq!(quote_word("l1\nl2\tt\r"), r#""l1\nl2\tt\x0d""#);
        assert_eq!(quote_word("\u{85}é"), "\"\\xc2\\x85é\"");
    }

    #[test]
    fn words_systemd_cannot_pass_are_refused() {
        let binary = Path::new("/usr/bin/murmur-registry");
        for refused in ["", ";"] {
            assert!(exec_start_line(binary, &[refused.to_owned()]).is_err());
        }
        assert!(exec_start_line(binary, &["\";\"".to_owned(), "a;".to_owned()]).is_ok());
        for path in [
            "/opt/$x/m",
            "/opt/a\nb/m",
            "/opt/a\"b/m",
            "/opt/a'b/m",
            "/opt/a\\b/m",
        ] {
            assert!(exec_start_line(Path::new(path), &[]).is_err(), "{path:?}");
        }
    }

    #[test]
    fn only_the_marker_line_makes_a_unit_ours() {
        let unit = unit_text(Path::new("/usr/bin/murmur-registry"), &[]).unwrap();
        assert!(is_ours(unit.as_bytes()));
        assert!(!is_ours(b"[Unit]\n"));
        assert!(!is_ours(format!("#{MARKER}\n").as_bytes()));
        assert!(!is_ours(b""));
    }

    #[test]
    fn hardening_never_hides_processes() {
        let unit = unit_text(Path::new("/usr/bin/murmur-registry"), &[]).unwrap();
        let settings: Vec<&str> = unit
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('=').map(|(key, _)| key))
            .collect();
        for hiding in [
            "ProtectProc",
            "ProcSubset",
            "PrivatePIDs",
            "PrivateUsers",
            "ProtectSystem",
            "ProtectHome",
            "PrivateTmp",
            "PrivateDevices",
            "PrivateNetwork",
            "PrivateIPC",
            "PrivateMounts",
            "ProtectKernelTunables",
            "ProtectKernelModules",
            "ProtectKernelLogs",
            "ProtectControlGroups",
            "ProtectClock",
            "ProtectHostname",
            "DynamicUser",
        ] {
            assert!(!settings.contains(&hiding), "{hiding} is set");
        }
        for kept in ["NoNewPrivileges", "Restart", "RestrictAddressFamilies"] {
            assert!(settings.contains(&kept), "{kept} is missing");
        }
    }
}
