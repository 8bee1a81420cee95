//! What a reading keeps of the card that verified it: the skills' ids and tags, for the fleet to
//! publish (never the card). Real doors on loopback, a real live process.

mod common;

use std::sync::Arc;

use common::{DoorMode, DoorServer, RecordJson, TestProcess};
use murmur_registry::registry::Registry;
use murmur_registry::running::{DoorProbe, Liveness, Skill};

fn skill(id: &str, tags: &[&str]) -> Skill {
    Skill {
        id: id.to_owned(),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
    }
}

#[tokio::test]
async fn a_live_reading_keeps_its_cards_skill_ids_and_tags_only() {
    let dir = common::temp_dir();
    let registry = Arc::new(Registry::new(dir.path(), DoorProbe::new()));
    let capsule = TestProcess::sleeping();

    let record = capsule.record();
    let door = DoorServer::start(DoorMode::A2aCard(record.session_id()));
    let record = record.url(door.url()).parse();
    let reading = registry.verify(vec![record], true).await.remove(0);
    assert_eq!(reading.liveness, Some(Liveness::Live));
    assert_eq!(
        *reading.skills,
        [skill("summarize", &["text", "nlp"]), skill("plan", &[])]
    );

    // A card with no skills, and a door that does not confirm the session: none kept.
    let plain = capsule.record();
    let spec = DoorServer::start(DoorMode::SpecCard(plain.session_id()));
    let reading = registry
        .verify(vec![plain.url(spec.url()).parse()], true)
        .await
        .remove(0);
    assert_eq!(reading.liveness, Some(Liveness::Live));
    assert!(reading.skills.is_empty());
    let other = DoorServer::start(DoorMode::A2aCard(RecordJson::fresh().session_id()));
    let reading = registry
        .verify(vec![capsule.record().url(other.url()).parse()], true)
        .await
        .remove(0);
    assert!(matches!(
        reading.liveness,
        Some(Liveness::Unreachable { .. })
    ));
    assert!(reading.skills.is_empty());
}
