//! `murmur-registry completions bash|zsh|fish`, `man` and the hidden `session-ids`, run as the
//! real binary, with the scripts run by the real shells and the page read by groff and man.
//!
//! Covered here:
//! - every script names every subcommand and every flag that `--help` lists (walked from the
//!   binary's own help, nested commands included) and never offers the hidden `session-ids`;
//! - bash accepts its script (`bash -n`) and completes through it: subcommands, a
//!   subcommand's flags (clap_complete's hyphenated-name bug mended), `stop`'s session from the
//!   running directory's record names; zsh (through a pseudo-terminal) and fish likewise, each
//!   `#[ignore]`d where the shell may be missing;
//! - `session-ids` lists only `<id>.json` names (not hidden ones, not junk), sorted, and
//!   changes nothing: no record opened or pruned (a dead pid's stays), no door asked (its
//!   listener never sees a connection), no directory created when there is none;
//! - `man` prints a roff page naming every subcommand; `--out-dir` writes one page per
//!   command; groff (`-ww`) and `man -l` read them without a warning (ignored without them).

mod common;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use common::binary::{BIN, Finished, Home, run};
use common::{ExitedChild, RecordJson, dir_snapshot, session_id, write_raw};

/// `murmur-registry <args>` with `HOME` = `home` and nothing else of the test's environment.
fn binary(home: &Path, args: &[&str]) -> Finished {
    let mut cmd = Command::new(BIN);
    cmd.env_clear().env("HOME", home).args(args);
    run(cmd)
}

/// `PATH` with the binary's directory first, as an installed binary would be found.
fn path_with_binary() -> String {
    let dir = Path::new(BIN).parent().expect("the binary's directory");
    format!("{}:/usr/local/bin:/usr/bin:/bin", dir.display())
}

/// A shell command (`shell` and its arguments) run with `HOME` = `home` and the binary on PATH.
fn shell(home: &Path, shell_and_args: &[&str]) -> Finished {
    let mut cmd = Command::new(shell_and_args[0]);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", path_with_binary())
        .env("TERM", "dumb")
        .args(&shell_and_args[1..]);
    run(cmd)
}

/// The long flags an option line of `--help` starts with (`  -h, --help`, `      --bind <BIND>`).
fn flags_in_help(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|line| {
            let option = line.trim_start();
            let option = option
                .strip_prefix('-')
                .and_then(|o| o.split_once(", "))
                .map_or(option, |(_, long)| long);
            let name = option.strip_prefix("--")?;
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (line.starts_with("  ") && !name.is_empty()).then(|| format!("--{name}"))
        })
        .collect()
}

/// The subcommands a `--help` lists under `Commands:`, `help` left out.
fn commands_in_help(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every command path (`[]`, `["serve"]`, `["service", "install"]` …) with its flags.
fn command_tree(home: &Path) -> Vec<(Vec<String>, BTreeSet<String>)> {
    let mut found = Vec::new();
    let mut pending = vec![Vec::<String>::new()];
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = binary(home, &args);
        help.assert_success();
        for sub in commands_in_help(&help.stdout) {
            let mut child = path.clone();
            child.push(sub);
            pending.push(child);
        }
        found.push((path, flags_in_help(&help.stdout)));
    }
    found
}

fn script(home: &Home, shell: &str) -> String {
    let done = binary(home.path(), &["completions", shell]);
    done.assert_success();
    assert!(done.stderr.is_empty(), "{done:#?}");
    done.stdout
}

#[test]
fn every_script_names_every_subcommand_and_flag() {
    let home = Home::new();
    let tree = command_tree(home.path());
    let subcommands: BTreeSet<&String> = tree.iter().flat_map(|(path, _)| path).collect();
    for expected in [
        "serve",
        "stop",
        "service",
        "install",
        "uninstall",
        "completions",
        "man",
    ] {
        assert!(
            subcommands.iter().any(|s| *s == expected),
            "{expected} found in --help"
        );
    }
    for shell in ["bash", "zsh", "fish"] {
        let text = script(&home, shell);
        // Whole words, so `--fleet` is not found inside `--fleet-etcd`, nor `install` inside
        // `uninstall`.
        let words: std::collections::HashSet<&str> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .collect();
        for sub in &subcommands {
            assert!(words.contains(sub.as_str()), "{shell} script lacks {sub}");
        }
        for (path, flags) in &tree {
            for flag in flags {
                // Fish names a flag without its dashes (`-l timeout`).
                let named = if shell == "fish" {
                    text.contains(&format!("-l {}", flag.trim_start_matches('-')))
                        || words.contains(flag.as_str())
                } else {
                    words.contains(flag.as_str())
                };
                assert!(named, "{shell} script lacks {flag} of {path:?}");
            }
        }
        assert!(
            !text.contains("\"session-ids\"") && !text.contains("'session-ids'"),
            "{shell}: the hidden command is offered"
        );
    }
}

#[test]
fn an_unknown_shell_is_refused() {
    let home = Home::new();
    let done = binary(home.path(), &["completions", "tcsh"]);
    assert_eq!(done.status.code(), Some(2), "{done:#?}");
    assert!(done.stdout.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Session ids
// ---------------------------------------------------------------------------------------------

/// A home whose running directory holds two records (one of a dead process, one whose door is
/// a listener the test holds) and names that are not records.
struct SessionsHome {
    home: Home,
    ids: Vec<String>,
    door: TcpListener,
}

impl SessionsHome {
    fn new() -> Self {
        let home = Home::new();
        let running = home.running_dir();
        let door = TcpListener::bind("127.0.0.1:0").expect("a door listener");
        door.set_nonblocking(true).expect("nonblocking");
        let dead = ExitedChild::spawn().record();
        let live = RecordJson::new(&session_id()).url(format!(
            "http://127.0.0.1:{}/",
            door.local_addr().unwrap().port()
        ));
        for record in [&dead, &live] {
            home.write(record);
        }
        write_raw(&running, "notes.txt", b"not a record");
        write_raw(&running, "bad name.json", b"{}");
        write_raw(&running, &format!(".{}.json.1.tmp", session_id()), b"{}");
        let mut ids = vec![dead.session_id(), live.session_id()];
        ids.sort();
        Self { home, ids, door }
    }

    fn path(&self) -> &Path {
        self.home.path()
    }

    /// Fails if anything changed in the running directory or asked the door.
    fn assert_untouched(&self, before: &std::collections::BTreeMap<String, common::EntrySnapshot>) {
        assert_eq!(
            &dir_snapshot(&self.home.running_dir()),
            before,
            "nothing changed"
        );
        assert_eq!(
            self.door.accept().map(|_| ()).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock,
            "no door was asked"
        );
    }
}

#[test]
fn session_ids_lists_record_names_and_changes_nothing() {
    let sessions = SessionsHome::new();
    let before = dir_snapshot(&sessions.home.running_dir());
    let done = binary(sessions.path(), &["session-ids"]);
    done.assert_success();
    assert_eq!(done.stdout_lines(), sessions.ids, "{done:#?}");
    assert!(done.stderr.is_empty(), "{done:#?}");
    sessions.assert_untouched(&before);
}

#[test]
fn session_ids_without_a_running_directory_lists_nothing_and_creates_nothing() {
    let home = Home::new();
    let done = binary(home.path(), &["session-ids"]);
    done.assert_success();
    assert!(
        done.stdout.is_empty() && done.stderr.is_empty(),
        "{done:#?}"
    );
    assert!(dir_snapshot(home.path()).is_empty(), "nothing created");

    // Without HOME the password database's home is read: root's here, which holds no records.
    let mut cmd = Command::new(BIN);
    cmd.env_clear().arg("session-ids");
    let done = run(cmd);
    done.assert_success();
    assert!(
        done.stdout.is_empty() && done.stderr.is_empty(),
        "no HOME: {done:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// bash
// ---------------------------------------------------------------------------------------------

/// Bash sources the script the binary prints, then completes the words given (the last one
/// is the word under the cursor) through the function `complete` registered, printing each
/// candidate on its own line.
const BASH_COMPLETE: &str = r#"source <(murmur-registry completions bash) || exit 1
COMP_WORDS=("$@")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="$*"
COMP_POINT=${#COMP_LINE}
registered=$(complete -p murmur-registry) || exit 1
function=${registered##* -F }
function=${function%% *}
"$function" murmur-registry "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}""#;

fn bash_candidates(home: &Path, words: &[&str]) -> BTreeSet<String> {
    let mut args = vec!["bash", "--norc", "--noprofile", "-c", BASH_COMPLETE, "bash"];
    args.extend_from_slice(words);
    let done = shell(home, &args);
    done.assert_success();
    assert!(done.stderr.is_empty(), "{done:#?}");
    done.stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|i| (*i).to_owned()).collect()
}

#[test]
fn bash_accepts_the_script() {
    let home = Home::new();
    let file = home.path().join("murmur-registry.bash");
    std::fs::write(&file, script(&home, "bash")).unwrap();
    let done = shell(home.path(), &["bash", "-n", file.to_str().unwrap()]);
    done.assert_success();
    assert!(done.stderr.is_empty(), "{done:#?}");
}

#[test]
fn bash_completes_subcommands_flags_and_session_ids() {
    let sessions = SessionsHome::new();
    let before = dir_snapshot(&sessions.home.running_dir());
    let home = sessions.path();
    assert_eq!(
        bash_candidates(home, &["murmur-registry", "se"]),
        set(&["serve", "service"])
    );
    assert_eq!(
        bash_candidates(home, &["murmur-registry", "stop", "--t"]),
        set(&["--timeout"])
    );
    assert_eq!(
        bash_candidates(home, &["murmur-registry", "service", "install", "--f"]),
        set(&["--force"])
    );
    assert_eq!(
        bash_candidates(home, &["murmur-registry", "completions", "f"]),
        set(&["fish"])
    );
    let ids: BTreeSet<String> = sessions.ids.iter().cloned().collect();
    assert_eq!(bash_candidates(home, &["murmur-registry", "stop", ""]), ids);
    assert_eq!(
        bash_candidates(home, &["murmur-registry", "stop", "--timeout", "3", ""]),
        ids
    );
    let first = &sessions.ids[0];
    assert_eq!(
        bash_candidates(home, &["murmur-registry", "stop", first]),
        set(&[first])
    );
    // A flag's value is not a session.
    assert!(
        !bash_candidates(home, &["murmur-registry", "stop", "--timeout", ""])
            .iter()
            .any(|c| c.starts_with("ses_"))
    );
    sessions.assert_untouched(&before);
}

// ---------------------------------------------------------------------------------------------
// zsh
// ---------------------------------------------------------------------------------------------

#[test]
#[ignore = "needs zsh"]
fn zsh_accepts_the_script() {
    let home = Home::new();
    let file = home.path().join("_murmur-registry");
    std::fs::write(&file, script(&home, "zsh")).unwrap();
    let done = shell(home.path(), &["zsh", "-n", file.to_str().unwrap()]);
    done.assert_success();
    assert!(done.stderr.is_empty(), "{done:#?}");
}

/// An interactive zsh on a pseudo-terminal (zpty), with the script installed as
/// `_murmur-registry` in `$1` (on `fpath`, as an operator installs it) and compinit run: the
/// line `$2` is typed once zle reads keys (it turns bracketed paste on: `2004h`; before, the
/// terminal would eat `^U`), then a widget that lists the choices, then the line is killed and
/// `echo DONE` run; zle handles keys in order, so the listing is whole once DONE shows.
const ZSH_DRIVE: &str = r#"zmodload zsh/zpty || exit 1
zpty z 'zsh -f -i'
zpty -w z "fpath=(${(q)1} \$fpath); autoload -U compinit; compinit -u -D; PS1='%% '"
zpty -w z "zle -C list-them list-choices _main_complete; bindkey '^T' list-them; LISTMAX=1000"
zpty -w z 'echo RE""ADY'
zpty -r z line '*READY*2004h*'
zpty -n -w z "$2"$'\C-t\C-u'
zpty -w z 'echo DO""NE'
zpty -r z out '*DONE*'
zpty -d z
print -r -- "$out""#;

fn zsh_listing(sessions: &SessionsHome, line: &str) -> String {
    let fpath = sessions.path().join("zfunc");
    std::fs::create_dir_all(&fpath).unwrap();
    std::fs::write(
        fpath.join("_murmur-registry"),
        script(&sessions.home, "zsh"),
    )
    .unwrap();
    let done = shell(
        sessions.path(),
        &[
            "zsh",
            "-f",
            "-c",
            ZSH_DRIVE,
            "zsh",
            fpath.to_str().unwrap(),
            line,
        ],
    );
    done.assert_success();
    done.stdout
}

#[test]
#[ignore = "needs zsh"]
fn zsh_completes_subcommands_flags_and_session_ids() {
    let sessions = SessionsHome::new();
    let before = dir_snapshot(&sessions.home.running_dir());
    let ids = zsh_listing(&sessions, "murmur-registry stop ");
    for id in &sessions.ids {
        assert!(ids.contains(id.as_str()), "{id} not offered:\n{ids}");
    }
    assert!(!ids.contains("bad name") && !ids.contains("notes"), "{ids}");
    let flags = zsh_listing(&sessions, "murmur-registry stop --");
    for flag in ["--timeout", "--running-dir"] {
        assert!(flags.contains(flag), "{flag} not offered:\n{flags}");
    }
    let subcommands = zsh_listing(&sessions, "murmur-registry ");
    for sub in ["serve", "service", "stop", "man", "completions"] {
        assert!(
            subcommands.contains(sub),
            "{sub} not offered:\n{subcommands}"
        );
    }
    assert!(!subcommands.contains("session-ids"), "{subcommands}");
    sessions.assert_untouched(&before);
}

// ---------------------------------------------------------------------------------------------
// fish
// ---------------------------------------------------------------------------------------------

/// Fish sources the script the binary prints and lists what it completes for the line `$argv`.
const FISH_COMPLETE: &str = "murmur-registry completions fish | source; or exit 1
complete -C \"$argv\"";

fn fish_candidates(home: &Path, line: &str) -> BTreeSet<String> {
    let done = shell(home, &["fish", "--no-config", "-c", FISH_COMPLETE, line]);
    done.assert_success();
    assert!(done.stderr.is_empty(), "{done:#?}");
    done.stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
#[ignore = "needs fish"]
fn fish_accepts_the_script() {
    let home = Home::new();
    let file = home.path().join("murmur-registry.fish");
    std::fs::write(&file, script(&home, "fish")).unwrap();
    let done = shell(
        home.path(),
        &["fish", "--no-config", "-n", file.to_str().unwrap()],
    );
    done.assert_success();
    assert!(done.stderr.is_empty(), "{done:#?}");
}

#[test]
#[ignore = "needs fish"]
fn fish_completes_subcommands_flags_and_session_ids() {
    let sessions = SessionsHome::new();
    let before = dir_snapshot(&sessions.home.running_dir());
    let home = sessions.path();
    assert_eq!(
        fish_candidates(home, "murmur-registry se"),
        set(&["serve", "service"])
    );
    assert_eq!(
        fish_candidates(home, "murmur-registry stop --t"),
        set(&["--timeout"])
    );
    let ids: BTreeSet<String> = sessions.ids.iter().cloned().collect();
    assert_eq!(fish_candidates(home, "murmur-registry stop "), ids);
    sessions.assert_untouched(&before);
}

// ---------------------------------------------------------------------------------------------
// man
// ---------------------------------------------------------------------------------------------

#[test]
fn man_prints_a_page_naming_every_subcommand() {
    let home = Home::new();
    let done = binary(home.path(), &["man"]);
    done.assert_success();
    let page = &done.stdout;
    assert!(
        page.starts_with(".ie") || page.contains("\n.TH murmur-registry 1"),
        "{page}"
    );
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "SUBCOMMANDS",
        "VERSION",
    ] {
        assert!(
            page.contains(&format!("\n.SH {section}\n")),
            "no {section}:\n{page}"
        );
    }
    assert!(page.is_ascii(), "man reads a page in the C locale too");
    let top = binary(home.path(), &["--help"]);
    top.assert_success();
    let subcommands = commands_in_help(&top.stdout);
    assert!(subcommands.len() >= 9, "{subcommands:?}");
    for sub in subcommands {
        assert!(
            page.contains(&format!("murmur\\-registry\\-{sub}(1)")),
            "{sub} not named:\n{page}"
        );
    }
    assert!(
        !page.contains("session\\-ids"),
        "the hidden command is not named"
    );
    assert!(
        !page.contains("murmur\\-registry\\-help(1)"),
        "no page for help"
    );
}

#[test]
fn man_out_dir_writes_a_page_per_command() {
    let home = Home::new();
    let dir = home.path().join("man/man1");
    binary(home.path(), &["man", "--out-dir", dir.to_str().unwrap()]).assert_success();
    let pages: BTreeSet<String> = dir_snapshot(&dir).into_keys().collect();
    let mut expected = set(&["murmur-registry.1"]);
    for (path, _) in command_tree(home.path()) {
        if !path.is_empty() {
            expected.insert(format!("murmur-registry-{}.1", path.join("-")));
        }
    }
    assert_eq!(pages, expected);
    let install = std::fs::read_to_string(dir.join("murmur-registry-service-install.1")).unwrap();
    assert!(install.contains("\\-\\-force"), "{install}");
}

#[test]
#[ignore = "needs groff and man (Debian man-db)"]
fn groff_and_man_read_every_page_without_a_warning() {
    let home = Home::new();
    let dir = home.path().join("man1");
    binary(home.path(), &["man", "--out-dir", dir.to_str().unwrap()]).assert_success();
    let printed = home.path().join("printed.1");
    std::fs::write(&printed, binary(home.path(), &["man"]).stdout).unwrap();
    let mut pages: Vec<_> = dir_snapshot(&dir)
        .into_keys()
        .map(|p| dir.join(p))
        .collect();
    pages.push(printed);
    for page in &pages {
        let page = page.to_str().unwrap();
        let groff = shell(
            home.path(),
            &["groff", "-k", "-man", "-Tutf8", "-ww", "-z", page],
        );
        groff.assert_success();
        assert!(groff.stderr.is_empty(), "groff warns on {page}: {groff:#?}");
        let mut man = Command::new("man");
        man.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("MANWIDTH", "80")
            .args(["--warnings", "-P", "cat", "-l", page]);
        let man = run(man);
        man.assert_success();
        assert!(man.stderr.is_empty(), "man warns on {page}: {man:#?}");
        assert!(man.stdout.contains("NAME"), "{man:#?}");
    }
    let main = std::fs::read_to_string(dir.join("murmur-registry.1")).unwrap();
    assert_eq!(
        main,
        std::fs::read_to_string(&pages[pages.len() - 1]).unwrap()
    );
}

#[test]
fn completions_and_man_help_have_examples() {
    let home = Home::new();
    for sub in ["completions", "man"] {
        let done = binary(home.path(), &[sub, "--help"]);
        done.assert_success();
        assert!(done.stdout.contains("Example"), "{sub}: {done:#?}");
    }
}
