//! A host's name in the fleet: the one segment of its keys that says whose they are.
//!
//! Invariant: a `HostId` matches `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, so it can never add a
//! key segment (`/`), hide (`.` first), or be empty.

use std::fmt;
use std::str::FromStr;

/// A validated host id (`--host-id`, default the hostname).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostId(String);

/// What a host id may be, as an error says it.
pub const HOST_ID_RULE: &str = "use 1 to 128 of A-Z a-z 0-9 . _ -, starting with a letter or digit";

/// Why a host id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid host id {0:?}: {HOST_ID_RULE}")]
pub struct InvalidHostId(pub String);

impl HostId {
    /// The id as written in keys and values.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for HostId {
    type Err = InvalidHostId;

    fn from_str(id: &str) -> Result<Self, Self::Err> {
        let bytes = id.as_bytes();
        let valid = (1..=128).contains(&bytes.len())
            && bytes[0].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if valid {
            Ok(Self(id.to_owned()))
        } else {
            Err(InvalidHostId(id.to_owned()))
        }
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_hostnames_and_refuses_what_could_escape_a_key() {
        for good in [
            "a",
            "host-1",
            "web01.example.org",
            "A_b.c-9",
            &"x".repeat(128),
        ] {
            assert_eq!(
                good.parse::<HostId>().map(|h| h.to_string()),
                Ok(good.to_owned())
            );
        }
        for bad in [
            "",
            "-a",
            ".a",
            "_a",
            "a/b",
            "a b",
            "ä",
            "a\n",
            &"x".repeat(129),
        ] {
            assert_eq!(
                bad.parse::<HostId>(),
                Err(InvalidHostId(bad.to_owned())),
                "{bad:?}"
            );
        }
    }
}
