//! The filters of a session listing: `status`, `capsule` and `skill`, each a comma list, and the
//! one predicate that applies them, to a reading (`GET /sessions`, `murmur-registry ps`) or to
//! an entry of the fleet (`GET /fleet/sessions`, `ps --fleet`); and [`query_words`], the one
//! reader of every comma list a query carries (these, `host=`, `include=`).
//!
//! Invariants: a list holds no empty word (`capsule=` or `a,,b` is a 400, never "match
//! nothing") and every list at most [`MAX_QUERY_WORDS`] words (a 400 beyond); the
//! words kept are a set, so judging a session costs one lookup per skill id and tag whatever
//! the number of words; a session is kept only when every filter given admits it; `status`
//! words are [`SessionState`]'s own, as it serializes them.

use std::collections::HashSet;
use std::hash::Hash;

use serde::Deserialize;

use super::error::{ApiError, quoted};
use crate::registry::Reading;
use crate::running::{MAX_SKILLS, Skill};
use crate::wire::SessionState;

/// The most words one comma list of a query may hold: as many as a card may list skills, so a
/// filter naming every skill of a card is still taken.
pub(crate) const MAX_QUERY_WORDS: usize = MAX_SKILLS;

/// The words of `list`, the value of query parameter `what`: split on commas, trimmed, at most
/// [`MAX_QUERY_WORDS`] of them, each read by `word` (whose error is the detail of the 400). A
/// word repeated is kept once.
pub(crate) fn query_words<T: Eq + Hash>(
    what: &str,
    list: &str,
    mut word: impl FnMut(&str) -> Result<T, String>,
) -> Result<HashSet<T>, ApiError> {
    let mut words = HashSet::new();
    for (n, text) in list.split(',').map(str::trim).enumerate() {
        if n == MAX_QUERY_WORDS {
            return Err(ApiError::bad_query(format!(
                "{what} takes at most {MAX_QUERY_WORDS} words, separated by commas"
            )));
        }
        words.insert(word(text).map_err(ApiError::bad_query)?);
    }
    Ok(words)
}

/// A name of a `capsule` or `skill` list (`what`): any word but an empty one.
fn name(what: &str, word: &str) -> Result<String, String> {
    if word.is_empty() {
        Err(format!(
            "{what} takes names separated by commas, none of them empty"
        ))
    } else {
        Ok(word.to_owned())
    }
}

/// The filters one listing asked for; `None` where a filter was not given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ListFilter {
    states: Option<HashSet<SessionState>>,
    capsules: Option<HashSet<String>>,
    skills: Option<HashSet<String>>,
}

impl ListFilter {
    /// Read the three comma lists as a query writes them.
    pub(crate) fn parse(
        status: Option<&str>,
        capsule: Option<&str>,
        skill: Option<&str>,
    ) -> Result<Self, ApiError> {
        let names = |what: &str, list: &str| query_words(what, list, |word| name(what, word));
        Ok(Self {
            states: status.map(parse_status_filter).transpose()?,
            capsules: capsule.map(|list| names("capsule", list)).transpose()?,
            skills: skill.map(|list| names("skill", list)).transpose()?,
        })
    }

    /// The filters `ps` takes as flags, each flag's names already split on commas and checked
    /// non-empty by the command line; no names means no filter.
    pub(crate) fn of_names(capsules: Vec<String>, skills: Vec<String>) -> Self {
        let given = |names: Vec<String>| (!names.is_empty()).then(|| names.into_iter().collect());
        Self {
            states: None,
            capsules: given(capsules),
            skills: given(skills),
        }
    }

    /// No filter was given: every session is kept.
    pub(crate) fn is_everything(&self) -> bool {
        self.states.is_none() && self.capsules.is_none() && self.skills.is_none()
    }

    /// Why these filters cannot be answered without the door probe, if they cannot: `live`
    /// and `unreachable` are the probe's verdicts, and skills come from the cards it verified.
    pub(crate) fn needs_probe(&self) -> Option<&'static str> {
        let by_state =
            (self.states.as_ref()).is_some_and(|s| s.iter().any(|s| *s != SessionState::Gone));
        if by_state {
            Some("status=live and status=unreachable need the door probe; drop probe=false")
        } else if self.skills.is_some() {
            Some(
                "skill= needs the door probe (skills are read from the card that verified each \
                 session); drop probe=false",
            )
        } else {
            None
        }
    }

    /// Whether `lean` (layers 1–2 read, its door not asked) may be kept once verified: its
    /// capsule is admitted and so is its state, where layers 1–2 settled it; a state left to
    /// the probe may be `live` or `unreachable`, and skills are the probe's, so not judged.
    pub(crate) fn may_keep(&self, lean: &Reading) -> bool {
        let settled = lean.liveness.as_ref().map(SessionState::from);
        let state_may = (self.states.as_ref()).is_none_or(|states| match settled {
            Some(state) => states.contains(&state),
            None => states.iter().any(|state| *state != SessionState::Gone),
        });
        let capsule = &lean.record.capsule_name;
        state_may && (self.capsules.as_ref()).is_none_or(|capsules| capsules.contains(capsule))
    }

    /// Whether every filter given admits `reading`.
    pub(crate) fn keeps(&self, reading: &Reading) -> bool {
        let state = reading.liveness.as_ref().map(SessionState::from);
        self.admits(state, Some(&reading.record.capsule_name), &reading.skills)
    }

    /// Whether every filter given admits a session in `state` (`None`: undecided), of capsule
    /// `capsule`, offering `skills`: a reading here, or an entry another host published.
    pub(crate) fn admits(
        &self,
        state: Option<SessionState>,
        capsule: Option<&str>,
        skills: &[Skill],
    ) -> bool {
        (self.states.as_ref()).is_none_or(|states| state.is_some_and(|s| states.contains(&s)))
            && (self.capsules.as_ref())
                .is_none_or(|capsules| capsule.is_some_and(|n| capsules.contains(n)))
            && (self.skills.as_ref())
                .is_none_or(|wanted| offers_any(skills, |name| wanted.contains(name)))
    }
}

/// Whether any of `skills` has an id or a tag that `wanted` names: at most one question of
/// `wanted` per id and tag (a set's lookup), so the cost never grows with the words asked for.
fn offers_any(skills: &[Skill], mut wanted: impl FnMut(&str) -> bool) -> bool {
    skills
        .iter()
        .any(|skill| wanted(&skill.id) || skill.tags.iter().any(|tag| wanted(tag)))
}

/// A `status` comma list: each word one of [`SessionState`]'s.
fn parse_status_filter(status: &str) -> Result<HashSet<SessionState>, ApiError> {
    query_words("status", status, |word| {
        // The words are the enum's own, as it serializes them.
        let as_word = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(word);
        SessionState::deserialize(as_word).map_err(|_| {
            format!(
                "unknown status {}: use live, unreachable or gone, comma-separated",
                quoted(word)
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::running::{Liveness, ProcessState, RunningRecord};

    fn reading(capsule: &str, liveness: Option<Liveness>, skills: &[(&str, &[&str])]) -> Reading {
        let record: RunningRecord = serde_json::from_value(serde_json::json!({
            "session_id": "ses_1", "url": "127.0.0.1:1", "pid": 1, "process_start": "7",
            "capsule_name": capsule, "capsule_version": "1", "workdir": "/w",
            "outlives_launcher": false, "started_at": "2026-11-30T00:00:00Z"
        }))
        .expect("a record");
        let skills: Vec<Skill> = (skills.iter())
            .map(|(id, tags)| Skill {
                id: (*id).to_owned(),
                tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            })
            .collect();
        Reading {
            record: Arc::new(record),
            process: ProcessState::Alive,
            liveness,
            skills: skills.into(),
        }
    }

    fn filter(status: Option<&str>, capsule: Option<&str>, skill: Option<&str>) -> ListFilter {
        ListFilter::parse(status, capsule, skill).expect("a valid filter")
    }

    #[test]
    fn a_lean_reading_may_be_kept_unless_what_layers_one_and_two_settled_is_turned_away() {
        let gone = Liveness::Gone { reason: "x".into() };
        let settled_gone = reading("alpha", Some(gone), &[]);
        let undecided = reading("alpha", None, &[]);
        let live = filter(Some("live"), None, None);
        assert!(live.may_keep(&undecided));
        assert!(!live.may_keep(&settled_gone));
        let gone_only = filter(Some("gone"), None, None);
        assert!(gone_only.may_keep(&settled_gone));
        assert!(!gone_only.may_keep(&undecided));
        assert!(!filter(None, Some("beta"), None).may_keep(&undecided));
        assert!(filter(None, Some("alpha"), Some("any")).may_keep(&undecided));
        assert!(filter(None, None, None).may_keep(&settled_gone));
    }

    #[test]
    fn each_filter_admits_what_it_names_and_they_combine() {
        let live = reading("alpha", Some(Liveness::Live), &[("summarize", &["text"])]);
        let down = Liveness::Unreachable { reason: "x".into() };
        let unreachable = reading("beta", Some(down), &[]);
        let unprobed = reading("alpha", None, &[]);
        let everything = filter(None, None, None);
        assert!(everything.is_everything());
        for r in [&live, &unreachable, &unprobed] {
            assert!(everything.keeps(r));
        }
        let alpha = filter(None, Some("alpha"), None);
        assert!(alpha.keeps(&live) && alpha.keeps(&unprobed) && !alpha.keeps(&unreachable));
        let both = filter(None, Some("beta, alpha"), None);
        assert!(both.keeps(&live) && both.keeps(&unreachable));
        assert!(filter(None, None, Some("summarize")).keeps(&live));
        assert!(filter(None, None, Some("nope,text")).keeps(&live));
        assert!(!filter(None, None, Some("summ")).keeps(&live));
        assert!(!filter(None, None, Some("text")).keeps(&unreachable));
        let live_alpha = filter(Some("live"), Some("alpha"), None);
        assert!(live_alpha.keeps(&live) && !live_alpha.keeps(&unprobed));
        assert!(!filter(Some("unreachable"), None, Some("text")).keeps(&live));
    }

    #[test]
    fn empty_words_and_unknown_states_are_refused() {
        for (status, capsule, skill) in [
            (Some(""), None, None),
            (Some("alive"), None, None),
            (None, Some(""), None),
            (None, Some("a,,b"), None),
            (None, None, Some(" ")),
            (None, None, Some("x,")),
        ] {
            assert!(ListFilter::parse(status, capsule, skill).is_err());
        }
        let flags = ListFilter::of_names(vec!["a".into(), "b".into()], vec!["s".into()]);
        assert_eq!(flags, filter(None, Some("a,b"), Some("s")));
        assert!(ListFilter::of_names(Vec::new(), Vec::new()).is_everything());
    }

    #[test]
    fn a_list_longer_than_the_cap_is_refused_and_repeats_count_once() {
        let words = |n: usize| {
            (0..n)
                .map(|i| format!("w{i}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let at_cap = words(MAX_QUERY_WORDS);
        for (status, capsule, skill) in [
            (None, Some(at_cap.as_str()), None),
            (None, None, Some(at_cap.as_str())),
        ] {
            assert!(ListFilter::parse(status, capsule, skill).is_ok());
        }
        let over = words(MAX_QUERY_WORDS + 1);
        let states = vec!["live"; MAX_QUERY_WORDS + 1].join(",");
        for (status, capsule, skill) in [
            (Some(states.as_str()), None, None),
            (None, Some(over.as_str()), None),
            (None, None, Some(over.as_str())),
        ] {
            let Err(ApiError::Problem(problem)) = ListFilter::parse(status, capsule, skill) else {
                panic!("{MAX_QUERY_WORDS} + 1 words are refused");
            };
            assert_eq!(problem.status, 400);
            assert!(
                problem.detail.contains("at most 64 words"),
                "{}",
                problem.detail
            );
        }
        // Refused at the cap, before the rest of a long list is read.
        let huge = words(9_000);
        assert!(ListFilter::parse(None, None, Some(&huge)).is_err());
        let twice = filter(Some("live,live,gone"), Some("a,a"), None);
        assert_eq!(twice, filter(Some("gone,live"), Some("a"), None));
    }

    #[test]
    fn judging_skills_asks_the_set_once_per_id_and_tag_whatever_the_words() {
        let skills: Vec<Skill> = (0..MAX_SKILLS)
            .map(|i| Skill {
                id: format!("s{i}"),
                tags: (0..16).map(|t| format!("t{i}-{t}")).collect(),
            })
            .collect();
        // The largest filter allowed, naming none of them: every id and tag is asked once.
        let wanted: HashSet<String> = (0..MAX_QUERY_WORDS).map(|i| format!("x{i}")).collect();
        let mut asked = 0;
        let found = offers_any(&skills, |name| {
            asked += 1;
            wanted.contains(name)
        });
        assert!(!found);
        assert_eq!(asked, MAX_SKILLS * 17);
        let mut asked = 0;
        assert!(offers_any(&skills, |name| {
            asked += 1;
            name == "s0"
        }));
        assert_eq!(asked, 1, "the first match ends the search");
    }

    #[test]
    fn only_the_probes_verdicts_and_skills_need_the_probe() {
        assert!(
            filter(Some("gone"), Some("a"), None)
                .needs_probe()
                .is_none()
        );
        assert!(
            filter(Some("gone,live"), None, None)
                .needs_probe()
                .is_some()
        );
        assert!(filter(None, None, Some("x")).needs_probe().is_some());
    }
}
