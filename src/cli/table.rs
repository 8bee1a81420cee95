//! Text tables for a terminal, as `ps` and `ps --fleet` print them: left-aligned columns of
//! escaped cells, and the uptime cell both show.
//!
//! Invariant: every cell goes through [`escaped`], so a value from a record or from etcd can
//! neither steer the terminal nor add a row.

use std::time::{Duration, SystemTime};

use crate::control_chars::escaped;

/// Left-aligned columns as wide as their widest cell, two spaces apart, under `header`.
///
/// Every cell is shown [`escaped`]: a value from a record or from etcd stays in its cell.
pub(super) fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let rows: Vec<[String; N]> = rows
        .iter()
        .map(|row| row.each_ref().map(|cell| escaped(cell).into_owned()))
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut table = String::new();
    let mut push_row = |cells: &[&str]| {
        let line: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        table.push_str(line.join("  ").trim_end());
        table.push('\n');
    };
    push_row(&header);
    for row in &rows {
        push_row(&row.each_ref().map(String::as_str));
    }
    table
}

/// `HH:MM:SS` since `started_at`, with `Nd ` in front past a day; `-` when unknown.
pub(super) fn uptime(started_at: &str, now: SystemTime) -> String {
    let started = started_at.trim();
    let normalised = started
        .strip_suffix("+00:00")
        .map(|s| format!("{s}Z"))
        .unwrap_or_else(|| started.to_owned());
    let Ok(start) = humantime::parse_rfc3339_weak(&normalised) else {
        return "-".to_owned();
    };
    let secs = now
        .duration_since(start)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    format_uptime(secs)
}

fn format_uptime(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let clock = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    if days > 0 {
        format!("{days}d {clock}")
    } else {
        clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_is_clock_then_days() {
        assert_eq!(format_uptime(0), "00:00:00");
        assert_eq!(format_uptime(3_661), "01:01:01");
        assert_eq!(format_uptime(86_399), "23:59:59");
        assert_eq!(format_uptime(86_400 + 5), "1d 00:00:05");
        assert_eq!(format_uptime(3 * 86_400 + 7_200), "3d 02:00:00");
    }
}
