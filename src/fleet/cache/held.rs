//! A session value read as the cache holds it: the [`SessionEntry`] serde's derive would read,
//! in one pass, with only the members a session is served with ([`SESSION_MEMBERS`]) built,
//! each under its `&'static` name (no string made for a name), and written back as serde
//! writes that entry.
//!
//! Why: the derive's `flatten` first copies the whole value into serde's own buffer of strings
//! and numbers, then builds the map from it, so a reader starting cold on 100,000 entries spent
//! most of its time allocating (issue 27's profile: malloc, free and page faults well over half
//! of the read). Here each member goes straight into its place; one a reader drops
//! (`door_token`, `credentials`, anything unknown, which an honest host never publishes) is
//! read as the derive reads it and dropped.
//!
//! Invariant: what is accepted, and the entry it makes, are the derive's with the members
//! outside [`SESSION_MEMBERS`] removed: the same required fields, a repeated field refused, a
//! repeated member the last one kept, a member the derive cannot read (a number out of range,
//! too deep) refused; and what it writes is, byte for byte, `serde_json`'s encoding of that
//! entry (the derive's fields in their order, then the members in key order).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::model::SESSION_MEMBERS;
use super::super::{DoorScope, SessionEntry};
use crate::running::Skill;

/// A [`SessionEntry`] as the cache reads it: `entry` without its members, which are `members`.
pub(super) struct HeldEntry {
    /// The entry, its `session` empty.
    pub(super) entry: SessionEntry,
    /// Its members of [`SESSION_MEMBERS`], by name.
    pub(super) members: BTreeMap<&'static str, Value>,
}

impl HeldEntry {
    /// The whole entry, its members moved into its `session`.
    #[cfg(test)]
    pub(super) fn into_entry(self) -> SessionEntry {
        let mut entry = self.entry;
        let members = self.members.into_iter();
        entry.session = members
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
        entry
    }
}

impl Serialize for HeldEntry {
    /// As the derive writes the whole entry: its fields, `skills_omitted` only when not 0, then
    /// the flattened members (a `Map`'s order is its keys', as is a `BTreeMap`'s of `&str`).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let entry = &self.entry;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("host_id", &entry.host_id)?;
        map.serialize_entry("changed_at", &entry.changed_at)?;
        map.serialize_entry("door_scope", &entry.door_scope)?;
        map.serialize_entry("skills", &entry.skills)?;
        if entry.skills_omitted != 0 {
            map.serialize_entry("skills_omitted", &entry.skills_omitted)?;
        }
        for (name, value) in &self.members {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for HeldEntry {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EntryVisitor)
    }
}

/// What a member's name says about it.
enum Field {
    HostId,
    ChangedAt,
    DoorScope,
    Skills,
    SkillsOmitted,
    /// One of [`SESSION_MEMBERS`].
    Member(&'static str),
    /// Anything else: read, and dropped.
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_identifier(FieldVisitor)
    }
}

struct FieldVisitor;

impl Visitor<'_> for FieldVisitor {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Field, E> {
        Ok(match name {
            "host_id" => Field::HostId,
            "changed_at" => Field::ChangedAt,
            "door_scope" => Field::DoorScope,
            "skills" => Field::Skills,
            "skills_omitted" => Field::SkillsOmitted,
            _ => match SESSION_MEMBERS.iter().find(|member| **member == name) {
                Some(member) => Field::Member(member),
                None => Field::Other,
            },
        })
    }
}

struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = HeldEntry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a session entry")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeldEntry, A::Error> {
        let mut host_id: Option<String> = None;
        let mut changed_at: Option<String> = None;
        let mut door_scope: Option<Option<DoorScope>> = None;
        let mut skills: Option<Vec<Skill>> = None;
        let mut skills_omitted: Option<usize> = None;
        let mut members = BTreeMap::new();
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::HostId => once(&mut host_id, "host_id", &mut map)?,
                Field::ChangedAt => once(&mut changed_at, "changed_at", &mut map)?,
                Field::DoorScope => once(&mut door_scope, "door_scope", &mut map)?,
                Field::Skills => once(&mut skills, "skills", &mut map)?,
                Field::SkillsOmitted => once(&mut skills_omitted, "skills_omitted", &mut map)?,
                Field::Member(name) => {
                    members.insert(name, map.next_value::<Value>()?);
                }
                // Read as the derive reads it, so a value it refuses is refused here too.
                Field::Other => drop(map.next_value::<Value>()?),
            }
        }
        let entry = SessionEntry {
            host_id: host_id.ok_or_else(|| de::Error::missing_field("host_id"))?,
            changed_at: changed_at.ok_or_else(|| de::Error::missing_field("changed_at"))?,
            door_scope: door_scope.flatten(),
            skills: skills.ok_or_else(|| de::Error::missing_field("skills"))?,
            skills_omitted: skills_omitted.unwrap_or_default(),
            session: Map::new(),
        };
        Ok(HeldEntry { entry, members })
    }
}

/// Read the next value into `slot`, refusing a field given twice (as the derive does).
fn once<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
    slot: &mut Option<T>,
    name: &'static str,
    map: &mut A,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(de::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

#[cfg(test)]
mod tests;
