//! `murmur-registry service install` / `service uninstall`, run as the real binary on a private
//! temporary `HOME` (and `XDG_CONFIG_HOME`), and the unit it writes read back as systemd reads
//! it.
//!
//! Covered here:
//! - where the unit goes (`$XDG_CONFIG_HOME/systemd/user`, else `~/.config/systemd/user`, a
//!   relative `XDG_CONFIG_HOME` ignored), created private (0700) with the file at 0600;
//! - `ExecStart=` parsed back by systemd.syntax's rules gives this binary's canonical path,
//!   `serve` and every option word for word, awkward ones too (spaces, quotes, backslashes,
//!   `%` specifiers, `$` variables, control characters); a binary path with spaces, quotes and
//!   `%` is named exactly, one with `$` is refused;
//! - a bad serve option, an empty word or a bare `;` is refused and nothing is written (nor
//!   changed, when a unit is there);
//! - a unit this command did not write, or one that differs, is kept unless `--force`; the
//!   same unit again is left untouched;
//! - uninstall removes its own unit, reports a missing one (exit 0), keeps another's and an
//!   enabled one unless `--force`;
//! - the registry runs under the kernel's MemoryDenyWriteExecute (`PR_SET_MDWE`) and answers;
//! - with `systemd-analyze` (ignored by plain `cargo test`): the written unit verifies in user
//!   mode without a word on stderr, with an awkward binary path and options too, and a broken
//!   unit does not, so the check can fail.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::binary::{BIN, Finished, Home, NESTED_PID_NAMESPACE_ENV, User, registry, run};
use common::{ServedBinary, dir_snapshot, mode_of};

const UNIT: &str = "murmur-registry.service";
const ENABLE: &str =
    "systemctl --user daemon-reload && systemctl --user enable --now murmur-registry.service";
const RESTART: &str =
    "systemctl --user daemon-reload && systemctl --user restart murmur-registry.service";
const DISABLE: &str = "systemctl --user disable --now murmur-registry.service";

/// `murmur-registry service <args>` with `HOME` = `home`, `XDG_CONFIG_HOME` unset, run by `bin`.
fn service_with(bin: &Path, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .arg("service")
        .args(args);
    cmd
}

fn service(home: &Home, args: &[&str]) -> Finished {
    run(service_with(Path::new(BIN), home.path(), args))
}

fn unit_dir(home: &Home) -> PathBuf {
    home.path().join(".config/systemd/user")
}

fn unit_path(home: &Home) -> PathBuf {
    unit_dir(home).join(UNIT)
}

fn read_unit(home: &Home) -> String {
    std::fs::read_to_string(unit_path(home)).expect("the unit file")
}

/// The one value of `key=` in a unit's text.
fn setting<'a>(unit: &'a str, key: &str) -> &'a str {
    let values: Vec<&str> = unit
        .lines()
        .filter_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .collect();
    assert_eq!(values.len(), 1, "{key}= once in:\n{unit}");
    values[0]
}

/// The words of an `ExecStart=` value as systemd hands them to the program, by
/// systemd.syntax(7): `%%` becomes `%` (any other specifier is a failure: it would expand),
/// the line splits into words, quotes come off and C escapes are decoded, then `$$` becomes
/// `$` in the arguments (a lone `$` is a failure: it would expand). Every word must be quoted,
/// as install writes them.
fn exec_start_words(value: &str) -> Vec<String> {
    let mut line = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            assert_eq!(chars.next(), Some('%'), "a specifier would expand: {value}");
        }
        line.push(c);
    }
    let mut words = Vec::new();
    let mut rest = line.as_bytes();
    loop {
        while let [b' ', tail @ ..] = rest {
            rest = tail;
        }
        let [b'"', tail @ ..] = rest else {
            assert!(
                rest.is_empty(),
                "unquoted word at {:?}",
                String::from_utf8_lossy(rest)
            );
            break;
        };
        rest = tail;
        let mut word = Vec::new();
        loop {
            match rest {
                [b'"', tail @ ..] => {
                    rest = tail;
                    break;
                }
                [b'\\', b'x', hi, lo, tail @ ..] => {
                    let hex = std::str::from_utf8(&[*hi, *lo]).unwrap().to_owned();
                    word.push(u8::from_str_radix(&hex, 16).expect("\\x escape"));
                    rest = tail;
                }
                [b'\\', escaped, tail @ ..] => {
                    word.push(match escaped {
                        b'\\' | b'"' | b'\'' => *escaped,
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        other => panic!("escape \\{} not written by install", *other as char),
                    });
                    rest = tail;
                }
                [byte, tail @ ..] => {
                    word.push(*byte);
                    rest = tail;
                }
                [] => panic!("unterminated quote in {value}"),
            }
        }
        assert!(
            matches!(rest, [] | [b' ', ..]),
            "a quote must end its word: {value}"
        );
        words.push(String::from_utf8(word).expect("UTF-8 word"));
    }
    for word in words.iter_mut().skip(1) {
        let mut plain = String::new();
        let mut chars = word.chars();
        while let Some(c) = chars.next() {
            if c == '$' {
                assert_eq!(chars.next(), Some('$'), "a variable would expand: {value}");
            }
            plain.push(c);
        }
        *word = plain;
    }
    words
}

fn canonical_bin() -> String {
    std::fs::canonicalize(BIN)
        .expect("canonical binary path")
        .to_str()
        .expect("UTF-8 path")
        .to_owned()
}

/// Serve options that are awkward for a unit file, and that the serve parser accepts.
fn awkward_options() -> Vec<String> {
    [
        "--bind",
        "127.0.0.1:7421",
        "--allow-host",
        "two words",
        "--allow-host",
        r#"quote"and\backslash\"#,
        "--allow-host",
        "%h%n%%",
        "--allow-host",
        "$HOME${HOME}$$",
        "--allow-host",
        "tab\tnew\nline\rcr\u{7}bell",
        "--allow-host",
        "'single' ; semi;colon ü€",
        "--allow-host=-leading-dash",
        "--events-interval",
        "2s 500ms",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `args` with `--` and `options` after them.
fn install_args<'a>(args: &[&'a str], options: &'a [String]) -> Vec<&'a str> {
    let mut all = vec!["install"];
    all.extend_from_slice(args);
    all.push("--");
    all.extend(options.iter().map(String::as_str));
    all
}

#[test]
fn install_writes_a_private_unit_under_the_home_config_and_prints_the_enable_line() {
    let home = Home::new();
    let done = service(&home, &["install"]);
    done.assert_success();
    assert!(
        done.stdout
            .contains(&unit_path(&home).display().to_string())
    );
    assert!(done.stdout.lines().any(|l| l.trim() == ENABLE), "{done:#?}");
    for dir in [".config", ".config/systemd", ".config/systemd/user"] {
        assert_eq!(
            mode_of(&home.path().join(dir)),
            0o700,
            "{dir} created private"
        );
    }
    assert_eq!(mode_of(&unit_path(&home)), 0o600);
    let unit = read_unit(&home);
    assert_eq!(
        exec_start_words(setting(&unit, "ExecStart")),
        [canonical_bin(), "serve".to_owned()]
    );
    assert_eq!(setting(&unit, "Restart"), "on-failure");
    assert_eq!(setting(&unit, "RestartSec"), "2s");
    assert_eq!(setting(&unit, "NoNewPrivileges"), "yes");
    assert_eq!(setting(&unit, "MemoryDenyWriteExecute"), "yes");
    assert_eq!(setting(&unit, "WantedBy"), "default.target");
    let names: Vec<String> = dir_snapshot(&unit_dir(&home)).into_keys().collect();
    assert_eq!(names, [UNIT], "nothing staged is left behind");
}

#[test]
fn an_existing_config_dir_keeps_its_mode() {
    let home = Home::new();
    let config = home.path().join(".config");
    std::fs::create_dir(&config).unwrap();
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    service(&home, &["install"]).assert_success();
    assert_eq!(mode_of(&config), 0o755, "not the command's to change");
    assert_eq!(mode_of(&config.join("systemd")), 0o700);
}

#[test]
fn xdg_config_home_places_the_unit_unless_it_is_relative() {
    let home = Home::new();
    let config = home.path().join("elsewhere");
    let mut cmd = service_with(Path::new(BIN), home.path(), &["install"]);
    cmd.env("XDG_CONFIG_HOME", &config);
    run(cmd).assert_success();
    assert!(config.join("systemd/user").join(UNIT).is_file());
    assert!(!unit_path(&home).exists());

    let mut cmd = service_with(Path::new(BIN), home.path(), &["uninstall"]);
    cmd.env("XDG_CONFIG_HOME", &config);
    run(cmd).assert_success();
    assert!(!config.join("systemd/user").join(UNIT).exists());

    let mut cmd = service_with(Path::new(BIN), home.path(), &["install"]);
    cmd.env("XDG_CONFIG_HOME", "relative/config");
    run(cmd).assert_success();
    assert!(
        unit_path(&home).is_file(),
        "a relative XDG_CONFIG_HOME is ignored"
    );
}

#[test]
fn awkward_serve_options_reach_serve_word_for_word() {
    let home = Home::new();
    let options = awkward_options();
    service(&home, &install_args(&[], &options)).assert_success();
    let unit = read_unit(&home);
    let exec_start = setting(&unit, "ExecStart");
    let mut expected = vec![canonical_bin(), "serve".to_owned()];
    expected.extend(options);
    assert_eq!(exec_start_words(exec_start), expected, "{exec_start}");
    assert!(
        !exec_start.chars().any(char::is_control),
        "one line: {exec_start:?}"
    );
}

/// Hard-link (or copy) the binary into a fresh directory named `dir_name`; answers its path.
fn binary_in(dir_name: &str) -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::Builder::new()
        .prefix("murmur-registry-bin-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory");
    let dir = parent.path().join(dir_name);
    std::fs::create_dir(&dir).unwrap();
    let bin = dir.join("murmur-registry");
    if std::fs::hard_link(BIN, &bin).is_err() {
        std::fs::copy(BIN, &bin).expect("copy the binary");
    }
    (parent, bin)
}

#[test]
fn an_awkward_binary_path_is_named_exactly() {
    let (_keep, bin) = binary_in("with space %h ü");
    let home = Home::new();
    run(service_with(&bin, home.path(), &["install"])).assert_success();
    let words = exec_start_words(setting(&read_unit(&home), "ExecStart"));
    assert_eq!(Path::new(&words[0]), std::fs::canonicalize(&bin).unwrap());
}

#[test]
fn a_binary_path_systemd_would_misread_is_refused_and_nothing_is_written() {
    for (dir_name, named) in [
        ("cost$HOME", '$'),
        ("quo\"te", '"'),
        ("it's", '\''),
        ("back\\slash", '\\'),
        ("new\nline", '\n'),
    ] {
        let (_keep, bin) = binary_in(dir_name);
        let home = Home::new();
        let before = dir_snapshot(home.path());
        let done = run(service_with(&bin, home.path(), &["install"]));
        done.assert_failure();
        assert!(done.stderr.contains(&format!("{named:?}")), "{done:#?}");
        assert_eq!(dir_snapshot(home.path()), before);
    }
}

#[test]
fn refused_serve_options_write_nothing() {
    let home = Home::new();
    let before = dir_snapshot(home.path());
    for options in [
        &["--bogus"][..],
        &["--bind", "not-an-address"],
        &["--max-connections", "0"],
        &["--events-interval", "soon"],
        &["extra-positional"],
        &["--help"],
        &["--version"],
        &["--allow-host", ""],
        &["--allow-host", ";"],
    ] {
        let options: Vec<String> = options.iter().map(|o| (*o).to_owned()).collect();
        let done = service(&home, &install_args(&[], &options));
        done.assert_failure();
        assert!(done.stderr.contains("nothing"), "{options:?}: {done:#?}");
        assert_eq!(
            dir_snapshot(home.path()),
            before,
            "{options:?} wrote something"
        );
    }
    // Options without `--` are not install's: clap's usage error (exit 2).
    let done = service(&home, &["install", "--bind", "127.0.0.1:1"]);
    assert_eq!(done.status.code(), Some(2), "{done:#?}");
    assert_eq!(dir_snapshot(home.path()), before);

    // Nor do they touch a unit that is there.
    service(&home, &["install"]).assert_success();
    let unit = unit_dir(&home);
    let installed = dir_snapshot(&unit);
    let options = ["--bogus".to_owned()];
    service(&home, &install_args(&["--force"], &options)).assert_failure();
    assert_eq!(dir_snapshot(&unit), installed);
}

#[test]
fn install_keeps_a_unit_it_did_not_write_unless_forced() {
    let home = Home::new();
    std::fs::create_dir_all(unit_dir(&home)).unwrap();
    let foreign = "[Service]\nExecStart=/usr/bin/true\n";
    std::fs::write(unit_path(&home), foreign).unwrap();
    let done = service(&home, &["install"]);
    done.assert_failure();
    assert!(done.stderr.contains("--force"), "{done:#?}");
    assert_eq!(read_unit(&home), foreign, "left as it was");

    service(&home, &["install", "--force"]).assert_success();
    assert_eq!(
        exec_start_words(setting(&read_unit(&home), "ExecStart")),
        [canonical_bin(), "serve".to_owned()]
    );
}

#[test]
fn install_keeps_a_unit_that_differs_unless_forced_and_leaves_the_same_one_alone() {
    let home = Home::new();
    service(&home, &["install"]).assert_success();
    let first = read_unit(&home);
    let inode = std::fs::metadata(unit_path(&home)).unwrap().ino();

    let again = service(&home, &["install"]);
    again.assert_success();
    assert!(again.stdout.contains("unchanged"), "{again:#?}");
    assert!(again.stdout.lines().any(|l| l.trim() == ENABLE));
    assert_eq!(
        std::fs::metadata(unit_path(&home)).unwrap().ino(),
        inode,
        "the same unit is not rewritten"
    );

    let options = ["--bind".to_owned(), "127.0.0.1:7422".to_owned()];
    let done = service(&home, &install_args(&[], &options));
    done.assert_failure();
    assert!(done.stderr.contains("differs"), "{done:#?}");
    assert_eq!(read_unit(&home), first);

    let edited = format!("{first}# a local note\n");
    std::fs::write(unit_path(&home), &edited).unwrap();
    service(&home, &["install"]).assert_failure();
    assert_eq!(read_unit(&home), edited, "an edited unit is kept");

    let replaced = service(&home, &install_args(&["--force"], &options));
    replaced.assert_success();
    assert!(
        replaced.stdout.lines().any(|l| l.trim() == RESTART),
        "{replaced:#?}"
    );
    assert!(
        !again.stdout.contains(RESTART),
        "nothing to apply when unchanged"
    );
    let words = exec_start_words(setting(&read_unit(&home), "ExecStart"));
    assert_eq!(words[1..], ["serve", "--bind", "127.0.0.1:7422"]);
}

#[test]
fn install_replaces_a_symlinked_unit_only_when_forced_and_never_its_target() {
    let home = Home::new();
    std::fs::create_dir_all(unit_dir(&home)).unwrap();
    let target = home.path().join("linked.service");
    std::fs::write(&target, "[Service]\nExecStart=/usr/bin/true\n").unwrap();
    std::os::unix::fs::symlink(&target, unit_path(&home)).unwrap();
    service(&home, &["install"]).assert_failure();
    assert!(unit_path(&home).is_symlink());
    service(&home, &["install", "--force"]).assert_success();
    assert!(!unit_path(&home).is_symlink());
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "[Service]\nExecStart=/usr/bin/true\n"
    );
}

#[test]
fn uninstall_removes_its_unit_and_reports_a_missing_one() {
    let home = Home::new();
    let absent = service(&home, &["uninstall"]);
    absent.assert_success();
    assert!(absent.stdout.contains("nothing to remove"), "{absent:#?}");
    assert!(!home.path().join(".config").exists(), "nothing created");

    service(&home, &["install"]).assert_success();
    let done = service(&home, &["uninstall"]);
    done.assert_success();
    assert!(done.stdout.contains("removed"), "{done:#?}");
    assert!(!unit_path(&home).exists());
    assert!(
        dir_snapshot(&unit_dir(&home)).is_empty(),
        "nothing left behind"
    );

    let again = service(&home, &["uninstall"]);
    again.assert_success();
    assert!(again.stdout.contains("nothing to remove"), "{again:#?}");
}

#[test]
fn uninstall_keeps_another_unit_and_an_enabled_one_unless_forced() {
    let home = Home::new();
    std::fs::create_dir_all(unit_dir(&home)).unwrap();
    let foreign = "[Service]\nExecStart=/usr/bin/true\n";
    std::fs::write(unit_path(&home), foreign).unwrap();
    service(&home, &["uninstall"]).assert_failure();
    assert_eq!(read_unit(&home), foreign);
    service(&home, &["uninstall", "--force"]).assert_success();
    assert!(!unit_path(&home).exists());

    service(&home, &["install"]).assert_success();
    let wants = unit_dir(&home).join("default.target.wants");
    std::fs::create_dir(&wants).unwrap();
    std::os::unix::fs::symlink(unit_path(&home), wants.join(UNIT)).unwrap();
    let enabled = service(&home, &["uninstall"]);
    enabled.assert_failure();
    assert!(enabled.stderr.contains(DISABLE), "{enabled:#?}");
    assert!(unit_path(&home).is_file(), "kept while enabled");

    std::fs::remove_file(wants.join(UNIT)).unwrap();
    service(&home, &["uninstall"]).assert_success();
    assert!(!unit_path(&home).exists());
}

/// `PR_SET_MDWE` with `PR_MDWE_REFUSE_EXEC_GAIN`: what `MemoryDenyWriteExecute=yes` asks of
/// the kernel. It holds across `execve`, so python3 sets it and execs the binary.
const UNDER_MDWE: &str = "import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:
    sys.exit('PR_SET_MDWE failed: ' + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[1], sys.argv[1:])";

#[test]
#[ignore = "needs Linux 6.3+ (PR_SET_MDWE)"]
fn serve_runs_and_answers_under_memory_deny_write_execute() {
    let home = Home::new();
    home.running_dir();
    let mut python = Command::new("python3");
    python
        .args(["-c", UNDER_MDWE, BIN, "serve", "--bind", "127.0.0.1:0"])
        .env("HOME", home.path())
        .env(NESTED_PID_NAMESPACE_ENV, "true")
        .env_remove("MURMUR_REGISTRY_BIND")
        .env_remove("RUST_LOG");
    let served = ServedBinary::spawn(python);
    let status = std::fs::read_to_string(format!("/proc/{}/status", served.pid())).unwrap();
    assert!(
        status.lines().any(|l| l.starts_with("Name:\tmurmur-regis")),
        "{status}"
    );
    let mut cmd = registry(home.path(), User::Me);
    cmd.args(["health", "--bind", &served.addr.to_string()]);
    run(cmd).assert_success();
}

// ---------------------------------------------------------------------------------------------
// systemd-analyze verify
// ---------------------------------------------------------------------------------------------

/// `systemd-analyze --user verify --man=no <unit>`. As root outside a login session the user
/// manager needs a runtime directory, so it gets a private one. Verify exits 0 even for a
/// setting it ignores, so a unit that verifies is one that exits 0 with nothing on stderr.
fn verify(unit: &Path) -> Finished {
    let runtime = tempfile::tempdir().expect("a runtime directory");
    let mut cmd = Command::new("systemd-analyze");
    cmd.env("XDG_RUNTIME_DIR", runtime.path())
        .args(["--user", "verify", "--man=no"])
        .arg(unit);
    run(cmd)
}

fn assert_verifies(unit: &Path) {
    let done = verify(unit);
    assert!(
        done.status.success() && done.stderr.is_empty() && done.stdout.is_empty(),
        "systemd-analyze refused {}:\n{}\n{done:#?}",
        unit.display(),
        std::fs::read_to_string(unit).unwrap_or_default()
    );
}

#[test]
#[ignore = "needs systemd-analyze (Debian systemd)"]
fn the_unit_passes_systemd_analyze_verify() {
    let home = Home::new();
    service(&home, &["install"]).assert_success();
    assert_verifies(&unit_path(&home));
}

#[test]
#[ignore = "needs systemd-analyze (Debian systemd)"]
fn a_unit_with_an_awkward_binary_path_and_options_passes_verify() {
    // Verify checks that ExecStart's program exists: it finds the binary only if it read the
    // quoted path as install meant it.
    let (_keep, bin) = binary_in("with space %h ü");
    let home = Home::new();
    let options = awkward_options();
    run(service_with(
        &bin,
        home.path(),
        &install_args(&[], &options),
    ))
    .assert_success();
    assert_verifies(&unit_path(&home));
}

#[test]
#[ignore = "needs systemd-analyze (Debian systemd)"]
fn verify_complains_about_a_broken_unit() {
    let home = Home::new();
    service(&home, &["install"]).assert_success();
    let unit = read_unit(&home);
    for broken in [
        unit.replace("Restart=on-failure", "Restart=sometimes"),
        unit.replace(
            "NoNewPrivileges=yes",
            "NoNewPrivileges=yes\nNoSuchSetting=1",
        ),
        unit.replace(&canonical_bin(), "/nonexistent/murmur-registry"),
    ] {
        std::fs::write(unit_path(&home), &broken).unwrap();
        let done = verify(&unit_path(&home));
        assert!(
            !done.stderr.is_empty(),
            "verify passed:\n{broken}\n{done:#?}"
        );
    }
}

#[test]
fn service_help_has_examples() {
    let home = Home::new();
    for args in [
        &["--help"][..],
        &["install", "--help"],
        &["uninstall", "--help"],
    ] {
        let done = service(&home, args);
        done.assert_success();
        assert!(done.stdout.contains("Example"), "{args:?}: {done:#?}");
    }
}
