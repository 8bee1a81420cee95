//! Who holds the far end of one of this process's TCP connections on this host, as the kernel
//! says: one netlink `sock_diag` lookup (`inet_diag`, `SOCK_DIAG_BY_FAMILY`) naming the
//! connection's exact 4-tuple. Unprivileged: the kernel answers any user about the sockets of
//! its own network namespace.
//!
//! Invariants kept here:
//! - The socket asked about is named by both ends of the connection (the far end's address and
//!   port as its local ones, ours as its remote ones), never by a port alone: a listener that
//!   took the port, or another connection to it, is never what is reported.
//! - An owner is told only for an accepted socket: one in the connection's state and held by a
//!   process as a file (a non-zero inode). A connection the kernel still holds for a listener
//!   (its handshake unfinished, or waiting in the accept queue) is [`FarEnd::NotYetAccepted`],
//!   whatever uid the kernel fills in for it (some kernels say 0 there, others the listener's).
//! - Anything else is [`FarEnd::Absent`], never an owner: no socket, a listener in the
//!   connection's place (the kernel's exact lookup falls back to one), a closing socket, a
//!   connection to itself, or an answer that names another connection.
//! - Only the kernel's answer is read (a message from netlink port 0), and the lookup never
//!   blocks: the kernel queues its answer before the request's `send` returns.
//!
//! Bottom floor: knows nothing of doors, records or HTTP.

use std::io;
use std::net::{IpAddr, SocketAddr};

use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::{
    ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags,
};
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::{Socket, SocketAddr as NetlinkAddr};

/// The kernel's `TCP_ESTABLISHED`: the only state in which a far end is a connection's.
const TCP_ESTABLISHED: u8 = 1;
/// The kernel's `TCP_SYN_RECV`, the state it reports for a handshake not yet finished.
const TCP_SYN_RECV: u8 = 3;
/// `INET_DIAG_NOCOOKIE`: the socket is named by its tuple alone.
const NO_COOKIE: [u8; 8] = [0xff; 8];
/// Room for the kernel's answer: one `inet_diag_msg` (72 bytes) with its netlink header and
/// the few attributes sent without being asked for (shutdown state, cgroup, socket options).
const ANSWER_ROOM: usize = 1024;

/// What holds the far end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FarEnd {
    /// An accepted socket, a file of some process: its owner's uid as the kernel reads it
    /// (in this process's user namespace; an unmapped owner reads as the overflow uid).
    Accepted {
        /// The socket's owner.
        uid: u32,
    },
    /// The kernel holds the connection for a listener that has not accepted it yet: no process
    /// holds it, so it has no owner to tell. May become [`FarEnd::Accepted`].
    NotYetAccepted,
    /// No socket holds the far end of this connection (see the module's invariants).
    Absent,
}

/// The far end of the TCP connection from `ours` (this end's local address) to `theirs`.
///
/// `Err` when the kernel could not be asked or answered something unreadable: no owner was
/// learnt, so the caller must treat it as none.
pub(crate) fn far_end(ours: SocketAddr, theirs: SocketAddr) -> io::Result<FarEnd> {
    if ours.is_ipv4() != theirs.is_ipv4() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the two ends of a connection are of one address family",
        ));
    }
    let seen = ask_kernel(ours, theirs)?.map(|header| Seen {
        state: header.state,
        uid: header.uid,
        inode: header.inode,
        local: (
            header.socket_id.source_address,
            header.socket_id.source_port,
        ),
        remote: (
            header.socket_id.destination_address,
            header.socket_id.destination_port,
        ),
    });
    Ok(judged(ours, theirs, seen.as_ref()))
}

/// What the kernel said of the socket it found for the far end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    state: u8,
    uid: u32,
    inode: u32,
    /// The socket's own address and port.
    local: (IpAddr, u16),
    /// The address and port it is connected to.
    remote: (IpAddr, u16),
}

/// What the kernel's answer `seen` (`None`: no socket) says of the far end of the connection
/// from `ours` to `theirs`.
fn judged(ours: SocketAddr, theirs: SocketAddr, seen: Option<&Seen>) -> FarEnd {
    let Some(seen) = seen else {
        return FarEnd::Absent;
    };
    let is_ours = names(seen.local, theirs) && names(seen.remote, ours) && ours != theirs;
    match seen.state {
        _ if !is_ours => FarEnd::Absent,
        TCP_SYN_RECV => FarEnd::NotYetAccepted,
        TCP_ESTABLISHED if seen.inode == 0 => FarEnd::NotYetAccepted,
        TCP_ESTABLISHED => FarEnd::Accepted { uid: seen.uid },
        _ => FarEnd::Absent,
    }
}

/// Whether the end the kernel described is `end`. A dual-stack IPv6 socket (`[::]` with
/// IPv6-only off, the default of Go, Node and Java) serves an IPv4 connection, and the kernel
/// describes it in IPv6 words (`::ffff:127.0.0.1`): the same address, compared canonical.
fn names((ip, port): (IpAddr, u16), end: SocketAddr) -> bool {
    ip.to_canonical() == end.ip().to_canonical() && port == end.port()
}

/// The kernel's `inet_diag_msg` header for the socket whose local end is `theirs` and whose
/// remote end is `ours`; `None` when it has no such socket.
fn ask_kernel(ours: SocketAddr, theirs: SocketAddr) -> io::Result<Option<InetResponseHeader>> {
    let socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.set_non_blocking(true)?;
    let kernel = NetlinkAddr::new(0, 0);
    socket.send_to(&request(ours, theirs), &kernel, 0)?;
    let mut room = [0u8; ANSWER_ROOM];
    let (length, from) = socket.recv_from(&mut &mut room[..], 0)?;
    if from.port_number() != 0 {
        return Err(unreadable(
            "a netlink message from another sender than the kernel",
        ));
    }
    let answer = NetlinkMessage::<SockDiagMessage>::deserialize(&room[..length.min(ANSWER_ROOM)])
        .map_err(|e| {
        unreadable(&format!("the kernel's sock_diag answer is unreadable: {e}"))
    })?;
    match answer.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
            Ok(Some(response.header))
        }
        NetlinkPayload::Error(error) => match error.to_io() {
            gone if gone.kind() == io::ErrorKind::NotFound => Ok(None),
            other => Err(other),
        },
        _ => Err(unreadable(
            "the kernel's sock_diag answer is not about a socket",
        )),
    }
}

/// The bytes of the lookup: TCP, the far end's address and port as the socket's own, ours as
/// its peer's, no cookie, no extensions.
fn request(ours: SocketAddr, theirs: SocketAddr) -> Vec<u8> {
    let mut socket_id = if theirs.is_ipv4() {
        SocketId::new_v4()
    } else {
        SocketId::new_v6()
    };
    socket_id.source_address = theirs.ip();
    socket_id.source_port = theirs.port();
    socket_id.destination_address = ours.ip();
    socket_id.destination_port = ours.port();
    socket_id.cookie = NO_COOKIE;
    let lookup = InetRequest {
        family: if theirs.is_ipv4() { AF_INET } else { AF_INET6 },
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::empty(),
        states: StateFlags::all(),
        socket_id,
    };
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut message = NetlinkMessage::new(header, SockDiagMessage::InetRequest(lookup).into());
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    bytes
}

fn unreadable(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

#[cfg(test)]
mod tests;
