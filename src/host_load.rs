//! This machine's load as a whole (not any one process's): CPU count, load average and memory,
//! for the fleet's host entries and `/metrics`.
//!
//! Invariant: a reading is whole and sane or there is none: every figure finite and at least
//! zero, at least one CPU, some memory, and the memory available never over the total.

use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};

pub use crate::wire::HostLoad;

impl HostLoad {
    /// Read the host's figures now; `None` when the kernel's answer is not whole and sane.
    ///
    /// Costs a few `/proc` and `/sys` reads (tens of microseconds): fine every 30 s or per
    /// scrape, not per request.
    pub fn read() -> Option<Self> {
        let refresh = RefreshKind::nothing()
            .with_cpu(CpuRefreshKind::nothing())
            .with_memory(MemoryRefreshKind::nothing().with_ram());
        let system = System::new_with_specifics(refresh).ok()?;
        let load = System::load_average().ok()?;
        let measured_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        Self {
            cpus: u32::try_from(system.cpus().len()).unwrap_or(u32::MAX),
            load_1m: load.one,
            load_5m: load.five,
            load_15m: load.fifteen,
            memory_total_bytes: system.total_memory(),
            memory_available_bytes: system.available_memory(),
            measured_at: measured_at.to_string(),
        }
        .sane()
    }

    /// `self` if every figure is sane (see the module's invariant), else `None`.
    fn sane(self) -> Option<Self> {
        let loads = [self.load_1m, self.load_5m, self.load_15m];
        let loads_sane = loads.iter().all(|load| load.is_finite() && *load >= 0.0);
        let memory_sane =
            self.memory_total_bytes > 0 && self.memory_available_bytes <= self.memory_total_bytes;
        (loads_sane && memory_sane && self.cpus > 0).then_some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_reads_whole_and_sane() {
        let load = HostLoad::read().expect("a reading on Linux");
        assert!(load.cpus >= 1);
        assert!(load.load_1m >= 0.0 && load.load_5m >= 0.0 && load.load_15m >= 0.0);
        assert!(load.memory_available_bytes <= load.memory_total_bytes);
        assert!(load.memory_total_bytes > 0);
        assert!(humantime::parse_rfc3339(&load.measured_at).is_ok());
    }

    #[test]
    fn an_insane_reading_is_none() {
        let good = HostLoad {
            cpus: 2,
            load_1m: 0.5,
            load_5m: 0.25,
            load_15m: 0.0,
            memory_total_bytes: 100,
            memory_available_bytes: 100,
            measured_at: "2026-12-02T18:00:00Z".to_owned(),
        };
        assert_eq!(good.clone().sane(), Some(good.clone()));
        let bad = [
            HostLoad {
                cpus: 0,
                ..good.clone()
            },
            HostLoad {
                load_1m: -0.01,
                ..good.clone()
            },
            HostLoad {
                load_5m: f64::NAN,
                ..good.clone()
            },
            HostLoad {
                load_15m: f64::INFINITY,
                ..good.clone()
            },
            HostLoad {
                memory_total_bytes: 0,
                memory_available_bytes: 0,
                ..good.clone()
            },
            HostLoad {
                memory_available_bytes: 101,
                ..good.clone()
            },
        ];
        for reading in bad {
            assert_eq!(reading.clone().sane(), None, "{reading:?}");
        }
    }
}
