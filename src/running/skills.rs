//! What a verified card says a session offers: its skills' ids and tags, and nothing else.
//!
//! A card is the door's data: this keeps only short plain strings from it, a bounded number of
//! them, so a card can neither grow what is kept per session nor carry anything else along (the
//! fleet publishes these, never the card).
//!
//! Invariant: at most [`MAX_SKILLS`] skills of at most [`MAX_TAGS`] tags each, every string at
//! most [`MAX_SKILL_TEXT`] bytes and free of control characters; anything else is skipped.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// The most skills kept of one card.
pub const MAX_SKILLS: usize = 64;
/// The most tags kept of one skill.
pub const MAX_TAGS: usize = 16;
/// The longest id or tag kept, in bytes.
pub const MAX_SKILL_TEXT: usize = 128;

/// One skill a card lists: its id and tags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Skill {
    /// The skill's `id` in the card.
    pub id: String,
    /// The skill's `tags` in the card.
    pub tags: Vec<String>,
}

/// The skills `card` lists (A2A: `skills: [{id, tags, …}]`), within the bounds above.
pub fn skills_of(card: &Value) -> Vec<Skill> {
    let Some(skills) = card.get("skills").and_then(Value::as_array) else {
        return Vec::new();
    };
    skills
        .iter()
        .filter_map(|skill| {
            let id = kept_text(skill.get("id")?)?;
            let tags = skill
                .get("tags")
                .and_then(Value::as_array)
                .map(|tags| tags.iter().filter_map(kept_text).take(MAX_TAGS).collect())
                .unwrap_or_default();
            Some(Skill { id, tags })
        })
        .take(MAX_SKILLS)
        .collect()
}

/// `value` as a string worth keeping: non-empty, short, no control characters.
fn kept_text(value: &Value) -> Option<String> {
    let text = value.as_str()?;
    let keep =
        !text.is_empty() && text.len() <= MAX_SKILL_TEXT && !text.chars().any(char::is_control);
    keep.then(|| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_ids_and_tags_only() {
        let card = json!({"skills": [
            {"id": "summarize", "name": "Summarize", "description": "long", "tags": ["text", "nlp"]},
            {"id": "plan"},
        ]});
        assert_eq!(
            skills_of(&card),
            [
                Skill {
                    id: "summarize".into(),
                    tags: vec!["text".into(), "nlp".into()]
                },
                Skill {
                    id: "plan".into(),
                    tags: vec![]
                },
            ]
        );
    }

    #[test]
    fn a_card_cannot_grow_what_is_kept() {
        let long = "x".repeat(MAX_SKILL_TEXT + 1);
        let tags: Vec<String> = (0..100).map(|n| format!("t{n}")).collect();
        let mut skills = vec![
            json!({"id": long}),
            json!({"id": 7}),
            json!({"id": ""}),
            json!({"id": "bell\u{7}"}),
            json!({"tags": ["no-id"]}),
            json!({"id": "ok", "tags": [long, 3, "fine"]}),
        ];
        skills.extend((0..200).map(|n| json!({"id": format!("s{n}"), "tags": tags})));
        let kept = skills_of(&json!({ "skills": skills }));
        assert_eq!(kept.len(), MAX_SKILLS);
        assert_eq!(
            kept[0],
            Skill {
                id: "ok".into(),
                tags: vec!["fine".into()]
            }
        );
        assert!(kept[1..].iter().all(|s| s.tags.len() == MAX_TAGS));
        for not_a_list in [json!({}), json!({"skills": "x"}), json!(null), json!([1])] {
            assert_eq!(skills_of(&not_a_list), []);
        }
    }
}
