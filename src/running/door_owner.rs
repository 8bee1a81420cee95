//! Who holds the far end of a door connection: nothing may be written on it until the kernel
//! says a process of the records' owner accepted it.
//!
//! Invariants kept here:
//! - The far end of this very connection (its exact 4-tuple, [`far_end`]) is looked up, never
//!   a listener found by port: a socket accepted by a process of the records' owner passes;
//!   one held by anyone else, by nobody, or that cannot be looked up does not, and the refusal
//!   says who held it.
//! - A connection not yet accepted is looked at again, never taken for anyone's: the 0 some
//!   kernels report for it is not root.

use std::time::Duration;

use tokio::net::TcpStream;

use crate::socket_owner::{FarEnd, far_end};

/// How long the first wait for a door to accept lasts; each next one doubles, up to
/// [`LONGEST_ACCEPT_PAUSE`].
const FIRST_ACCEPT_PAUSE: Duration = Duration::from_millis(1);
/// The longest wait between two looks at a far end not yet accepted.
const LONGEST_ACCEPT_PAUSE: Duration = Duration::from_millis(64);

/// `Ok` once the far end of `stream` is a socket accepted by a process of `owner`; else why
/// nothing may be written on it.
///
/// Looks again while the door has not accepted yet. That is a poll: the kernel tells a
/// connecting socket nothing when its peer accepts (`sock_diag` announces only sockets'
/// destruction), so there is nothing to wait on. The pauses double from 1 ms (a door's event
/// loop accepts within a turn or two) up to 64 ms, so a door slow to accept costs at most
/// about 16 lookups a second (some 5 µs each); the caller's deadline ends the wait.
pub(super) async fn held_by(stream: &TcpStream, owner: u32) -> Result<(), String> {
    let (ours, theirs) = stream
        .local_addr()
        .and_then(|ours| Ok((ours, stream.peer_addr()?)))
        .map_err(|e| format!("could not be checked for its owner ({e})"))?;
    let mut pause = FIRST_ACCEPT_PAUSE;
    loop {
        match holder(far_end(ours, theirs), owner) {
            Holder::Owner => return Ok(()),
            Holder::Refused(why) => return Err(why),
            Holder::NotYetAccepted => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_ACCEPT_PAUSE);
    }
}

/// What one look at the far end of a door connection decides.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    /// A socket accepted by a process of the records' owner: the request may be written.
    Owner,
    /// The door has not accepted the connection yet: look again.
    NotYetAccepted,
    /// Anything else: why nothing may be written.
    Refused(String),
}

/// What the kernel's word on the far end (`far_end`) decides for a door that must be `owner`'s.
///
/// A uid is compared only when the kernel reports it for an accepted socket (one a process
/// holds as a file), so the 0 some kernels fill in for a connection not yet accepted is never
/// taken for root; an accepted root-owned door matches only a registry that runs as root,
/// whose records root owns (and root can read every token anyway).
fn holder(far_end: std::io::Result<FarEnd>, owner: u32) -> Holder {
    match far_end {
        Ok(FarEnd::Accepted { uid }) if uid == owner => Holder::Owner,
        Ok(FarEnd::Accepted { uid }) => Holder::Refused(format!(
            "is held by uid {uid}, not by the records' owner (uid {owner})"
        )),
        Ok(FarEnd::NotYetAccepted) => Holder::NotYetAccepted,
        Ok(FarEnd::Absent) => {
            Holder::Refused("closed the connection before its holder could be checked".to_owned())
        }
        Err(e) => Holder::Refused(format!("could not be checked for its owner ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::{Holder, held_by, holder};
    use crate::socket_owner::FarEnd;

    #[test]
    fn only_an_accepted_socket_of_the_records_owner_may_carry_a_request() {
        assert_eq!(
            holder(Ok(FarEnd::Accepted { uid: 1000 }), 1000),
            Holder::Owner
        );
        assert_eq!(holder(Ok(FarEnd::Accepted { uid: 0 }), 0), Holder::Owner);
        let Holder::Refused(why) = holder(Ok(FarEnd::Accepted { uid: 65534 }), 1000) else {
            panic!("another user's door is refused");
        };
        assert_eq!(
            why,
            "is held by uid 65534, not by the records' owner (uid 1000)"
        );
        // Root's door is no door of an unprivileged owner's.
        let Holder::Refused(why) = holder(Ok(FarEnd::Accepted { uid: 0 }), 1000) else {
            panic!("root's door is refused to another owner");
        };
        assert!(why.contains("held by uid 0"), "{why}");
        // Not accepted yet: no owner to compare, whoever the records' owner is (root included).
        for owner in [0, 1000] {
            assert_eq!(
                holder(Ok(FarEnd::NotYetAccepted), owner),
                Holder::NotYetAccepted
            );
        }
        assert!(matches!(
            holder(Ok(FarEnd::Absent), 1000),
            Holder::Refused(why) if why.contains("closed the connection")
        ));
        let failed = std::io::Error::other("no sock_diag here");
        assert!(matches!(
            holder(Err(failed), 1000),
            Holder::Refused(why) if why.contains("could not be checked") && why.contains("no sock_diag here")
        ));
    }

    #[tokio::test]
    async fn a_door_that_accepts_late_is_waited_for() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a listener");
        let stream = TcpStream::connect(listener.local_addr().expect("its address"))
            .await
            .expect("a connection");
        let me = rustix::process::geteuid().as_raw();
        let mut checking = std::pin::pin!(held_by(&stream, me));
        // One look at the far end: not accepted yet, so the check waits.
        assert!((&mut checking).now_or_never().is_none());
        let (_accepted, _) = listener.accept().await.expect("accepted");
        assert_eq!(checking.await, Ok(()));
        let other = me.wrapping_add(1);
        let refused = held_by(&stream, other).await.expect_err("another owner's");
        assert_eq!(
            refused,
            format!("is held by uid {me}, not by the records' owner (uid {other})")
        );
    }
}
