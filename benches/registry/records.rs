//! Record files as murmur writes them, in a private running directory of their own.
//!
//! Invariant: every record names a real process by its pid and the start token read from it,
//! so layers 1–2 hold for as long as that process lives.

use std::path::Path;

/// A temporary directory only this user may enter, as the registry requires.
pub fn private_temp_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod 700");
    dir
}

/// Write `<session_id>.json` into `dir`: the door at `url`, held by `pid` started at `token`.
pub fn write_record(dir: &Path, session_id: &str, url: &str, pid: u32, token: &str) {
    let json = format!(
        r#"{{"session_id":"{session_id}","url":"{url}","pid":{pid},"process_start":"{token}",
        "capsule_name":"bench","capsule_version":"1.0.0","workdir":"/tmp/bench/{session_id}",
        "outlives_launcher":true,"started_at":"2026-11-30T00:00:00Z"}}"#
    );
    std::fs::write(dir.join(format!("{session_id}.json")), json).expect("write record");
}
