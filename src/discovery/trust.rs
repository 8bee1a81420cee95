//! The trust decision, pure: whether a discovery file that read well names a registry that
//! runs, from layers 1–2 on its pid and what `/healthz` answered.

use crate::process_identity::ProcessState;

/// What `/healthz` at the file's URL said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Healthz {
    /// Not asked: layers 1–2 already decided.
    NotAsked,
    /// `200`.
    Answered,
    /// No answer, or another one: why, for a person.
    Failed(String),
}

/// The decision on a discovery file that read well.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Its process is the one that wrote it, and it answers.
    Running,
    /// It names no running registry: why, for a person.
    Stale(String),
}

/// Whether `/healthz` must be asked to decide: only when layers 1–2 hold.
pub(super) fn needs_healthz(process: &ProcessState) -> bool {
    matches!(process, ProcessState::Alive)
}

/// Trust the file only when layers 1 and 2 hold for its pid and start token and `/healthz`
/// answered; anything else makes it stale, with the evidence.
pub(super) fn trust(process: &ProcessState, healthz: &Healthz) -> Verdict {
    match (process, healthz) {
        (ProcessState::Alive, Healthz::Answered) => Verdict::Running,
        (ProcessState::Alive, Healthz::Failed(why)) => Verdict::Stale(format!(
            "its process runs, but its /healthz does not answer ({why})"
        )),
        (ProcessState::Alive, Healthz::NotAsked) => {
            Verdict::Stale("its /healthz was not asked".to_owned())
        }
        (ProcessState::Gone { reason }, _) => Verdict::Stale(reason.clone()),
        (ProcessState::Unverified { reason }, _) => Verdict::Stale(format!(
            "its process cannot be confirmed as the registry that wrote it: {reason}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_confirmed_process_that_answers_is_trusted() {
        let alive = ProcessState::Alive;
        let gone = ProcessState::Gone {
            reason: "pid 7 is held by a process that started at another time".into(),
        };
        let unverified = ProcessState::Unverified {
            reason: "no start time".into(),
        };
        assert!(needs_healthz(&alive));
        assert!(!needs_healthz(&gone));
        assert!(!needs_healthz(&unverified));
        assert_eq!(trust(&alive, &Healthz::Answered), Verdict::Running);
        let failed = Healthz::Failed("connection refused".into());
        let Verdict::Stale(why) = trust(&alive, &failed) else {
            panic!("a registry that does not answer is not trusted");
        };
        assert!(why.contains("connection refused"), "{why}");
        assert!(matches!(
            trust(&alive, &Healthz::NotAsked),
            Verdict::Stale(_)
        ));
        for answered in [Healthz::Answered, Healthz::NotAsked] {
            assert_eq!(
                trust(&gone, &answered),
                Verdict::Stale("pid 7 is held by a process that started at another time".into()),
                "a reused pid is stale whatever answers at the port"
            );
            let Verdict::Stale(why) = trust(&unverified, &answered) else {
                panic!("an unverified process is not trusted");
            };
            assert!(why.contains("no start time"), "{why}");
        }
    }
}
