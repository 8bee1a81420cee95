//! One session's record: its shape on disk, how it parses, and how a writer puts it in place.
//!
//! Invariants kept here:
//! - Every generation of record parses: the nine fields of the spec are required (`url` must be
//!   present but may be `null`), every later key is optional and read leniently (a value of an
//!   unexpected shape reads as absent), and unknown keys are ignored, so a live session is never
//!   lost because a murmur wrote something this crate does not know.
//! - The door's secrets (`door_token`, `credentials`) live only in memory, inside [`Secret`],
//!   which has no `Serialize` and no `Display` and prints as `[redacted]` in `Debug`. This crate
//!   cannot write them back out, by construction.
//! - What a listing encodes of a record is kept with it ([`EncodedOnce`]) only where the record
//!   is shared and so cannot change; a clone never carries it, and equality ignores it.
//! - A record becomes visible only whole: [`RunningGuard::write`] stages the bytes in a hidden
//!   `.tmp` file in the same directory, fsyncs them, and renames the file onto `<session_id>.json`.

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

use serde::{Deserialize, Deserializer, Serialize};

use super::RunningError;
use super::process::has_controlling_terminal;
use crate::private_fs::{FileIdentity, open_dir, unlink_checked, write_atomically};
use crate::process_identity::process_start_token;

/// The suffix that makes a directory entry a record; nothing else is one.
pub const RECORD_SUFFIX: &str = ".json";

/// The suffix of the control-token file a session may keep beside its record.
pub const CONTROL_SUFFIX: &str = ".control";

/// A secret read from a record: usable in memory, impossible to serialize or print.
///
/// `Debug` shows `Secret([redacted])`; there is no `Display` and no `Serialize`, so the only way
/// to the value is [`Secret::expose`], which makes every use visible at the call site.
#[derive(Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself. Only for putting it on the wire to the door it belongs to.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The launcher process of a formation, as later generations record it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormationLauncher {
    /// The launcher's pid.
    pub pid: u32,
    /// The launcher's start token (see [`process_start_token`]).
    pub process_start: String,
}

/// Where one running session's door is, and which process holds it.
///
/// The first nine fields are the spec's and are required in every record; the rest were added
/// by later murmur generations and are optional. A record read from disk remembers which file
/// it came from, so [`prune`](super::prune) unlinks exactly that file and nothing newer.
/// Two records are equal when their contents are; where they were read from does not count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningRecord {
    /// The session, compared against the session id the door reports.
    pub session_id: String,
    /// `host:port` of the A2A door, without a scheme; `None` for a capsule with no door.
    #[serde(deserialize_with = "present_but_nullable")]
    pub url: Option<String>,
    /// The process holding the door.
    pub pid: u32,
    /// The writer's own start token; `""` when it could not read it, which never matches.
    pub process_start: String,
    /// The capsule's name.
    pub capsule_name: String,
    /// The capsule's version.
    pub capsule_version: String,
    /// The session directory.
    pub workdir: PathBuf,
    /// True when the launcher had no controlling terminal, so the capsule outlives it.
    pub outlives_launcher: bool,
    /// When the session started, RFC 3339 in UTC.
    pub started_at: String,

    /// Where the session's trace lives (required by murmur 0.8 and later, optional here).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub records_dir: Option<PathBuf>,
    /// The operator bearer token of an authenticated door. Never serialized.
    #[serde(default, deserialize_with = "lenient", skip_serializing)]
    pub door_token: Option<Secret>,
    /// Per-credential door tokens. Never serialized.
    #[serde(default, deserialize_with = "lenient", skip_serializing)]
    pub credentials: BTreeMap<String, Secret>,
    /// The formation this session belongs to (`frm_…`).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub formation_id: Option<String>,
    /// This session's name in the formation's roster.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub formation_member: Option<String>,
    /// Whether this member is the formation's entry point.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "is_false"
    )]
    pub formation_entry: bool,
    /// Whether this member is the formation's lifeline.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "is_false"
    )]
    pub formation_lifeline: bool,
    /// The process that launched the formation.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub formation_launcher: Option<FormationLauncher>,
    /// The session that delegated to this one.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub spawned_by: Option<String>,

    /// The file this record was read from; `None` for a record built in memory.
    #[serde(skip)]
    pub(crate) origin: OriginSlot,
    /// The record's public fields as listings write them, once made (see [`EncodedOnce`]).
    #[serde(skip)]
    pub(crate) encoded: EncodedOnce,
}

/// Bytes made once from a record's fields and kept with it, so that a record shared read-only
/// (an `Arc<RunningRecord>` from the scan cache, unchanged while its file is) is encoded once
/// however many listings show it.
///
/// Not part of the record's equality, and never carried by a clone: a clone may be changed,
/// a shared record cannot be. Fill it only through a shared record.
#[derive(Default)]
pub(crate) struct EncodedOnce(OnceLock<Box<[u8]>>);

impl Clone for EncodedOnce {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for EncodedOnce {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for EncodedOnce {}

impl fmt::Debug for EncodedOnce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EncodedOnce")
    }
}

impl RunningRecord {
    /// The bytes `encode` makes of this record: made on the first call, kept after. Every
    /// caller must pass the same encoding (there is one: the listing's, in `wire`).
    pub(crate) fn encoded_once<E>(
        &self,
        encode: impl FnOnce(&Self) -> Result<Vec<u8>, E>,
    ) -> Result<&[u8], E> {
        if let Some(bytes) = self.encoded.0.get() {
            return Ok(bytes);
        }
        let bytes = encode(self)?.into_boxed_slice();
        Ok(self.encoded.0.get_or_init(|| bytes))
    }
}

/// Holds a record's [`Origin`] without taking part in the record's equality.
#[derive(Debug, Clone, Default)]
pub(crate) struct OriginSlot(pub(crate) Option<Origin>);

impl PartialEq for OriginSlot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for OriginSlot {}

/// The file a record was read from, down to its inode, so a prune can tell it apart from a file
/// that replaced it under the same name; and the `.control` file beside it when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) dir: PathBuf,
    pub(crate) file_name: String,
    pub(crate) identity: FileIdentity,
    /// `None` when there was none (or a directory): no control file is then the session's.
    pub(crate) control: Option<FileIdentity>,
}

/// Read a later generation's key, or its default when its value has a shape this crate does
/// not expect. Only the nine spec fields can make a record unparseable: a live session's record
/// must never be lost over a key the registry does not fully know.
fn lenient<'de, D, T>(de: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let value = serde_json::Value::deserialize(de)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Make an `Option` field required: the key must be present, its value may be `null`.
///
/// serde treats a missing `Option` as `None` unless the field has its own deserializer.
fn present_but_nullable<'de, D: Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(de)
}

impl RunningRecord {
    /// A record for the calling process, as a capsule writes one when its door opens.
    ///
    /// Fills `pid`, `process_start` (or `""` when this process cannot read its own),
    /// `outlives_launcher` (from [`has_controlling_terminal`]) and `started_at` (now, UTC).
    pub fn for_this_process(
        session_id: impl Into<String>,
        url: Option<String>,
        capsule_name: impl Into<String>,
        capsule_version: impl Into<String>,
        workdir: impl Into<PathBuf>,
    ) -> Self {
        let pid = std::process::id();
        Self {
            session_id: session_id.into(),
            url,
            pid,
            process_start: process_start_token(pid).unwrap_or_default(),
            capsule_name: capsule_name.into(),
            capsule_version: capsule_version.into(),
            workdir: workdir.into(),
            outlives_launcher: !has_controlling_terminal(),
            started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            records_dir: None,
            door_token: None,
            credentials: BTreeMap::new(),
            formation_id: None,
            formation_member: None,
            formation_entry: false,
            formation_lifeline: false,
            formation_launcher: None,
            spawned_by: None,
            origin: OriginSlot::default(),
            encoded: EncodedOnce::default(),
        }
    }

    /// Parse a record's bytes, of any murmur generation.
    ///
    /// Fails when the bytes are not a JSON object carrying all nine spec fields with the right
    /// types. The parsed record has no origin; [`scan`](super::scan) sets one.
    pub fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The path this record was read from, if it was read from disk.
    pub fn source_path(&self) -> Option<PathBuf> {
        self.origin.0.as_ref().map(|o| o.dir.join(&o.file_name))
    }

    /// The file name a record for `session_id` has: `<session_id>.json`.
    pub fn file_name_for(session_id: &str) -> String {
        format!("{session_id}{RECORD_SUFFIX}")
    }
}

/// Whether `session_id` can name a record file without escaping its directory or hiding.
///
/// Murmur's ids are `ses_` + 32 hex digits; this accepts the wider `[A-Za-z0-9_-]{1,128}` the
/// HTTP contract uses, so a path is never built from anything else.
pub fn is_valid_session_id(session_id: &str) -> bool {
    (1..=128).contains(&session_id.len())
        && session_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `session_id` has the shape murmur gives its ids: `ses_` and 32 lowercase hex digits.
///
/// Only files named so are ever removed as junk: anything else in a running directory may be
/// someone else's file.
pub fn is_murmur_session_id(session_id: &str) -> bool {
    session_id.strip_prefix("ses_").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// One session's record, written for exactly as long as the session runs.
///
/// [`RunningGuard::write`] puts the record in place atomically; dropping the guard removes it,
/// unless the file under that name is no longer the one this guard wrote.
#[derive(Debug)]
pub struct RunningGuard {
    dir: PathBuf,
    file_name: String,
    identity: FileIdentity,
}

impl RunningGuard {
    /// Write `record` to `<dir>/<session_id>.json`, mode 0600, never half-visible.
    ///
    /// The bytes go to a hidden `.<session_id>.json.<pid>.<random>.tmp` created exclusively in
    /// `dir` (never through a symlink), are fsynced, and the file is renamed into place; the
    /// directory is fsynced after the rename so the record survives a crash. Secrets in the
    /// record are not written (this crate never serializes them). `dir` is typically
    /// [`running_dir`](super::running_dir)'s answer.
    pub fn write(dir: &Path, record: &RunningRecord) -> Result<Self, RunningError> {
        if !is_valid_session_id(&record.session_id) {
            return Err(RunningError::InvalidSessionId(record.session_id.clone()));
        }
        let io_err = |cause| RunningError::Io {
            path: dir.to_path_buf(),
            cause,
        };
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| io_err(e.into()))?;
        let dir_fd = open_dir(dir).map_err(io_err)?;
        let file_name = RunningRecord::file_name_for(&record.session_id);
        let identity = write_atomically(&dir_fd, &file_name, &bytes).map_err(io_err)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            file_name,
            identity,
        })
    }

    /// The path of the record this guard holds.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.file_name)
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        // Remove the record only while it is still the file this guard wrote: a record that
        // was replaced under the same name belongs to whoever replaced it.
        let Ok(dir_fd) = open_dir(&self.dir) else {
            return;
        };
        let ours = |dir_fd: &OwnedFd, quarantined: &str| {
            FileIdentity::at(dir_fd, quarantined).is_ok_and(|now| now == self.identity)
        };
        let _ = unlink_checked(&dir_fd, &self.file_name, ours);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NINE: &str = r#"{"session_id":"ses_0","url":"127.0.0.1:1","pid":1,"process_start":"5",
        "capsule_name":"c","capsule_version":"1","workdir":"/w","outlives_launcher":true,
        "started_at":"2026-11-30T00:00:00Z"}"#;

    #[test]
    fn url_must_be_present_but_may_be_null() {
        assert!(RunningRecord::parse(NINE.as_bytes()).is_ok());
        let null = NINE.replace(r#""127.0.0.1:1""#, "null");
        assert_eq!(RunningRecord::parse(null.as_bytes()).unwrap().url, None);
        let missing = NINE.replace(r#""url":"127.0.0.1:1","#, "");
        assert!(RunningRecord::parse(missing.as_bytes()).is_err());
    }

    #[test]
    fn secrets_parse_but_never_print_or_serialize() {
        let with = NINE.replace(
            r#""pid":1"#,
            r#""pid":1,"door_token":"tok-SECRET","credentials":{"a":"cred-SECRET"}"#,
        );
        let record = RunningRecord::parse(with.as_bytes()).unwrap();
        assert_eq!(record.door_token.as_ref().unwrap().expose(), "tok-SECRET");
        assert_eq!(record.credentials["a"].expose(), "cred-SECRET");
        let debug = format!("{record:?}");
        let json = serde_json::to_string(&record).unwrap();
        for shown in [debug, json] {
            assert!(!shown.contains("SECRET"), "{shown}");
        }
    }

    #[test]
    fn later_keys_of_an_unexpected_shape_read_as_absent() {
        for odd in [
            r#""credentials":null"#,
            r#""credentials":"SECRET-as-a-string""#,
            r#""formation_entry":null"#,
            r#""formation_launcher":{"pid":1}"#,
            r#""door_token":42"#,
            r#""records_dir":["a"]"#,
            r#""spawned_by":{"x":1}"#,
        ] {
            let with = NINE.replace(r#""pid":1"#, &format!(r#""pid":1,{odd}"#));
            let record =
                RunningRecord::parse(with.as_bytes()).unwrap_or_else(|e| panic!("{odd}: {e}"));
            assert_eq!(record.pid, 1, "{odd}");
        }
        let wrong_nine = NINE.replace(r#""pid":1"#, r#""pid":"1""#);
        assert!(RunningRecord::parse(wrong_nine.as_bytes()).is_err());
    }

    #[test]
    fn session_ids_that_could_escape_are_invalid() {
        for bad in [
            "",
            "..",
            "a/b",
            ".hidden",
            "a b",
            "ses_\u{e9}",
            &"a".repeat(129),
        ] {
            assert!(!is_valid_session_id(bad), "{bad:?}");
        }
        assert!(is_valid_session_id("ses_0123456789abcdef0123456789abcdef"));
    }
}

/// Properties over arbitrary input: parsing never panics, and no id the check accepts can
/// name a path outside the running directory.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};
    use std::path::Component;

    /// Any JSON value, a few levels deep.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            ".{0,40}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::btree_map(".{0,12}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A record whose every field may be replaced by a value of any type or left out.
    fn mangled_record() -> impl Strategy<Value = Vec<u8>> {
        let keys = [
            "session_id",
            "url",
            "pid",
            "process_start",
            "capsule_name",
            "capsule_version",
            "workdir",
            "outlives_launcher",
            "started_at",
            "records_dir",
            "door_token",
            "credentials",
            "formation_id",
            "formation_member",
            "formation_entry",
            "formation_lifeline",
            "launcher",
        ];
        let base = json!({
            "session_id": "ses_0193a4c2e1f07a3b9c5d2e4f6a8b0c1d", "url": "127.0.0.1:1", "pid": 1,
            "process_start": "5", "capsule_name": "c", "capsule_version": "1",
            "workdir": "/w", "outlives_launcher": true, "started_at": "2026-01-01T00:00:00Z"
        });
        prop::collection::vec((0..keys.len(), prop::option::of(any_json())), 0..keys.len())
            .prop_map(move |changes| {
                let mut record = base.clone();
                if let Some(object) = record.as_object_mut() {
                    for (key, value) in changes {
                        match value {
                            Some(value) => object.insert(keys[key].to_owned(), value),
                            None => object.remove(keys[key]),
                        };
                    }
                }
                serde_json::to_vec(&record).unwrap_or_default()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn parsing_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = RunningRecord::parse(&bytes);
        }

        #[test]
        fn parsing_a_mangled_record_never_panics_and_keeps_what_it_read(bytes in mangled_record()) {
            if let Ok(record) = RunningRecord::parse(&bytes) {
                // Whatever parsed carries the session id that was written, verbatim.
                let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                prop_assert_eq!(Some(record.session_id.as_str()), value["session_id"].as_str());
            }
        }

        #[test]
        fn an_accepted_session_id_names_one_file_inside_the_directory(id in "\\PC{0,140}") {
            if is_valid_session_id(&id) {
                let dir = Path::new("/run/murmur/running");
                let path = dir.join(RunningRecord::file_name_for(&id));
                prop_assert_eq!(path.parent(), Some(dir));
                let last = path.components().next_back();
                prop_assert!(matches!(last, Some(Component::Normal(_))));
                prop_assert!(!id.starts_with('.'));
                prop_assert!(!id.contains('/') && !id.contains('\0'));
            }
        }

        #[test]
        fn ids_with_any_path_syntax_are_refused(
            prefix in "[A-Za-z0-9_-]{0,20}",
            bad in prop_oneof![Just("/"), Just(".."), Just("."), Just("\0"), Just("\\"), Just(" "), Just("%2e"), Just("\n")],
            suffix in "[A-Za-z0-9_-]{0,20}",
        ) {
            let id = format!("{prefix}{bad}{suffix}");
            prop_assert!(!is_valid_session_id(&id), "{:?}", id);
        }

        #[test]
        fn ids_of_the_allowed_alphabet_and_length_are_accepted(id in "[A-Za-z0-9_-]{1,128}") {
            prop_assert!(is_valid_session_id(&id));
        }
    }
}
