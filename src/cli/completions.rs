//! `completions`: the shell completion script for bash, zsh or fish, generated from the same
//! parser that reads the command line, so every subcommand and flag completes as it is parsed;
//! and `session-ids` (hidden), which the scripts call to complete `stop`'s session.
//!
//! Invariants kept here:
//! - Printing a script reads nothing and writes nothing but stdout.
//! - `session-ids` only lists the names in the default running directory: it opens no record,
//!   creates, changes or removes nothing, signals nothing and asks no door. A home that cannot
//!   be named or a missing directory lists nothing: a completion must stay quiet.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, CommandFactory, ValueEnum};

use super::Cli;
use crate::running::{self, RECORD_SUFFIX};

#[derive(Debug, Args)]
pub(super) struct CompletionsArgs {
    /// The shell to complete for.
    shell: CompletionShell,
}

/// The shells a script is generated for.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

pub(super) fn completions(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let script = script(args.shell)?;
    std::io::Write::write_all(&mut std::io::stdout().lock(), script.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// clap_complete's script for `shell`, with `stop`'s session completing from `session-ids`.
fn script(shell: CompletionShell) -> anyhow::Result<String> {
    let mut command = without_hidden_subcommands(&Cli::command());
    let name = command.get_name().to_owned();
    let generator = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut generated = Vec::new();
    clap_complete::generate(generator, &mut command, name.as_str(), &mut generated);
    let generated = String::from_utf8(generated).context("the generated script is not UTF-8")?;
    match shell {
        CompletionShell::Bash => {
            // clap_complete's bash script spells a hyphenated name's states two ways (the loop
            // `murmur__registry__subcmd__stop`, the arms `murmur__subcmd__registry__…`), so no
            // subcommand's flags complete (clap-rs/clap#6421); one spelling mends it.
            let arms = name.replace('-', "__subcmd__");
            let mended = generated.replace(&arms, &name.replace('-', "__"));
            Ok(mended + BASH_SESSION_IDS)
        }
        CompletionShell::Zsh => zsh_with_session_ids(&generated),
        CompletionShell::Fish => Ok(generated + FISH_SESSION_IDS),
    }
}

/// The top-level parser as `--help` shows it: clap_complete's scripts would offer a hidden
/// subcommand (`session-ids`) like any other, so the scripts are made from this one. Its name
/// and version are `Cli`'s (`name`, `version` from the package; checked by a test).
fn without_hidden_subcommands(full: &clap::Command) -> clap::Command {
    let mut shown = clap::Command::new(env!("CARGO_PKG_NAME"))
        .version(env!("CARGO_PKG_VERSION"))
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
        .args(full.get_arguments().cloned());
    if let Some(about) = full.get_about() {
        shown = shown.about(about.clone());
    }
    shown
}

/// Wraps clap_complete's `_murmur__registry`: `stop`'s argument (not a flag, not a flag's
/// value) completes from the ids; everything else is the generated function's.
const BASH_SESSION_IDS: &str = r#"
# Session ids for `stop`, from the names in the running directory (`session-ids` opens no
# record, prunes nothing and asks no door).
_murmur__registry__sessions() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    if [[ ${COMP_CWORD} -ge 2 && ${COMP_WORDS[1]} == stop && ${cur} != -* \
          && ${prev} != --timeout && ${prev} != --running-dir ]]; then
        COMPREPLY=( $(compgen -W "$(murmur-registry session-ids 2>/dev/null)" -- "${cur}") )
        return 0
    fi
    _murmur__registry "$@"
}
complete -F _murmur__registry__sessions -o bashdefault -o default murmur-registry
"#;

/// Fish adds completions per condition: the ids go beside the generated ones for `stop`.
const FISH_SESSION_IDS: &str = r#"
# Session ids for `stop`, from the names in the running directory (`session-ids` opens no
# record, prunes nothing and asks no door).
complete -c murmur-registry -n "__fish_murmur_registry_using_subcommand stop" -f \
    -a "(murmur-registry session-ids 2>/dev/null)" -d 'session id'
"#;

/// The zsh action for a session, defined at the top of the script so it exists before
/// anything in the script runs a completion.
const ZSH_SESSION_IDS: &str = r#"
# Session ids for `stop`, from the names in the running directory (`session-ids` opens no
# record, prunes nothing and asks no door).
(( $+functions[_murmur-registry_session_ids] )) ||
_murmur-registry_session_ids() {
    local -a ids
    ids=(${(f)"$(murmur-registry session-ids 2>/dev/null)"})
    _wanted session-ids expl 'session id' compadd -a ids
}
"#;

/// The generated zsh script with every `session` argument's action (`_default`) turned into
/// [`ZSH_SESSION_IDS`]'s, which goes right after the `#compdef` line.
fn zsh_with_session_ids(generated: &str) -> anyhow::Result<String> {
    let Some((compdef, rest)) = generated.split_once('\n') else {
        bail!("the generated zsh script is empty");
    };
    let mut script = format!("{compdef}\n{ZSH_SESSION_IDS}");
    let mut replaced_any = false;
    for line in rest.split_inclusive('\n') {
        match line.strip_suffix(":_default' \\\n") {
            Some(spec) if spec.starts_with("':session -- ") => {
                script.push_str(spec);
                script.push_str(":_murmur-registry_session_ids' \\\n");
                replaced_any = true;
            }
            _ => script.push_str(line),
        }
    }
    if !replaced_any {
        bail!("the generated zsh script has no `session` argument to complete ids for");
    }
    Ok(script)
}

/// Print, sorted, one a line, the session ids that the default running directory's record
/// names give (`<id>.json`, not hidden, an id `stop` accepts).
pub(super) fn session_ids() -> anyhow::Result<ExitCode> {
    // The directory `running::running_dir_in` holds, named without creating or narrowing it.
    let Ok(home) = super::home() else {
        return Ok(ExitCode::SUCCESS);
    };
    let Ok(entries) = std::fs::read_dir(home.join(".murmur").join("running")) else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut ids: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|name| {
            let id = name.strip_suffix(RECORD_SUFFIX)?;
            (!id.starts_with('.') && running::is_valid_session_id(id)).then(|| id.to_owned())
        })
        .collect();
    ids.sort_unstable();
    let mut out = std::io::stdout().lock();
    for id in ids {
        std::io::Write::write_all(&mut out, format!("{id}\n").as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The splice depends on clap_complete's zsh layout: a new layout fails here, not in a shell.
    #[test]
    fn the_zsh_script_completes_sessions_with_the_ids() {
        let script = script(CompletionShell::Zsh).expect("a zsh script");
        assert!(script.starts_with("#compdef murmur-registry\n"));
        assert_eq!(
            script
                .lines()
                .filter(|l| l.starts_with("':session -- "))
                .map(|l| l.ends_with(":_murmur-registry_session_ids' \\"))
                .collect::<Vec<_>>(),
            [true],
            "stop's one session argument, and only through the ids"
        );
    }

    #[test]
    fn the_parser_for_scripts_is_the_cli_less_its_hidden_subcommands() {
        let full = Cli::command();
        let shown = without_hidden_subcommands(&full);
        assert_eq!(shown.get_name(), full.get_name());
        assert_eq!(shown.get_version(), full.get_version());
        assert_eq!(
            shown.get_about().map(ToString::to_string),
            full.get_about().map(ToString::to_string)
        );
        let names = |c: &clap::Command, hidden: bool| -> Vec<String> {
            c.get_subcommands()
                .filter(|s| hidden || !s.is_hide_set())
                .map(|s| s.get_name().to_owned())
                .collect()
        };
        assert_eq!(names(&shown, true), names(&full, false));
        assert!(names(&full, true).contains(&"session-ids".to_owned()));
    }

    #[test]
    fn a_zsh_script_without_a_session_argument_is_an_error() {
        assert!(zsh_with_session_ids("#compdef x\n'--flag[f]:F:_default' \\\n").is_err());
        assert!(zsh_with_session_ids("").is_err());
    }
}
