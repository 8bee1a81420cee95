//! `serve --fleet-etcd`: this registry joins the fleet: it publishes its verified picture under
//! its lease and serves every host's from a watch.
//!
//! Invariants:
//! - The local API never waits on a lost etcd: a registry that cannot reach etcd at start
//!   serves anyway once its first try has failed (at most a third of the TTL), its `/fleet/*`
//!   answering 503 saying why, and keeps trying to join in the background. Before it serves it
//!   waits only for that first try, or for a held host id to lapse (a restart after `kill -9`).
//! - A host id that another live lease holds (after waiting one TTL for it to lapse) refuses
//!   the start: two registries must never publish as one host.
//! - SIGTERM revokes the lease before the server's graceful end, so the host leaves at once.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use serde_json::{Map, Value};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::fleet_args::FleetArgs;
use crate::fleet::etcd::EtcdSettings;
use crate::fleet::keys::FleetKeys;
use crate::fleet::publisher::PublishError;
use crate::fleet::publishing::{self, PublishOptions, Publishing, StartError, check_ttl};
use crate::fleet::view::FleetView;
use crate::fleet::watcher::{self, FleetWatcher};
use crate::http::AppState;
use crate::registry::Reading;
use crate::running::Skill;
use crate::wire::SessionView;

/// The fleet's part of `serve`, checked before anything starts.
#[derive(Debug)]
pub(super) struct FleetConfig {
    settings: EtcdSettings,
    options: PublishOptions,
}

impl FleetConfig {
    /// The fleet the flags ask for, `None` without `--fleet-etcd`; contradictions, and TLS or
    /// credentials files that cannot be used, refused.
    pub(super) fn from_args(args: &FleetArgs, interval: Duration) -> anyhow::Result<Option<Self>> {
        if !args.enabled() {
            return Ok(None);
        }
        let etcd = &args.etcd;
        let endpoints = etcd.endpoints()?;
        if let Err(why) = check_ttl(args.fleet_ttl, interval) {
            bail!(why);
        }
        if let Some(url) = &args.advertise_url
            && let Err(why) = crate::fleet::check_advertise_url(url)
        {
            bail!(why);
        }
        let settings = etcd.settings(endpoints);
        if let Err(why) = crate::fleet::etcd::check_files(&settings) {
            bail!(why);
        }
        Ok(Some(Self {
            settings,
            options: PublishOptions {
                keys: FleetKeys::new(etcd.prefix()?),
                host_id: args.host_id()?,
                ttl: args.fleet_ttl,
                version: env!("CARGO_PKG_VERSION").to_owned(),
                advertise_url: args.advertise_url.clone(),
            },
        }))
    }
}

impl FleetConfig {
    /// The fleet as the discovery file names it: this host and the key prefix.
    pub(super) fn discovered(&self) -> crate::discovery::FleetInfo {
        crate::discovery::FleetInfo {
            host_id: self.options.host_id.to_string(),
            prefix: self.options.keys.all().trim_end_matches('/').to_owned(),
        }
    }
}

/// This registry's membership: the watch feeding `/fleet/*` and the publishing of its picture.
pub(super) struct FleetMember {
    _watcher: FleetWatcher,
    publishing: Arc<Mutex<Option<Publishing>>>,
    joining: Option<JoinHandle<()>>,
}

impl FleetMember {
    /// Join the fleet: `state` serves it from now on. Fails only when the host id is taken.
    pub(super) async fn join(
        config: FleetConfig,
        state: AppState,
    ) -> anyhow::Result<(Self, AppState)> {
        let FleetConfig { settings, options } = config;
        let view = FleetView::new(options.host_id.clone());
        let state = state.with_fleet(view.clone());
        let watcher = watcher::start(
            settings.clone(),
            options.keys.clone(),
            options.ttl,
            view.clone(),
        );
        let joiner = Joiner {
            settings,
            options,
            monitor: state.events().clone(),
            slot: Arc::new(Mutex::new(None)),
            figures: Arc::clone(state.metrics().fleet_publishing()),
            view,
        };
        let publishing = Arc::clone(&joiner.slot);
        let joining = match joiner.try_join().await {
            Ok(()) => None,
            Err(StartError::Publish(taken @ PublishError::HostIdTaken { .. })) => {
                return Err(taken.into());
            }
            Err(error) => {
                tracing::warn!(%error, "cannot join the fleet yet; serving this host meanwhile and trying again");
                Some(tokio::spawn(joiner.keep_trying()))
            }
        };
        let member = Self {
            _watcher: watcher,
            publishing,
            joining,
        };
        Ok((member, state))
    }

    /// Leave the fleet at once: the lease is revoked, so every key of this host goes with it.
    pub(super) async fn leave(mut self) {
        if let Some(joining) = self.joining.take() {
            joining.abort();
        }
        let Some(publishing) = self.publishing.lock().await.take() else {
            return;
        };
        match publishing.leave().await {
            Ok(()) => tracing::info!("left the fleet"),
            Err(error) => {
                tracing::warn!(%error, "could not revoke the fleet lease; it lapses within its TTL")
            }
        }
    }
}

/// What joining takes, and where the publishing goes once it has.
struct Joiner {
    settings: EtcdSettings,
    options: PublishOptions,
    monitor: crate::monitor::Monitor,
    slot: Arc<Mutex<Option<Publishing>>>,
    /// Where the publishing keeps how it stands, for `/metrics`.
    figures: Arc<crate::fleet::PublishFigures>,
    /// The fleet this registry serves, where the publishing shows this host.
    view: FleetView,
}

impl Joiner {
    /// Claim the host id and start publishing; on success the publishing is in the slot.
    async fn try_join(&self) -> Result<(), StartError> {
        let started = publishing::start_counting(
            &self.settings,
            self.options.clone(),
            self.monitor.clone(),
            render,
            Arc::clone(&self.figures),
            self.view.clone(),
        )
        .await?;
        tracing::info!(host_id = %self.options.host_id, "joined the fleet");
        *self.slot.lock().await = Some(started);
        Ok(())
    }

    /// Try to join every third of a TTL until it works; a taken host id is logged and retried
    /// (the other registry may leave), never published over.
    async fn keep_trying(self) {
        loop {
            tokio::time::sleep(self.options.ttl / 3).await;
            match self.try_join().await {
                Ok(()) => return,
                Err(error) => tracing::warn!(%error, "cannot join the fleet yet; trying again"),
            }
        }
    }
}

/// A reading as the fleet publishes it: the session object `GET /sessions` serves, and the
/// skills its verified card lists.
fn render(reading: &Reading) -> (Map<String, Value>, Vec<Skill>) {
    let session = match serde_json::to_value(SessionView::of(reading)) {
        Ok(Value::Object(session)) => session,
        // A struct of strings and numbers always encodes as an object.
        _ => Map::new(),
    };
    (session, reading.skills.to_vec())
}
