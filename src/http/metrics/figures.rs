//! The registry's and the accept loop's figures as Prometheus metrics, read at each scrape.
//!
//! Invariant: every label value is a wire word of the enum that names it to clients
//! ([`SessionState`], [`Outcome`], [`RemovalCause`]), a signal's name, or a [`ShedCause`]; the
//! series are the same at every scrape (zeros included), so rates never start mid-way. Three
//! exceptions: the `fleet_*` series exist only in a fleet, `fleet_hosts` only while the
//! fleet view can be read (a 0 would claim an empty fleet), and `host_*` only while the
//! host's figures read whole and sane (always, on Linux).

use std::time::UNIX_EPOCH;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;

use crate::fleet::refusals::{Refusal, refused};
use crate::fleet::{FleetView, PublishFigures};
use crate::host_load::HostLoad;
use crate::http::AppState;
use crate::http::server::ShedCause;
use crate::registry::{
    ActionEnd, COUNTED_REMOVALS, DurationFigures, PictureFigures, ProbeEnd, Registry, SignalKind,
};
use crate::wire::{Outcome, SessionState};

/// What one scrape reads: the registry's tally, the load figures and the fleet view.
#[derive(Debug)]
pub(super) struct Figures {
    state: AppState,
}

impl Figures {
    pub(super) fn of(state: &AppState) -> Self {
        Self {
            state: state.clone(),
        }
    }
}

/// The word a client reads for `value` (a unit variant of a wire enum).
fn wire_word(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(word)) => word,
        // Unit variants always serialise to their word.
        _ => String::new(),
    }
}

/// How a signal or stop ended, as the `outcome` member says it.
fn outcome(end: ActionEnd) -> Outcome {
    match end {
        ActionEnd::Sent => Outcome::Sent,
        ActionEnd::Stopped => Outcome::Stopped,
        ActionEnd::AlreadyGone => Outcome::AlreadyGone,
        ActionEnd::Refused => Outcome::Refused,
    }
}

/// A probe's end as the state it shows: a door that named the session keeps it live.
fn probe_state(end: ProbeEnd) -> SessionState {
    match end {
        ProbeEnd::Confirmed => SessionState::Live,
        ProbeEnd::Unconfirmed => SessionState::Unreachable,
    }
}

type Fmt = Result<(), std::fmt::Error>;

/// One metric of `kind` with a series per `(labels, value)`.
fn series<const N: usize>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    values: impl IntoIterator<Item = ([(&'static str, String); N], u64)>,
) -> Fmt {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in values {
        let family = metric.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(value).encode(family)?,
            _ => ConstGauge::new(value).encode(family)?,
        }
    }
    Ok(())
}

/// One metric of `kind` without labels.
fn single(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> Fmt {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    figures: &DurationFigures,
) -> Fmt {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    metric.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
        figures.sum_seconds,
        figures.count,
        &figures.buckets,
        None,
    )
}

fn picture(encoder: &mut DescriptorEncoder, last: &PictureFigures) -> Fmt {
    let by_state = [
        (SessionState::Live, last.live),
        (SessionState::Unreachable, last.unreachable),
        (SessionState::Gone, last.gone),
    ];
    series(
        encoder,
        "sessions",
        "Sessions by state (live, unreachable, gone) in the registry's latest picture.",
        MetricType::Gauge,
        by_state.map(|(state, n)| ([("state", wire_word(state))], n)),
    )?;
    series::<0>(
        encoder,
        "unreadable_entries",
        "Entries of the running directory that are not valid records, in the latest picture.",
        MetricType::Gauge,
        [([], last.unreadable)],
    )?;
    let at = last
        .at
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0.0, |since| since.as_secs_f64());
    single(
        encoder,
        "last_listing_timestamp_seconds",
        "When the latest picture was taken: a verified listing, a verified page of one, or a \
         live-view pass (Unix time; 0 before the first).",
        at,
    )
}

fn registry_counts(encoder: &mut DescriptorEncoder, registry: &Registry) -> Fmt {
    let tally = registry.tally();
    series(
        encoder,
        "door_probes",
        "Door probes by outcome: live (the door named the session) or unreachable.",
        MetricType::Counter,
        [ProbeEnd::Confirmed, ProbeEnd::Unconfirmed].map(|end| {
            (
                [("outcome", wire_word(probe_state(end)))],
                tally.probes(end),
            )
        }),
    )?;
    histogram(
        encoder,
        "door_probe_duration_seconds",
        "How long door probes took.",
        &tally.probe_durations(),
    )?;
    series(
        encoder,
        "prunes",
        "Records and unreadable entries the registry removed, by reason.",
        MetricType::Counter,
        COUNTED_REMOVALS.map(|cause| ([("reason", wire_word(cause))], tally.removals(cause))),
    )?;
    let signals = SignalKind::ALL.iter().flat_map(|kind| {
        ActionEnd::OF_SIGNALS.map(|end| {
            let labels = [
                ("signal", kind.name().to_owned()),
                ("outcome", wire_word(outcome(end))),
            ];
            (labels, tally.signals(*kind, end))
        })
    });
    series(
        encoder,
        "signals",
        "Signals the registry tried to send (signal and stop alike), by signal and outcome.",
        MetricType::Counter,
        signals,
    )?;
    series(
        encoder,
        "stops",
        "Stops by outcome.",
        MetricType::Counter,
        ActionEnd::OF_STOPS.map(|end| ([("outcome", wire_word(outcome(end)))], tally.stops(end))),
    )
}

fn load(encoder: &mut DescriptorEncoder, state: &AppState) -> Fmt {
    let load = state.metrics().load();
    series::<0>(
        encoder,
        "event_streams_open",
        "Event streams (/events and /fleet/events) open now.",
        MetricType::Gauge,
        [([], load.open_streams())],
    )?;
    series(
        encoder,
        "load_shed",
        "Requests answered 503 for load, by the limit reached.",
        MetricType::Counter,
        ShedCause::ALL.map(|cause| ([("cause", cause.word().to_owned())], load.sheds(cause))),
    )
}

/// The host's own load, read at the scrape (a few `/proc` reads); nothing when it cannot be
/// read whole and sane.
fn host(encoder: &mut DescriptorEncoder) -> Fmt {
    let Some(load) = HostLoad::read() else {
        return Ok(());
    };
    let figures = [
        (
            "host_cpus",
            "Logical CPUs of this host.",
            f64::from(load.cpus),
        ),
        (
            "host_load1",
            "This host's load average over 1 minute.",
            load.load_1m,
        ),
        (
            "host_load5",
            "This host's load average over 5 minutes.",
            load.load_5m,
        ),
        (
            "host_load15",
            "This host's load average over 15 minutes.",
            load.load_15m,
        ),
    ];
    for (name, help, value) in figures {
        single(encoder, name, help, value)?;
    }
    let memory = [
        (
            "host_memory_total_bytes",
            "This host's physical memory.",
            load.memory_total_bytes,
        ),
        (
            "host_memory_available_bytes",
            "Memory available to new work on this host without swapping (MemAvailable).",
            load.memory_available_bytes,
        ),
    ];
    for (name, help, value) in memory {
        series::<0>(encoder, name, help, MetricType::Gauge, [([], value)])?;
    }
    Ok(())
}

/// The fleet's figures, for a registry started with `--fleet-etcd`: its publishing always, the
/// hosts once the view has been read from etcd.
fn fleet(encoder: &mut DescriptorEncoder, fleet: &FleetView, publishing: &PublishFigures) -> Fmt {
    if fleet.own_host().is_none() {
        return Ok(());
    }
    single(
        encoder,
        "fleet_lease_held",
        "Whether this registry holds its fleet lease in etcd (1) or not (0), as of its last step.",
        if publishing.lease_held() { 1.0 } else { 0.0 },
    )?;
    let last = publishing
        .last_published()
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0.0, |since| since.as_secs_f64());
    single(
        encoder,
        "fleet_last_publish_timestamp_seconds",
        "When this registry last published its picture to etcd (Unix time; 0 before the first).",
        last,
    )?;
    series(
        encoder,
        "fleet_entries_refused",
        "Fleet values this registry refused to hold, by why: too_large (over the caps every \
         value keeps) or invalid (not an entry of the layout); each key is logged once.",
        MetricType::Counter,
        Refusal::ALL.map(|refusal| ([("reason", refusal.word().to_owned())], refused(refusal))),
    )?;
    let Some(hosts) = fleet.hosts().ok().map(|now| now.hosts.len()) else {
        return Ok(());
    };
    series::<0>(
        encoder,
        "fleet_hosts",
        "Hosts in the fleet view (from etcd).",
        MetricType::Gauge,
        [([], u64::try_from(hosts).unwrap_or(u64::MAX))],
    )
}

impl Collector for Figures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Fmt {
        picture(
            &mut encoder,
            &self.state.registry().tally().latest_picture(),
        )?;
        registry_counts(&mut encoder, self.state.registry())?;
        load(&mut encoder, &self.state)?;
        host(&mut encoder)?;
        let publishing = self.state.metrics().fleet_publishing();
        fleet(&mut encoder, self.state.fleet(), publishing)
    }
}
