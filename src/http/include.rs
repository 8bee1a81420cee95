//! `include=`: the optional members a client asks to have added to each session object.
//!
//! Invariant: the words a client may write are [`Included`]'s own, as serde spells them; a word
//! it does not know is a 400 naming the words it does, never silently dropped.

use serde::Deserialize;

use super::error::{ApiError, quoted};
use super::list_filter::query_words;

/// One optional member of a session object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Included {
    /// `card`: the agent card the door served in the probe that verified the session.
    Card,
    /// `resources`: what the session's process costs (CPU, memory, threads).
    Resources,
}

/// The optional members one request asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Includes {
    /// `card` was asked for.
    pub(crate) card: bool,
    /// `resources` was asked for.
    pub(crate) resources: bool,
}

impl Includes {
    /// Read a comma list such as `card,resources`; absent means nothing extra. A word repeated
    /// is the same as once.
    pub(crate) fn parse(words: Option<&str>) -> Result<Self, ApiError> {
        let Some(words) = words else {
            return Ok(Self::default());
        };
        let words = query_words("include", words, |word| {
            let as_word = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(word);
            Included::deserialize(as_word).map_err(|_| {
                format!(
                    "unknown include {}: use card or resources, comma-separated",
                    quoted(word)
                )
            })
        })?;
        Ok(Self {
            card: words.contains(&Included::Card),
            resources: words.contains(&Included::Resources),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_word_and_refuses_others() {
        assert_eq!(Includes::parse(None).ok(), Some(Includes::default()));
        let both = Includes::parse(Some("card, resources,card")).ok();
        assert_eq!(
            both,
            Some(Includes {
                card: true,
                resources: true
            })
        );
        assert_eq!(
            Includes::parse(Some("resources")).ok(),
            Some(Includes {
                card: false,
                resources: true
            })
        );
        assert!(Includes::parse(Some("card,cpu")).is_err());
        assert!(Includes::parse(Some("")).is_err());
        assert!(Includes::parse(Some("Card")).is_err());
    }
}
