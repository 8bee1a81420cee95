//! Which registry binaries the issue-15 scenarios run against: this build's, and the pre-issue
//! one `MURMUR_BENCH_BASELINE_BIN` names, each scenario against both in the same run.
//!
//! Invariant: a baseline that is named but cannot be run fails the bench at once, so a run
//! never prints a side-by-side table with one side silently missing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable naming the pre-issue binary.
const BASELINE_VAR: &str = "MURMUR_BENCH_BASELINE_BIN";

/// This build's binary, and the baseline when one is named.
pub struct Binaries {
    new: PathBuf,
    baseline: Option<PathBuf>,
}

/// One binary a scenario runs against.
#[derive(Clone, Copy)]
pub struct Binary<'a> {
    pub path: &'a Path,
    /// True for the pre-issue binary.
    pub is_baseline: bool,
}

impl Binaries {
    /// This build's binary, and `MURMUR_BENCH_BASELINE_BIN` when set.
    pub fn from_env() -> Self {
        let baseline = std::env::var_os(BASELINE_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        if let Some(path) = &baseline {
            let ran = Command::new(path).arg("--version").output();
            assert!(
                ran.as_ref().is_ok_and(|out| out.status.success()),
                "{BASELINE_VAR}={} cannot be run: {ran:?}",
                path.display()
            );
        }
        Self {
            new: PathBuf::from(env!("CARGO_BIN_EXE_murmur-registry")),
            baseline,
        }
    }

    /// This build's binary first, then the baseline when there is one.
    pub fn each(&self) -> Vec<Binary<'_>> {
        let mut all = vec![Binary {
            path: &self.new,
            is_baseline: false,
        }];
        if let Some(path) = &self.baseline {
            all.push(Binary {
                path,
                is_baseline: true,
            });
        }
        all
    }

    /// This build, the baseline, the baseline again, this build again (or this build alone):
    /// a machine that grows busier or quieter during a scenario then weighs on both alike.
    /// The first registry run against freshly started processes and doors costs more than any
    /// later one (12.3 % against 6.8 % of a core idle, the same binary twice), so scenarios
    /// also run an uncounted warm-up first.
    pub fn balanced(&self) -> Vec<Binary<'_>> {
        let each = self.each();
        match each.as_slice() {
            [new, baseline] => vec![*new, *baseline, *baseline, *new],
            _ => each,
        }
    }

    /// One line for the head of the run: what is compared, and whether this build has the
    /// `--door-recheck` schedule the idle figures depend on.
    pub fn describe(&self) -> String {
        let recheck = if serve_accepts(&self.new, "--door-recheck") {
            "has --door-recheck"
        } else {
            "no --door-recheck yet"
        };
        match &self.baseline {
            Some(path) => format!("this build ({recheck}) against {}", path.display()),
            None => format!("this build ({recheck}); {BASELINE_VAR} unset, no pre-issue figures"),
        }
    }
}

/// Whether `binary serve --help` lists `flag`.
fn serve_accepts(binary: &Path, flag: &str) -> bool {
    Command::new(binary)
        .args(["serve", "--help"])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(flag))
}

/// Figures of one scenario, this build's and the baseline's, in the order they were taken.
pub struct Sides<T> {
    pub new: Vec<T>,
    pub baseline: Vec<T>,
}

impl<T> Sides<T> {
    pub fn new() -> Self {
        Self {
            new: Vec::new(),
            baseline: Vec::new(),
        }
    }

    /// File `figure`, taken against `binary`.
    pub fn push(&mut self, binary: Binary<'_>, figure: T) {
        if binary.is_baseline {
            self.baseline.push(figure);
        } else {
            self.new.push(figure);
        }
    }
}
