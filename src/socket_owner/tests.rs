use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};

use super::{FarEnd, Seen, TCP_ESTABLISHED, TCP_SYN_RECV, far_end, judged};

const LISTEN: u8 = 10;
const FIN_WAIT1: u8 = 4;

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
}

/// The far end of the connection from `ours` to `theirs`, as the kernel would describe it.
fn seen(ours: SocketAddr, theirs: SocketAddr, state: u8, uid: u32, inode: u32) -> Seen {
    Seen {
        state,
        uid,
        inode,
        local: (theirs.ip(), theirs.port()),
        remote: (ours.ip(), ours.port()),
    }
}

#[test]
fn only_an_established_socket_with_an_inode_has_an_owner() {
    let (ours, theirs) = (addr(50000), addr(4100));
    let judge =
        |state, uid, inode| judged(ours, theirs, Some(&seen(ours, theirs, state, uid, inode)));
    assert_eq!(
        judge(TCP_ESTABLISHED, 1000, 77),
        FarEnd::Accepted { uid: 1000 }
    );
    assert_eq!(judge(TCP_ESTABLISHED, 0, 77), FarEnd::Accepted { uid: 0 });
    // Waiting in the accept queue: no file yet, whatever uid the kernel fills in.
    for uid in [0, 1000, 65534] {
        assert_eq!(
            judge(TCP_ESTABLISHED, uid, 0),
            FarEnd::NotYetAccepted,
            "{uid}"
        );
        assert_eq!(judge(TCP_SYN_RECV, uid, 0), FarEnd::NotYetAccepted, "{uid}");
    }
    // A handshake's request socket never has an owner, even with an inode said.
    assert_eq!(judge(TCP_SYN_RECV, 1000, 77), FarEnd::NotYetAccepted);
    // A listener in the connection's place, or a socket closing: nobody holds the connection.
    assert_eq!(judge(LISTEN, 1000, 77), FarEnd::Absent);
    assert_eq!(judge(FIN_WAIT1, 1000, 77), FarEnd::Absent);
    assert_eq!(judged(ours, theirs, None), FarEnd::Absent);
}

#[test]
fn an_answer_about_another_connection_or_a_connection_to_itself_is_no_owner() {
    let (ours, theirs) = (addr(50000), addr(4100));
    let other_port = seen(addr(50001), theirs, TCP_ESTABLISHED, 1000, 77);
    let other_door = seen(ours, addr(4101), TCP_ESTABLISHED, 1000, 77);
    let listener_like = Seen {
        remote: (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        ..seen(ours, theirs, TCP_ESTABLISHED, 1000, 77)
    };
    for wrong in [other_port, other_door, listener_like] {
        assert_eq!(
            judged(ours, theirs, Some(&wrong)),
            FarEnd::Absent,
            "{wrong:?}"
        );
    }
    // Reversed: our own end of the connection, not the far one.
    let reversed = seen(theirs, ours, TCP_ESTABLISHED, 1000, 77);
    assert_eq!(judged(ours, theirs, Some(&reversed)), FarEnd::Absent);
    // Connected to itself (TCP simultaneous open): its far end is itself.
    let itself = seen(ours, ours, TCP_ESTABLISHED, 1000, 77);
    assert_eq!(judged(ours, ours, Some(&itself)), FarEnd::Absent);
}

/// A connection to a fresh listener on `ip`, and the listener; `None` when `ip` has no
/// loopback here (a host without IPv6).
fn connection_on(ip: IpAddr) -> Option<(TcpListener, TcpStream)> {
    let listener = TcpListener::bind((ip, 0)).ok()?;
    let stream = TcpStream::connect(listener.local_addr().ok()?).ok()?;
    Some((listener, stream))
}

fn far_end_of(stream: &TcpStream) -> FarEnd {
    let (ours, theirs) = (stream.local_addr().unwrap(), stream.peer_addr().unwrap());
    far_end(ours, theirs).expect("the kernel answers")
}

#[test]
fn the_kernel_tells_the_owner_once_the_connection_is_accepted_and_none_after_it_closes() {
    for ip in [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ] {
        let Some((listener, stream)) = connection_on(ip) else {
            assert!(ip.is_ipv6(), "IPv4 loopback is always there");
            continue;
        };
        // The listener is ours and listens on that very port, yet nobody holds the connection.
        assert_eq!(far_end_of(&stream), FarEnd::NotYetAccepted, "{ip}");
        let (accepted, _) = listener.accept().unwrap();
        assert_eq!(far_end_of(&stream), FarEnd::Accepted { uid: me() }, "{ip}");
        drop(accepted);
        assert_eq!(far_end_of(&stream), FarEnd::Absent, "{ip}");
    }
}

#[test]
fn each_connection_is_told_apart_from_the_others_to_the_same_port() {
    let (listener, first) = connection_on(IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("loopback");
    let (_accepted, _) = listener.accept().unwrap();
    let second = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    assert_eq!(far_end_of(&first), FarEnd::Accepted { uid: me() });
    assert_eq!(far_end_of(&second), FarEnd::NotYetAccepted);
}

#[test]
fn ends_of_two_families_are_refused_before_the_kernel_is_asked() {
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 4100);
    let refused = far_end(addr(50000), v6).expect_err("mixed families");
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn a_connection_the_kernel_does_not_hold_has_no_far_end() {
    // A port nobody connected from: the kernel answers with the listener, which is not taken.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let to_listener = far_end(addr(9), listener.local_addr().unwrap()).expect("an answer");
    assert_eq!(to_listener, FarEnd::Absent);
    // No socket at all on that port now: the kernel says there is none, which is no error.
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    assert_eq!(
        far_end(addr(9), addr(port)).expect("an answer"),
        FarEnd::Absent
    );
}

#[test]
fn a_door_on_a_dual_stack_socket_reached_over_ipv4_is_told_by_its_owner() {
    // `[::]` with IPv6-only off is what Go, Node and Java listen on by default: the kernel
    // describes its accepted socket in IPv6 words (`::ffff:127.0.0.1`) for an IPv4 connection.
    let Ok(listener) = TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0)) else {
        return; // no IPv6 on this host: no dual-stack door either
    };
    let port = listener.local_addr().unwrap().port();
    let Ok(stream) = TcpStream::connect(addr(port)) else {
        return; // IPv6-only sockets by the host's default (net.ipv6.bindv6only = 1)
    };
    assert_eq!(far_end_of(&stream), FarEnd::NotYetAccepted);
    let (_accepted, _) = listener.accept().unwrap();
    assert_eq!(far_end_of(&stream), FarEnd::Accepted { uid: me() });
}
