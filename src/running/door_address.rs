//! Where a record's door is: its `host:port`, accepted only on loopback, and the connection to
//! it made to a loopback address only (a hosts file cannot send a door token elsewhere).

use std::net::{IpAddr, SocketAddr};

use tokio::net::TcpStream;

use super::door_redaction::quote_briefly;

/// The door's address, split for connecting and for the `Host` header.
pub(crate) struct DoorAddress<'a> {
    /// The host as it is resolved (`localhost`, `127.0.0.1`, `::1`).
    host: &'a str,
    port: u16,
    /// `host:port` as the record wrote it (brackets around an IPv6 literal), for `Host`.
    pub(crate) authority: &'a str,
}

/// Connect to the door, on loopback addresses only: `localhost` is resolved by the system,
/// and a door token must not follow a hosts file that points it elsewhere. With the stream, the
/// address it is connected to.
pub(super) async fn connect_loopback(
    address: &DoorAddress<'_>,
) -> std::io::Result<(TcpStream, SocketAddr)> {
    let mut last_error = None;
    for addr in tokio::net::lookup_host((address.host, address.port)).await? {
        if !addr.ip().is_loopback() {
            continue;
        }
        match TcpStream::connect(addr).await {
            Ok(stream) => return Ok((stream, addr)),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            "the name resolves to no loopback address",
        )
    }))
}

/// A record's `host:port`, if it is a door on loopback.
pub(crate) fn door_address(url: &str) -> Result<DoorAddress<'_>, String> {
    let refuse = || {
        format!(
            "door address {} is not host:port on loopback; not probed",
            quote_briefly(url)
        )
    };
    let (host, port) = url.rsplit_once(':').ok_or_else(refuse)?;
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(refuse)?;
    let bare_host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let loopback = bare_host.eq_ignore_ascii_case("localhost")
        || bare_host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback || (bare_host.contains(':') && !host.starts_with('[')) {
        return Err(refuse());
    }
    Ok(DoorAddress {
        host: bare_host,
        port,
        authority: url,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_host_port_is_a_door() {
        for ok in [
            "127.0.0.1:4000",
            "localhost:1",
            "LOCALHOST:9",
            "[::1]:80",
            "127.3.4.5:65535",
        ] {
            assert!(door_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "10.0.0.1:80",
            "example.com:80",
            "127.0.0.1",
            "127.0.0.1:0",
            "127.0.0.1:99999",
            "::1:80",
            "127.0.0.1:80/x",
            "http://127.0.0.1:80",
            "user@127.0.0.1:80",
            "",
        ] {
            assert!(door_address(bad).is_err(), "{bad}");
        }
    }
}
