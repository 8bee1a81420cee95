//! The operator commands of the `murmur-registry` binary (`ps`, `stop`, `prune`, `openapi`,
//! `token`, `--help`), run as real processes on a private temporary `HOME` (mode 0700), against
//! real records naming real child processes (and, for a live door, a real door server).
//!
//! Covered here:
//! - `ps`: `no running capsules` on an empty home; the table (header, full ids, `name@version`,
//!   `running` / `unreachable`, `yes` / `no`, `HH:MM:SS` and `Nd HH:MM:SS` uptimes, URL or `-`,
//!   newest first, columns aligned); records of gone processes pruned and named on stderr as
//!   `pruned: <id> — <reason>`; `--json`; exit 1 with one clear line when the running directory
//!   is a symlink or belongs to another uid; without `HOME`, the password database's home;
//! - `stop`: `@1` (counted after pruning) ends a capsule with SIGTERM, quickly; a capsule that
//!   ignores SIGTERM gets SIGKILL after `--timeout 1`; `--timeout 0` sends SIGKILL at once;
//!   `@N` past the end, an unknown id, an invalid address and a gone process all exit 1;
//! - unverified processes: under a `hidepid=2` `/proc`, as uid 65534, a root-owned capsule is
//!   listed as `unreachable` / `unverified`, its record kept, and `stop` refuses to signal it;
//!   a stop whose SIGTERM got through and whose SIGKILL the kernel refused says SIGTERM was sent;
//! - `prune` (gone and pid-reused records, junk files; live records and directories kept;
//!   `nothing to prune`), `openapi`, `token` (the path, `--show`, `--rotate`, refusals) and the
//!   `Example` in every subcommand's `--help`;
//! - what `ps` and `prune` never remove: the record of a process whose main thread has exited,
//!   a record uid 65534 cannot open (mode 000: EACCES), names that are not session ids;
//! - an explicit `--running-dir` that group or others may enter refused (exit 1, named, left
//!   as it was); a private one used, each removed junk file named (`removed: <file> — <why>`,
//!   on stderr for `ps`, on stdout for `prune`) without quoting its values;
//! - inside a nested pid namespace `ps` and `prune` refuse to judge host records, unless
//!   `--nested-pid-namespace` says the capsules share it.
//!
//! Synchronisation is by evidence only: a command's exit, a child's exit status, `/proc` polled
//! under a generous deadline. Every child is killed and reaped on drop.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use common::binary::{Finished, Home, NOBODY, User, chown_nobody, is_hex64, registry, run};
use common::{
    DEADLINE, DoorMode, DoorServer, ExitedChild, RecordJson, TestProcess, assert_absent,
    dir_snapshot, mode_of, proc_state, refused_url, session_id, write_raw, wrong_start_token,
};
use serde_json::Value;

/// The `ps` table's columns, in order.
const COLUMNS: [&str; 8] = [
    "SESSION", "CAPSULE", "STATUS", "CPU%", "MEM", "DETACHED", "UPTIME", "URL",
];

// ---------------------------------------------------------------------------------------------
// Fixtures: the command line, the `ps` table
// ---------------------------------------------------------------------------------------------

/// Run `murmur-registry <args>` in `home` as `user`.
fn cli(home: &Home, user: User, args: &[&str]) -> Finished {
    let mut cmd = registry(home.path(), user);
    cmd.args(args);
    run(cmd)
}

/// Run `murmur-registry <args>` in `home` as the test user.
fn me(home: &Home, args: &[&str]) -> Finished {
    cli(home, User::Me, args)
}

/// `started_at` for a session that started `ago` before now (RFC 3339, whole seconds, UTC).
fn started_ago(ago: Duration) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() - ago).to_string()
}

/// `HH:MM:SS` or `Nd HH:MM:SS` back to seconds; panics on anything else.
fn uptime_secs(text: &str) -> u64 {
    let (days, clock) = match text.split_once("d ") {
        Some((days, clock)) => (days.parse::<u64>().expect("days"), clock),
        None => (0, text),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    assert!(
        parts.len() == 3 && parts.iter().all(|p| p.len() == 2),
        "uptime {text:?} is not [Nd ]HH:MM:SS"
    );
    let n: Vec<u64> = parts.iter().map(|p| p.parse().expect("digits")).collect();
    assert!(n[1] < 60 && n[2] < 60, "uptime {text:?}");
    days * 86_400 + n[0] * 3600 + n[1] * 60 + n[2]
}

/// The `ps` table's rows as cells, cut at the header's column starts (so a cell that does not
/// line up with its header comes out wrong). Checks the header itself.
fn parse_table(stdout: &str) -> Vec<Vec<String>> {
    let mut lines = stdout.lines();
    let header = lines.next().expect("a header line");
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        COLUMNS,
        "header: {header:?}"
    );
    let mut starts = Vec::new();
    let mut from = 0;
    for column in COLUMNS {
        let at = from
            + header[from..]
                .find(column)
                .expect("the column in the header");
        if at > 0 {
            assert!(
                header[..at].ends_with("  "),
                "columns are separated by at least two spaces: {header:?}"
            );
        }
        starts.push(at);
        from = at + column.len();
    }
    assert_eq!(starts[0], 0, "SESSION is the first column");
    lines
        .map(|row| {
            (0..COLUMNS.len())
                .map(|i| {
                    let end = starts
                        .get(i + 1)
                        .copied()
                        .unwrap_or(row.len())
                        .min(row.len());
                    let cell = row.get(starts[i]..end).unwrap_or("");
                    if i + 1 < COLUMNS.len() {
                        assert!(
                            cell.ends_with("  ") || cell.trim().is_empty(),
                            "cell {i} of {row:?} runs into the next column"
                        );
                    }
                    cell.trim().to_owned()
                })
                .collect()
        })
        .collect()
}

fn pruned_line(id: &str, reason: &str) -> String {
    format!("pruned: {id} — {reason}")
}

// ---------------------------------------------------------------------------------------------
// ps
// ---------------------------------------------------------------------------------------------

#[test]
fn ps_on_an_empty_home_says_no_running_capsules() {
    let home = Home::new();
    let done = me(&home, &["ps"]);
    done.assert_success();
    assert_eq!(done.stdout, "no running capsules\n");
    assert_eq!(done.stderr, "");
    // Like murmur, it creates the running directory private.
    let running = home.path().join(".murmur").join("running");
    assert_eq!(mode_of(&running), 0o700);
    assert_eq!(mode_of(&home.path().join(".murmur")), 0o700);

    let json = me(&home, &["ps", "--json"]);
    json.assert_success();
    assert_eq!(json.json(), serde_json::json!([]));
}

#[test]
fn ps_prints_the_table_newest_first_and_prunes_what_is_gone() {
    let home = Home::new();
    let begun = Instant::now();

    // Started an hour ago: a script capsule with no door (layers 1-2 decide: running),
    // detached.
    let alpha = TestProcess::sleeping();
    let alpha_ago = Duration::from_secs(3600 + 2 * 60 + 3);
    let a = alpha
        .record()
        .no_door()
        .set("capsule_name", "alpha")
        .set("capsule_version", "1.2.3")
        .set("outlives_launcher", true)
        .set("started_at", started_ago(alpha_ago));
    home.write(&a);

    // A capsule whose door answers for its session: running, with its URL.
    let delta = TestProcess::sleeping();
    let d_id = session_id();
    let door = DoorServer::start(DoorMode::SpecCard(d_id.clone()));
    let d_url = door.url();
    let d_ago = Duration::from_secs(5);
    let d = RecordJson::new(&d_id)
        .process(delta.pid(), &delta.start_token())
        .url(d_url.clone())
        .set("capsule_name", "delta")
        .set("capsule_version", "0.9.0")
        .set("started_at", started_ago(d_ago));
    home.write(&d);

    // A capsule whose door is down: unreachable, started more than two days ago.
    let bravo = TestProcess::sleeping();
    let b_url = refused_url();
    let b_ago = Duration::from_secs(2 * 86_400 + 3 * 3600 + 4 * 60 + 5);
    let b = bravo
        .record()
        .url(b_url.clone())
        .set("capsule_name", "bravo")
        .set("capsule_version", "2.0.0-rc.1")
        .set("started_at", started_ago(b_ago));
    home.write(&b);

    // A capsule whose process is gone.
    let gone = ExitedChild::spawn();
    let c = gone.record().no_door();
    let c_file = home.write(&c);

    let done = me(&home, &["ps"]);
    let elapsed = begun.elapsed().as_secs() + 1;
    done.assert_success();
    assert_eq!(
        done.stderr.lines().collect::<Vec<_>>(),
        vec![pruned_line(
            &c.session_id(),
            &format!("no process holds pid {}", gone.pid)
        )],
        "{done:#?}"
    );
    assert_absent(&c_file);

    let rows = parse_table(&done.stdout);
    let ids: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        ids,
        [d.session_id(), a.session_id(), b.session_id()],
        "newest first (started_at), full ids, gone record not listed:\n{}",
        done.stdout
    );
    let expected = [
        ("delta@0.9.0", "running", "no", d_url.as_str(), d_ago),
        ("alpha@1.2.3", "running", "yes", "-", alpha_ago),
        (
            "bravo@2.0.0-rc.1",
            "unreachable",
            "no",
            b_url.as_str(),
            b_ago,
        ),
    ];
    for (row, expected) in rows.iter().zip(expected) {
        assert_ps_row(row, expected, elapsed);
    }
    assert_eq!(rows[1][6].len(), "01:02:03".len());

    // Listing changed nothing else: the live records stay.
    for record in [&a, &b, &d] {
        assert!(home.running_dir().join(record.file_name()).exists());
    }
}

/// One row of `ps`'s table against its capsule, status, detached flag, URL and age (the uptime
/// may run `elapsed` seconds past the age, the time the listing took).
fn assert_ps_row(row: &[String], expected: (&str, &str, &str, &str, Duration), elapsed: u64) {
    let (capsule, status, detached, url, ago) = expected;
    assert_eq!(row[1], capsule, "CAPSULE of {row:?}");
    assert_eq!(row[2], status, "STATUS of {row:?}");
    // A sleeping child: next to no CPU, and some resident memory.
    let cpu: f64 = row[3].parse().unwrap_or_else(|_| panic!("CPU% of {row:?}"));
    assert!((0.0..50.0).contains(&cpu), "CPU% of {row:?}");
    assert!(
        row[4].ends_with(['K', 'M', 'G']) && row[4][..row[4].len() - 1].parse::<f64>().is_ok(),
        "MEM of {row:?}"
    );
    assert_eq!(row[5], detached, "DETACHED of {row:?}");
    assert_eq!(row[7], url, "URL of {row:?}");
    let up = uptime_secs(&row[6]);
    assert!(
        (ago.as_secs()..=ago.as_secs() + elapsed).contains(&up),
        "UPTIME of {row:?}: {up}s, expected about {}s",
        ago.as_secs()
    );
    if ago.as_secs() >= 86_400 {
        assert!(row[6].starts_with("2d "), "a day prefix: {row:?}");
    } else {
        assert!(!row[6].contains('d'), "no day prefix under a day: {row:?}");
    }
}

#[test]
fn ps_json_lists_sessions_with_liveness_and_no_secrets() {
    let home = Home::new();
    let live = TestProcess::sleeping();
    let secret = "door-secret-7f3a9c1e5b2d4f6a8c0e";
    let l = live.record().no_door().door_token(secret);
    home.write(&l);
    let unreachable = TestProcess::sleeping();
    let u = unreachable.record().url(refused_url());
    home.write(&u);
    let gone = ExitedChild::spawn();
    let g = gone.record().no_door();
    let g_file = home.write(&g);
    // Junk named like a murmur record: only such names are ever removed.
    let junk_name = format!("{}.json", session_id());
    let junk = common::write_raw(&home.running_dir(), &junk_name, b"{ this is not a record");

    let done = me(&home, &["ps", "--json"]);
    done.assert_success();
    assert!(
        done.stderr.contains(&pruned_line(
            &g.session_id(),
            &format!("no process holds pid {}", gone.pid)
        )),
        "{done:#?}"
    );
    assert!(
        !done.stdout.contains(secret),
        "no door token: {}",
        done.stdout
    );
    let sessions = done.json();
    let sessions = sessions.as_array().expect("a JSON array");
    let ids: Vec<&str> = sessions
        .iter()
        .map(|s| s["session_id"].as_str().expect("session_id"))
        .collect();
    assert_eq!(
        ids,
        [u.session_id(), l.session_id()],
        "newest first, gone pruned"
    );
    assert_eq!(sessions[0]["liveness"]["state"], "unreachable");
    assert_eq!(sessions[0]["liveness"]["process"], "alive");
    assert!(sessions[0]["liveness"]["reason"].is_string());
    assert_eq!(sessions[1]["liveness"]["state"], "live");
    assert_eq!(sessions[1]["liveness"]["process"], "alive");
    assert_eq!(sessions[1]["pid"], live.pid());
    assert_eq!(sessions[1]["url"], Value::Null);
    assert!(sessions[1].get("door_token").is_none());

    assert_absent(&g_file);
    assert_absent(&junk);
}

/// A capsule name that would retitle the terminal, clear it and print a row of its own.
const HOSTILE_NAME: &str =
    "evil\x1b]0;pwned\x07\x1b[2J\r\nses_fake  alpha@1  running\u{202E}kcatta";

/// No byte a terminal acts on, bar the line ends.
fn assert_no_control(text: &str) {
    let hidden: Vec<char> = text
        .chars()
        .filter(|&c| c != '\n' && murmur_registry::control_chars::is_hidden_control(c))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?} in {text:?}");
}

#[test]
fn ps_shows_a_hostile_capsule_name_escaped_in_its_one_row_and_json_as_json() {
    let home = Home::new();
    let capsule = TestProcess::sleeping();
    let record = capsule
        .record()
        .no_door()
        .set("capsule_name", HOSTILE_NAME)
        .set("capsule_version", "1.0\x1b[31m");
    home.write(&record);

    let done = me(&home, &["ps"]);
    done.assert_success();
    assert_no_control(&done.stdout);
    assert_eq!(done.stdout.lines().count(), 2, "{}", done.stdout);
    let rows = parse_table(&done.stdout);
    assert_eq!(rows[0][0], record.session_id());
    assert_eq!(
        rows[0][1],
        "evil\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\r\\nses_fake  alpha@1  running\\u{202e}kcatta\
         @1.0\\u{1b}[31m"
    );
    assert_eq!(rows[0][2], "running");

    let json = me(&home, &["ps", "--json"]);
    json.assert_success();
    assert!(
        json.stdout
            .contains(r#""evil\u001b]0;pwned\u0007\u001b[2J\r\nses_fake"#),
        "{}",
        json.stdout
    );
    assert_eq!(json.json()[0]["capsule_name"], HOSTILE_NAME);
}

#[test]
fn ps_refuses_a_running_dir_that_is_a_symlink() {
    let home = Home::new();
    let murmur = home.path().join(".murmur");
    std::fs::create_dir(&murmur).unwrap();
    std::fs::set_permissions(&murmur, std::fs::Permissions::from_mode(0o700)).unwrap();
    let real = home.path().join("real-running");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let gone = ExitedChild::spawn();
    let record = gone.record().write_in(&real);
    let link = murmur.join("running");
    std::os::unix::fs::symlink(&real, &link).unwrap();

    for command in [&["ps"][..], &["ps", "--json"], &["prune"], &["stop", "@1"]] {
        let done = me(&home, command);
        done.assert_failure();
        assert!(
            done.stderr.contains(&link.display().to_string()),
            "{command:?} must name the directory: {}",
            done.stderr
        );
    }
    // Nothing was followed: the link, its target and the record behind it are as they were.
    assert_eq!(std::fs::read_link(&link).unwrap(), real);
    assert!(
        record.exists(),
        "a record behind the link must not be pruned"
    );
}

#[test]
fn ps_says_a_symlinked_running_dir_is_a_symlink() {
    let home = Home::new();
    let murmur = home.path().join(".murmur");
    std::fs::create_dir(&murmur).unwrap();
    std::fs::set_permissions(&murmur, std::fs::Permissions::from_mode(0o700)).unwrap();
    let real = home.path().join("real-running");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, murmur.join("running")).unwrap();

    let done = me(&home, &["ps"]);
    done.assert_failure();
    assert!(done.stderr.contains("symlink"), "{}", done.stderr);
}

#[test]
#[ignore = "needs root: chowns the running directory to uid 65534"]
fn ps_refuses_a_running_dir_owned_by_another_uid() {
    let home = Home::new();
    let running = home.running_dir();
    chown_nobody(&running);

    let done = me(&home, &["ps"]);
    done.assert_failure();
    assert!(
        done.stderr.contains(&running.display().to_string())
            && done.stderr.contains(&format!("uid {NOBODY}")),
        "the path and the owner: {}",
        done.stderr
    );
    let meta = std::fs::symlink_metadata(&running).unwrap();
    assert_eq!(meta.uid(), NOBODY, "left as it was");
    assert_eq!(mode_of(&running), 0o700);
}

/// Without `HOME` the password database names the home: uid 65534's is `/nonexistent`, where
/// no running directory can be made, and the error names that path (root's would be the real
/// `/root`, which a test must not touch).
#[test]
#[ignore = "needs root: runs the binary as uid 65534"]
fn ps_without_home_falls_back_to_the_password_database() {
    let home = Home::new();
    let mut cmd = registry(home.path(), User::Nobody);
    cmd.env_remove("HOME").arg("ps");
    let done = run(cmd);
    done.assert_failure();
    assert!(
        done.stderr.contains("/nonexistent/.murmur"),
        "{}",
        done.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// stop
// ---------------------------------------------------------------------------------------------

#[test]
fn stop_at_1_ends_the_newest_running_capsule_with_sigterm_quickly() {
    let home = Home::new();
    let mut older = TestProcess::sleeping();
    let o = older.record().no_door();
    let o_file = home.write(&o);
    let mut target = TestProcess::sleeping();
    let t = target
        .record()
        .url(refused_url())
        .set("capsule_name", "stoppable")
        .set("capsule_version", "2.0.0");
    let t_file = home.write(&t);
    // Newer still, but gone: `@N` counts what `ps` lists after pruning.
    let gone = ExitedChild::spawn();
    let g = gone.record().no_door();
    let g_file = home.write(&g);

    let done = me(&home, &["stop", "@1"]);
    done.assert_success();
    assert_eq!(
        done.stdout_lines(),
        [
            format!("stopped: {}", t.session_id()),
            "capsule: stoppable@2.0.0".to_owned(),
            "signal: SIGTERM".to_owned(),
        ],
        "{done:#?}"
    );
    assert!(
        done.took < Duration::from_secs(5),
        "a capsule that exits on SIGTERM must not wait out the 10 s timeout: {:?}",
        done.took
    );
    let status = target.wait_exit(DEADLINE);
    assert_eq!(status.signal(), Some(15), "terminated by SIGTERM: {status}");
    assert_absent(&t_file);
    assert_absent(&g_file);
    assert!(done.stderr.contains(&g.session_id()), "{done:#?}");

    assert!(older.is_running(), "only @1 is stopped");
    assert!(o_file.exists());
}

#[test]
fn stop_escalates_to_sigkill_when_sigterm_is_ignored() {
    let home = Home::new();
    let mut stubborn = TestProcess::ignoring_term();
    let record = stubborn.record().no_door().set("capsule_name", "stubborn");
    let file = home.write(&record);
    let id = record.session_id();

    let done = me(&home, &["stop", &id, "--timeout", "1"]);
    done.assert_success();
    assert_eq!(
        done.stdout_lines(),
        [
            format!("stopped: {id}"),
            "capsule: stubborn@0.1.0".to_owned(),
            "signal: SIGKILL".to_owned(),
        ],
        "{done:#?}"
    );
    assert!(
        done.took >= Duration::from_secs(1),
        "SIGKILL only after the timeout: {:?}",
        done.took
    );
    let status = stubborn.wait_exit(DEADLINE);
    assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status}");
    assert_absent(&file);
}

#[test]
fn stop_with_timeout_zero_sends_sigkill_at_once() {
    let home = Home::new();
    let mut child = TestProcess::sleeping();
    let record = child.record().no_door();
    let file = home.write(&record);

    let done = me(&home, &["stop", &record.session_id(), "--timeout", "0"]);
    done.assert_success();
    assert!(
        done.stdout_lines().contains(&"signal: SIGKILL"),
        "{done:#?}"
    );
    let status = child.wait_exit(DEADLINE);
    assert_eq!(status.signal(), Some(9), "{status}");
    assert_absent(&file);
}

#[test]
fn stop_at_n_past_the_running_sessions_fails() {
    let home = Home::new();
    let mut child = TestProcess::sleeping();
    let file = home.write(&child.record().no_door());

    let done = me(&home, &["stop", "@5"]);
    done.assert_failure();
    assert!(
        done.stderr.contains("@5") && done.stderr.contains("1 running"),
        "{}",
        done.stderr
    );
    for address in ["@0", "@x", "@-1"] {
        let done = me(&home, &["stop", address]);
        done.assert_failure();
        assert!(done.stderr.contains(address), "{address}: {}", done.stderr);
    }
    assert!(child.is_running());
    assert!(file.exists());
}

#[test]
fn stop_of_an_unknown_or_invalid_session_fails() {
    let home = Home::new();
    let mut child = TestProcess::sleeping();
    let file = home.write(&child.record().no_door());

    let unknown = session_id();
    let done = me(&home, &["stop", &unknown]);
    done.assert_failure();
    assert!(
        done.stderr
            .contains(&format!("no running session {unknown}")),
        "{}",
        done.stderr
    );

    let done = me(&home, &["stop", "../../etc/passwd"]);
    done.assert_failure();
    assert!(done.stderr.contains("not a session id"), "{}", done.stderr);

    assert!(child.is_running());
    assert!(file.exists());
}

#[test]
fn stop_of_a_gone_process_fails_and_removes_the_record() {
    let home = Home::new();
    let gone = ExitedChild::spawn();
    let record = gone.record().no_door();
    let file = home.write(&record);

    let done = me(&home, &["stop", &record.session_id()]);
    done.assert_failure();
    assert!(
        done.stderr.contains(&record.session_id()) && done.stderr.contains("not running"),
        "{}",
        done.stderr
    );
    assert_absent(&file);
}

// ---------------------------------------------------------------------------------------------
// Unverified processes: a hidden /proc, another uid
// ---------------------------------------------------------------------------------------------

/// A HOME owned by 65534 holding a record (owned by 65534) of a root-owned `sleep`, named with
/// its correct start token.
fn nobody_home_with_root_capsule() -> (Home, TestProcess, RecordJson, PathBuf) {
    let home = Home::for_nobody_with_running_dir();
    let child = TestProcess::sleeping();
    let record = child.record().no_door();
    let file = home.write(&record);
    chown_nobody(&file);
    (home, child, record, file)
}

#[test]
#[ignore = "needs root: runs the binary as uid 65534 under a hidepid=2 /proc (unshare -m, setpriv)"]
fn ps_under_hidepid_lists_the_capsule_unverified_and_keeps_its_record() {
    let (home, mut child, record, file) = nobody_home_with_root_capsule();

    // With /proc visible the same user confirms it: the record itself is sound.
    let visible = cli(&home, User::Nobody, &["ps", "--json"]);
    visible.assert_success();
    assert_eq!(
        visible.json()[0]["liveness"]["process"],
        "alive",
        "{visible:#?}"
    );

    let hidden = cli(&home, User::NobodyHiddenProc, &["ps", "--json"]);
    hidden.assert_success();
    assert_eq!(hidden.stderr, "", "nothing pruned: {hidden:#?}");
    let sessions = hidden.json();
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "{hidden:#?}");
    assert_eq!(sessions[0]["session_id"], record.session_id().as_str());
    assert_eq!(
        sessions[0]["liveness"]["state"], "unreachable",
        "{sessions}"
    );
    assert_eq!(
        sessions[0]["liveness"]["process"], "unverified",
        "{sessions}"
    );
    assert!(sessions[0]["liveness"]["reason"].is_string());

    let table = cli(&home, User::NobodyHiddenProc, &["ps"]);
    table.assert_success();
    let rows = parse_table(&table.stdout);
    assert_eq!(rows.len(), 1, "{table:#?}");
    assert_eq!(rows[0][0], record.session_id());
    assert_eq!(rows[0][2], "unreachable");

    assert!(
        file.exists(),
        "an unverified process is no evidence: the record stays"
    );
    assert!(child.is_running());
}

#[test]
#[ignore = "needs root: runs the binary as uid 65534 under a hidepid=2 /proc (unshare -m, setpriv)"]
fn stop_under_hidepid_refuses_and_the_capsule_survives() {
    let (home, mut child, record, file) = nobody_home_with_root_capsule();
    let id = record.session_id();

    for address in [id.as_str(), "@1"] {
        // `--timeout 0` would send SIGKILL at once if the check were skipped.
        let done = cli(
            &home,
            User::NobodyHiddenProc,
            &["stop", address, "--timeout", "0"],
        );
        done.assert_failure();
        assert!(
            done.stderr.contains(&format!("could not stop {id}")),
            "{address}: {}",
            done.stderr
        );
        assert!(child.is_running(), "{address}: the capsule must survive");
        assert!(file.exists(), "{address}: the record must stay");
    }
}

#[test]
#[ignore = "needs root: a process whose real uid flips, stopped by the binary as uid 65534 (setpriv)"]
fn stop_says_sigterm_was_sent_when_the_kernel_then_refuses_sigkill() {
    let home = Home::for_nobody_with_running_dir();
    let mut flipping = TestProcess::uid_flipping();
    let record = flipping.record().no_door();
    let id = record.session_id();
    let file = home.write(&record);
    chown_nobody(&file);

    let done = cli(&home, User::Nobody, &["stop", &id, "--timeout", "1"]);
    done.assert_failure();
    assert!(
        done.stderr
            .contains(&format!("could not stop {id} (SIGTERM was sent): ")),
        "{done:#?}"
    );
    assert!(done.stderr.contains("Operation not permitted"), "{done:#?}");
    assert_eq!(common::real_uid(flipping.pid()), Some(0), "SIGTERM arrived");
    assert!(flipping.is_running());
    assert!(file.exists());
}

// ---------------------------------------------------------------------------------------------
// prune
// ---------------------------------------------------------------------------------------------

#[test]
fn prune_removes_gone_records_and_junk_and_keeps_the_rest() {
    let home = Home::new();
    let mut live = TestProcess::sleeping();
    let l_file = home.write(&live.record());
    // Names a live process with another start time: the pid was reused. Never signalled.
    let mut reused = TestProcess::sleeping();
    let r = RecordJson::fresh().process(reused.pid(), &wrong_start_token(reused.pid()));
    let r_file = home.write(&r);
    let gone = ExitedChild::spawn();
    let g = gone.record();
    let g_file = home.write(&g);
    let junk_name = format!("{}.json", session_id());
    let junk = common::write_raw(&home.running_dir(), &junk_name, b"not json at all");
    let directory = home.running_dir().join("dir.json");
    std::fs::create_dir(&directory).unwrap();

    let done = me(&home, &["prune"]);
    done.assert_success();
    let lines = done.stdout_lines();
    assert!(
        lines.contains(
            &pruned_line(
                &g.session_id(),
                &format!("no process holds pid {}", gone.pid)
            )
            .as_str()
        ),
        "{done:#?}"
    );
    assert!(
        lines.contains(
            &pruned_line(
                &r.session_id(),
                &format!(
                    "pid {} is held by a process that started at another time",
                    reused.pid()
                )
            )
            .as_str()
        ),
        "{done:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("removed: {junk_name} — is not a record"))),
        "the junk file is named: {done:#?}"
    );
    assert_eq!(lines.len(), 3, "{done:#?}");

    assert_absent(&g_file);
    assert_absent(&r_file);
    assert_absent(&junk);
    assert!(l_file.exists(), "a live record stays");
    assert!(directory.is_dir(), "a directory is never removed");
    assert!(
        live.is_running() && reused.is_running(),
        "prune signals nothing"
    );

    let again = me(&home, &["prune"]);
    again.assert_success();
    assert_eq!(again.stdout, "nothing to prune\n");
}

#[test]
fn prune_with_nothing_gone_says_so() {
    let home = Home::new();
    let done = me(&home, &["prune"]);
    done.assert_success();
    assert_eq!(done.stdout, "nothing to prune\n");

    let live = TestProcess::sleeping();
    let file = home.write(&live.record().no_door());
    let done = me(&home, &["prune"]);
    done.assert_success();
    assert_eq!(done.stdout, "nothing to prune\n");
    assert!(file.exists());
}

#[test]
fn ps_and_prune_keep_a_process_whose_main_thread_exited() {
    let home = Home::new();
    let mut leader = TestProcess::zombie_leader();
    let record = leader.record().no_door();
    let file = home.write(&record);

    let listed = me(&home, &["ps", "--json"]);
    listed.assert_success();
    assert_eq!(listed.stderr, "", "nothing pruned: {listed:#?}");
    let sessions = listed.json();
    assert_eq!(sessions[0]["session_id"], record.session_id().as_str());
    assert_eq!(sessions[0]["liveness"]["state"], "live", "{sessions}");
    assert_eq!(sessions[0]["liveness"]["process"], "alive", "{sessions}");

    let pruned = me(&home, &["prune"]);
    pruned.assert_success();
    assert_eq!(pruned.stdout, "nothing to prune\n", "{pruned:#?}");
    assert!(file.exists(), "a live process's record was pruned");
    assert_eq!(proc_state(leader.pid()), Some('Z'), "the premise held");
    assert!(leader.is_running());
}

#[test]
#[ignore = "needs root: runs the binary as uid 65534 (setpriv) over a record only root can open"]
fn a_record_that_cannot_be_opened_is_never_removed() {
    let home = Home::for_nobody_with_running_dir();
    let running = home.running_dir();
    // Junk that would be removed if it could be read: here it cannot (mode 000, EACCES for
    // its owner 65534, who has no capability to override it).
    let closed_id = session_id();
    let closed = write_raw(&running, &format!("{closed_id}.json"), "{ not a record");
    chown_nobody(&closed);
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o000)).unwrap();
    let cat = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(&closed)
        .output()
        .expect("run cat as uid 65534");
    assert!(
        !cat.status.success() && String::from_utf8_lossy(&cat.stderr).contains("Permission denied"),
        "the premise: uid 65534 cannot open it ({cat:?})"
    );
    // The same junk, readable: it goes, which shows these runs do remove what they judged.
    let open = write_raw(
        &running,
        &format!("{}.json", session_id()),
        "{ not a record",
    );
    chown_nobody(&open);

    let listed = cli(&home, User::Nobody, &["ps", "--json"]);
    listed.assert_success();
    assert_eq!(listed.json(), serde_json::json!([]));
    assert_absent(&open);
    for args in [&["ps"][..], &["prune"]] {
        let done = cli(&home, User::Nobody, args);
        done.assert_success();
        assert!(!done.stdout.contains(&closed_id), "{args:?}: {done:#?}");
        assert!(!done.stderr.contains(&closed_id), "{args:?}: {done:#?}");
    }
    assert!(
        closed.exists(),
        "an entry that could not be read was removed"
    );
    assert_eq!(mode_of(&closed), 0o000);
    assert_eq!(std::fs::read(&closed).unwrap(), b"{ not a record");
}

#[test]
fn names_that_are_not_session_ids_are_never_removed_by_ps_or_prune() {
    let home = Home::new();
    let running = home.running_dir();
    let kept = [
        write_raw(&running, "a b.json", "{ not a record"),
        write_raw(&running, "x.y.json", "{ not a record"),
        RecordJson::fresh().no_door().write_as(&running, "v.1.json"),
    ];
    let before = dir_snapshot(&running);

    let listed = me(&home, &["ps"]);
    listed.assert_success();
    assert_eq!(listed.stdout, "no running capsules\n");
    assert_eq!(listed.stderr, "", "{listed:#?}");
    let pruned = me(&home, &["prune"]);
    pruned.assert_success();
    assert_eq!(pruned.stdout, "nothing to prune\n", "{pruned:#?}");
    for file in &kept {
        assert!(file.exists(), "{} was removed", file.display());
    }
    assert_eq!(dir_snapshot(&running), before);
}

// ---------------------------------------------------------------------------------------------
// An explicit --running-dir
// ---------------------------------------------------------------------------------------------

#[test]
fn an_explicit_running_dir_others_can_enter_is_refused_and_left_as_it_was() {
    let home = Home::new();
    for mode in [0o755, 0o1777, 0o750, 0o701] {
        // Perhaps a project directory: nothing in it is murmur's.
        let dir = home.path().join(format!("shared-{mode:o}"));
        std::fs::create_dir(&dir).unwrap();
        let package = write_raw(&dir, "package.json", r#"{"name": "not-murmur"}"#);
        let gone = ExitedChild::spawn().record().no_door();
        gone.write_in(&dir);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let before = dir_snapshot(&dir);
        let dir_arg = dir.to_str().unwrap();

        for args in [
            &["ps", "--running-dir", dir_arg][..],
            &["ps", "--json", "--running-dir", dir_arg],
            &["prune", "--running-dir", dir_arg],
            &["stop", "@1", "--running-dir", dir_arg],
        ] {
            let done = me(&home, args);
            done.assert_failure();
            assert!(
                done.stderr.contains(dir_arg) && done.stderr.contains(&format!("{mode:04o}")),
                "{args:?} must name the directory and its mode: {}",
                done.stderr
            );
        }
        assert_eq!(mode_of(&dir), mode, "the mode must be left as it was");
        assert_eq!(dir_snapshot(&dir), before, "nothing in it may change");
        assert_eq!(
            std::fs::read_to_string(&package).unwrap(),
            r#"{"name": "not-murmur"}"#
        );
    }
    assert!(
        !home.path().join(".murmur").exists(),
        "the default directory is not used instead"
    );
}

/// A private running directory with one gone record, one live one, and junk a reader removes:
/// answers the directory, the gone record, and the junk's names with their reasons' starts.
fn private_dir_with_junk(
    home: &Home,
    live: &TestProcess,
) -> (PathBuf, RecordJson, Vec<(String, String)>) {
    let dir = home.path().join("private-running");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    live.record().no_door().write_in(&dir);
    let gone = ExitedChild::spawn().record().no_door();
    gone.write_in(&dir);
    let truncated = session_id();
    write_raw(&dir, &format!("{truncated}.json"), "{\"session_id\":");
    let secretive = session_id();
    RecordJson::new(&secretive)
        .set("pid", "tok-SECRET-123")
        .write_in(&dir);
    let linked = session_id();
    std::os::unix::fs::symlink("/nonexistent", dir.join(format!("{linked}.json"))).unwrap();
    let mut junk = vec![
        (
            format!("{truncated}.json"),
            "is not a record: the JSON ends early".to_owned(),
        ),
        (
            format!("{secretive}.json"),
            "is not a record: a field has the wrong type or value".to_owned(),
        ),
        (format!("{linked}.json"), "is a symlink".to_owned()),
    ];
    junk.sort();
    (dir, gone, junk)
}

/// The `removed: <file> — <why>` lines of `text`, each checked against `junk` in name order.
fn assert_removed_lines(text: &str, junk: &[(String, String)]) {
    let mut removed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("removed: "))
        .collect();
    removed.sort();
    assert_eq!(removed.len(), junk.len(), "{text}");
    for (line, (file, why)) in removed.iter().zip(junk) {
        assert!(
            line.starts_with(&format!("removed: {file} — {why}")),
            "expected `removed: {file} — {why}…`, got {line:?}"
        );
        assert!(!line.contains("SECRET"), "a value was quoted: {line}");
    }
}

#[test]
fn ps_with_a_private_running_dir_names_each_removed_file_on_stderr() {
    let home = Home::new();
    let live = TestProcess::sleeping();
    let (dir, gone, junk) = private_dir_with_junk(&home, &live);
    let dir_arg = dir.to_str().unwrap();

    let done = me(&home, &["ps", "--json", "--running-dir", dir_arg]);
    done.assert_success();
    assert_eq!(done.json().as_array().map(Vec::len), Some(1), "{done:#?}");
    assert_removed_lines(&done.stderr, &junk);
    assert!(
        done.stderr.contains(&pruned_line(
            &gone.session_id(),
            &format!("no process holds pid {}", gone.to_json()["pid"])
        )),
        "{done:#?}"
    );
    assert!(!done.stdout.contains("removed:"), "{done:#?}");
    // Only the live record is left, and the directory stays private.
    assert_eq!(dir_snapshot(&dir).len(), 1, "{:?}", dir_snapshot(&dir));
    assert_eq!(mode_of(&dir), 0o700);
    assert!(!home.path().join(".murmur").exists());
}

#[test]
fn prune_with_a_private_running_dir_names_each_removed_file_on_stdout() {
    let home = Home::new();
    let live = TestProcess::sleeping();
    let (dir, gone, junk) = private_dir_with_junk(&home, &live);

    let done = me(&home, &["prune", "--running-dir", dir.to_str().unwrap()]);
    done.assert_success();
    assert_removed_lines(&done.stdout, &junk);
    assert!(
        done.stdout_lines().contains(
            &pruned_line(
                &gone.session_id(),
                &format!("no process holds pid {}", gone.to_json()["pid"])
            )
            .as_str()
        ),
        "{done:#?}"
    );
    assert_eq!(done.stdout_lines().len(), junk.len() + 1, "{done:#?}");
    assert!(!done.stderr.contains("removed:"), "{done:#?}");
    assert_eq!(dir_snapshot(&dir).len(), 1, "{:?}", dir_snapshot(&dir));
}

// ---------------------------------------------------------------------------------------------
// A nested pid namespace
// ---------------------------------------------------------------------------------------------

/// A HOME with a record of a `sleep` in the host's pid namespace.
fn home_with_host_capsule() -> (Home, TestProcess, RecordJson, PathBuf) {
    let home = Home::new();
    let child = TestProcess::sleeping();
    let record = child.record().no_door();
    let file = home.write(&record);
    (home, child, record, file)
}

/// Every command that judges records refuses inside `user`'s nested pid namespace, and the
/// host capsule and its record are left alone.
fn assert_refused_in_nested_namespace(user: User) {
    let (home, mut child, _record, file) = home_with_host_capsule();
    for args in [
        &["ps"][..],
        &["ps", "--json"],
        &["prune"],
        &["stop", "@1", "--timeout", "0"],
        &["serve", "--bind", "127.0.0.1:0"],
    ] {
        let done = cli(&home, user, args);
        done.assert_failure();
        assert!(
            done.stderr.contains("nested pid namespace")
                && done.stderr.contains("--nested-pid-namespace"),
            "{args:?}: {done:#?}"
        );
        assert!(
            file.exists(),
            "{args:?} removed a live host capsule's record"
        );
    }
    assert!(child.is_running());
}

#[test]
#[ignore = "needs root: runs the binary in a new pid namespace (unshare --pid)"]
fn in_a_nested_pid_namespace_with_its_own_proc_ps_and_prune_refuse() {
    assert_refused_in_nested_namespace(User::NestedPidNamespace);
}

#[test]
#[ignore = "needs root: runs the binary in a new pid namespace (unshare --pid)"]
fn in_a_nested_pid_namespace_with_the_hosts_proc_ps_and_prune_refuse() {
    assert_refused_in_nested_namespace(User::NestedPidNamespaceHostProc);
}

#[test]
#[ignore = "needs root: runs the binary in a new pid namespace (unshare --pid)"]
fn nested_pid_namespace_flag_runs_and_a_host_pid_reads_as_gone() {
    // The flag says the capsules run in this namespace too. A host capsule does not: its pid
    // names no process in here (kill(pid, 0) answers ESRCH), so its record is pruned as gone.
    // That is the loss the refusal above exists to prevent; the capsule itself is untouched.
    for user in [User::NestedPidNamespace, User::NestedPidNamespaceHostProc] {
        let (home, mut child, record, file) = home_with_host_capsule();
        let done = cli(&home, user, &["ps", "--nested-pid-namespace"]);
        done.assert_success();
        assert_eq!(done.stdout, "no running capsules\n", "{user:?}: {done:#?}");
        assert_eq!(
            done.stderr.lines().collect::<Vec<_>>(),
            [pruned_line(
                &record.session_id(),
                &format!("no process holds pid {}", child.pid())
            )],
            "{user:?}: {done:#?}"
        );
        assert_absent(&file);
        assert!(child.is_running(), "{user:?}: pruning signals nothing");

        let again = cli(&home, user, &["prune", "--nested-pid-namespace"]);
        again.assert_success();
        assert_eq!(again.stdout, "nothing to prune\n", "{user:?}: {again:#?}");
    }
}

#[test]
#[ignore = "needs root: runs the binary in a new pid namespace (unshare --pid)"]
fn the_nested_pid_namespace_switch_reads_the_usual_spellings_from_the_environment() {
    for (value, runs) in [
        ("1", true),
        ("yes", true),
        ("true", true),
        ("0", false),
        ("false", false),
    ] {
        let home = Home::new();
        let mut cmd = registry(home.path(), User::NestedPidNamespace);
        cmd.env(common::binary::NESTED_PID_NAMESPACE_ENV, value)
            .arg("ps");
        let done = run(cmd);
        if runs {
            done.assert_success();
        } else {
            done.assert_failure();
            assert!(
                done.stderr.contains("nested pid namespace"),
                "{value}: {done:#?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// openapi, token, --help
// ---------------------------------------------------------------------------------------------

#[test]
fn openapi_prints_the_openapi_3_1_document() {
    let home = Home::new();
    let done = me(&home, &["openapi"]);
    done.assert_success();
    let spec = done.json();
    assert_eq!(spec["openapi"], "3.1.0");
    for path in [
        "/sessions",
        "/sessions/{id}",
        "/sessions/{id}/signal",
        "/healthz",
    ] {
        assert!(spec["paths"].get(path).is_some(), "{path} missing");
    }
    assert!(
        !home.path().join(".murmur").exists(),
        "printing the spec touches no directory"
    );
}

#[test]
fn token_prints_the_path_and_never_the_token() {
    let home = Home::new();
    let path = home.token_path();
    let done = me(&home, &["token"]);
    done.assert_success();
    assert_eq!(done.stdout, format!("{}\n", path.display()));
    // It creates the token when there is none, private.
    let token = std::fs::read_to_string(&path)
        .expect("created")
        .trim()
        .to_owned();
    assert!(is_hex64(&token), "{token:?}");
    assert_eq!(mode_of(&path), 0o600);
    assert_eq!(mode_of(path.parent().unwrap()), 0o700);
    assert!(!done.stdout.contains(&token) && !done.stderr.contains(&token));

    let again = me(&home, &["token"]);
    again.assert_success();
    assert_eq!(again.stdout, done.stdout);
    let unchanged = std::fs::read_to_string(&path).unwrap();
    assert_eq!(unchanged.trim(), token, "printing the path changes nothing");
}

#[test]
fn token_show_prints_the_token_and_rotate_replaces_it() {
    let home = Home::new();
    let shown = me(&home, &["token", "--show"]);
    shown.assert_success();
    let token = shown.stdout.trim().to_owned();
    assert!(is_hex64(&token), "{shown:#?}");
    assert_eq!(shown.stdout, format!("{token}\n"));
    let on_disk = std::fs::read_to_string(home.token_path()).unwrap();
    assert_eq!(on_disk.trim(), token);

    let rotated = me(&home, &["token", "--rotate", "--show"]);
    rotated.assert_success();
    let new = rotated.stdout.trim().to_owned();
    assert!(is_hex64(&new), "{rotated:#?}");
    assert_ne!(new, token);
    assert_eq!(
        std::fs::read_to_string(home.token_path()).unwrap().trim(),
        new
    );
    assert_eq!(mode_of(&home.token_path()), 0o600);
}

#[test]
fn token_refuses_a_file_others_can_read_and_never_shows_it() {
    let home = Home::new();
    let path = home.token_path();
    let made = me(&home, &["token"]);
    made.assert_success();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = std::fs::read_to_string(&path).unwrap();

    for args in [&["token", "--show"][..], &["token", "--rotate"], &["token"]] {
        let done = me(&home, args);
        done.assert_failure();
        assert!(
            done.stderr.contains(&path.display().to_string()),
            "{args:?}: {}",
            done.stderr
        );
        assert!(
            !done.stderr.contains(before.trim()),
            "{args:?} leaked the token"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        before,
        "left as it was"
    );
    assert_eq!(mode_of(&path), 0o644, "never repaired silently");
}

#[test]
fn every_subcommand_help_has_an_example() {
    let home = Home::new();
    for sub in ["serve", "ps", "stop", "prune", "openapi", "token"] {
        let done = me(&home, &[sub, "--help"]);
        done.assert_success();
        assert!(
            done.stdout.contains("Example"),
            "`{sub} --help` has no example:\n{}",
            done.stdout
        );
    }
    let top = me(&home, &["--help"]);
    top.assert_success();
    for sub in ["serve", "ps", "stop", "prune", "openapi", "token"] {
        assert!(top.stdout.contains(sub), "`--help` lists {sub}");
    }
    assert!(
        !home.path().join(".murmur").exists(),
        "help touches nothing"
    );
}

/// A valid record of a live process, owned by another user (needs root: chown): ownership
/// proves nothing about being a record, so `ps` and `prune` count it and keep it.
#[ignore = "needs root: chowns a record to uid 65534"]
#[test]
fn a_record_owned_by_another_user_is_kept_by_ps_and_prune() {
    let home = Home::new();
    let mut capsule = TestProcess::sleeping();
    let record = capsule.record().no_door();
    let file = home.write(&record);
    chown_nobody(&file);
    let before = dir_snapshot(&home.running_dir());

    for args in [&["ps"][..], &["prune"]] {
        let done = me(&home, args);
        done.assert_success();
        assert!(!done.stdout.contains("removed"), "{args:?}: {done:#?}");
        assert!(!done.stderr.contains("removed"), "{args:?}: {done:#?}");
        assert!(!done.stderr.contains("pruned"), "{args:?}: {done:#?}");
        assert!(file.exists(), "{args:?} removed a foreign record");
    }
    assert_eq!(dir_snapshot(&home.running_dir()), before);
    assert!(capsule.is_running());
}
