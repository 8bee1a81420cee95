//! `completions`: the shell completion script for bash, zsh or fish, generated from the same
//! parser that reads the command line, so every subcommand and flag completes as it is parsed.
//!
//! Invariant: printing a script reads nothing and writes nothing but stdout.

use std::process::ExitCode;

use clap::{Args, CommandFactory, ValueEnum};

use super::Cli;

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

impl CompletionShell {
    fn generator(self) -> clap_complete::Shell {
        match self {
            Self::Bash => clap_complete::Shell::Bash,
            Self::Zsh => clap_complete::Shell::Zsh,
            Self::Fish => clap_complete::Shell::Fish,
        }
    }
}

pub(super) fn completions(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut command = Cli::command();
    let name = command.get_name().to_owned();
    clap_complete::generate(
        args.shell.generator(),
        &mut command,
        name,
        &mut std::io::stdout().lock(),
    );
    Ok(ExitCode::SUCCESS)
}
