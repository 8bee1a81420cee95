//! The fleet's operations on the client: `GET /fleet/sessions`, `GET /fleet/hosts`, and
//! `GET /fleet/events` followed as `/events` is.
//!
//! Invariant: every answer is read as its [`crate::wire`] fleet type, whose schema a test holds
//! to the one the server documents; a registry without a fleet answers the 404
//! `fleet-not-configured` problem, one whose etcd is out of reach the 503 `fleet-unavailable`.

use futures_util::Stream;
use reqwest::{Method, Url};

use super::events::StreamEvent;
use super::{Client, Error, set_query};
use crate::wire::{
    EventName, FleetHosts, FleetQuery, FleetSessionAdded, FleetSessionChanged, FleetSessionRemoved,
    FleetSessions, HostJoined, HostLeft,
};

/// One event of `GET /fleet/events`.
#[derive(Debug)]
pub enum FleetEvent {
    /// The whole fleet (the first event of every connection): replace everything.
    Snapshot(FleetSessions),
    /// A session appeared on a host.
    SessionAdded(FleetSessionAdded),
    /// A session's state or record changed.
    SessionChanged(FleetSessionChanged),
    /// A session left (its host removed it, or left the fleet).
    SessionRemoved(FleetSessionRemoved),
    /// A registry joined the fleet.
    HostJoined(HostJoined),
    /// A host's entry was rewritten (its load is read again every 30 s): replace the host.
    HostChanged(HostJoined),
    /// A registry left, or stopped renewing its lease; its sessions' removals came first.
    HostLeft(HostLeft),
}

impl StreamEvent for FleetEvent {
    fn decode(name: &str, data: &str) -> Result<Option<Self>, serde_json::Error> {
        use serde_json::from_str as json;
        Ok(Some(match EventName::parse(name) {
            Some(EventName::Snapshot) => Self::Snapshot(json(data)?),
            Some(EventName::SessionAdded) => Self::SessionAdded(json(data)?),
            Some(EventName::SessionChanged) => Self::SessionChanged(json(data)?),
            Some(EventName::SessionRemoved) => Self::SessionRemoved(json(data)?),
            Some(EventName::HostJoined) => Self::HostJoined(json(data)?),
            Some(EventName::HostChanged) => Self::HostChanged(json(data)?),
            Some(EventName::HostLeft) => Self::HostLeft(json(data)?),
            Some(EventName::Resources) | None => return Ok(None),
        }))
    }
}

impl Client {
    /// `GET /fleet/sessions`: every host's sessions as their registries published them, those
    /// `query` keeps (`status`, `host`, `capsule`, `skill`; a page with `limit` and `cursor`,
    /// `next_cursor` answering the next). No door is asked.
    pub async fn fleet_sessions(&self, query: &FleetQuery) -> Result<FleetSessions, Error> {
        let mut url = self.at(&["fleet", "sessions"]);
        fleet_pairs(&mut url, query);
        self.call(self.request(Method::GET, url)).await
    }

    /// `GET /fleet/hosts`: every registry in the fleet.
    pub async fn fleet_hosts(&self) -> Result<FleetHosts, Error> {
        let url = self.at(&["fleet", "hosts"]);
        self.call(self.request(Method::GET, url)).await
    }

    /// `GET /fleet/events`, followed as [`Client::events`] follows `/events`: each connection
    /// begins with [`FleetEvent::Snapshot`]; a dropped one is made again (the registry found
    /// again through its discovery file when it was discovered).
    pub fn fleet_events(&self) -> impl Stream<Item = Result<FleetEvent, Error>> + use<> {
        self.follow(&["fleet", "events"], Vec::new())
    }
}

/// `query`'s parameters on `url`, each as `GET /fleet/sessions` reads it.
fn fleet_pairs(url: &mut Url, query: &FleetQuery) {
    set_query(
        url,
        [
            ("status", query.status.clone()),
            ("host", query.host.clone()),
            ("capsule", query.capsule.clone()),
            ("skill", query.skill.clone()),
            ("cursor", query.cursor.clone()),
            ("limit", query.limit.map(|limit| limit.to_string())),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_go_on_the_url_encoded() {
        let client = Client::new("http://127.0.0.1:7420", "t").unwrap();
        let mut url = client.at(&["fleet", "sessions"]);
        fleet_pairs(&mut url, &FleetQuery::default());
        assert_eq!(url.as_str(), "http://127.0.0.1:7420/fleet/sessions");
        let query = FleetQuery {
            host: Some("web01,web02".into()),
            skill: Some("a b".into()),
            limit: Some(2),
            cursor: Some("c=1".into()),
            ..FleetQuery::default()
        };
        fleet_pairs(&mut url, &query);
        assert_eq!(
            url.query(),
            Some("host=web01%2Cweb02&skill=a+b&cursor=c%3D1&limit=2")
        );
    }

    #[test]
    fn each_fleet_event_name_reads_its_data() {
        let host = r#"{"host_id":"a","host":{"host_id":"a","version":"1","started_at":"t",
            "registry_url":null}}"#;
        let joined = FleetEvent::decode("host.joined", host).unwrap();
        assert!(matches!(joined, Some(FleetEvent::HostJoined(h)) if h.host.load.is_none()));
        let changed = FleetEvent::decode("host.changed", host).unwrap();
        assert!(matches!(changed, Some(FleetEvent::HostChanged(_))));
        let left = FleetEvent::decode("host.left", r#"{"host_id":"a"}"#).unwrap();
        assert!(matches!(left, Some(FleetEvent::HostLeft(h)) if h.host_id == "a"));
        assert!(FleetEvent::decode("resources", "{}").unwrap().is_none());
        assert!(FleetEvent::decode("host.left", "{}").is_err());
    }
}
