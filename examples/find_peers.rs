//! Find the live peers that offer a skill, through the registry of this user: what a capsule
//! written in Rust copies to reach the others.
//!
//! `cargo run --example find_peers -- --skill summarize` prints one line a peer: its session
//! id, its door's URL and its card's name. Exit 1 when no registry can be asked.

use murmur_registry::client::Client;
use murmur_registry::wire::ListQuery;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let skill = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [flag, skill] if flag == "--skill" => skill.clone(),
        _ => return Err("usage: find_peers --skill <SKILL>".into()),
    };
    // The registry found through its discovery file (`~/.murmur/registry/server.json`).
    let client = Client::discover().await?;
    // Live sessions whose verified card lists the skill, each with that card.
    let query = ListQuery {
        status: Some("live".to_owned()),
        skill: Some(skill),
        include: Some("card".to_owned()),
        ..ListQuery::default()
    };
    for peer in client.sessions(&query).await?.sessions {
        let door = peer
            .url
            .map_or_else(|| "-".to_owned(), |url| format!("http://{url}"));
        let card = peer.card.flatten();
        let name = card.as_ref().and_then(|card| card.json()["name"].as_str());
        println!("{} {door} {}", peer.session_id, name.unwrap_or("-"));
    }
    Ok(())
}
