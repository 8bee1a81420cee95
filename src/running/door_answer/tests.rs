use bytes::{Bytes, BytesMut};

use super::{AnswerReader, ExchangeFailure, MAX_CHUNK_LINE_BYTES, MAX_HEAD_BYTES, Progress};

const CAP: usize = 1024;

/// Feed `pieces` one after another, the door closing after the last when `closes`; the first
/// end the reader reaches.
fn read_pieces(pieces: &[&[u8]], closes: bool) -> Result<Progress, ExchangeFailure> {
    let mut reader = AnswerReader::new(CAP);
    let mut received = BytesMut::new();
    for (i, piece) in pieces.iter().enumerate() {
        received.extend_from_slice(piece);
        let last = i + 1 == pieces.len();
        match reader.take(&mut received, last && closes)? {
            Progress::More => {}
            done => return Ok(done),
        }
    }
    Ok(Progress::More)
}

/// The answer read from `answer` cut in two at every byte (and whole, and one byte at a time):
/// every way must come to the same end.
fn read_every_way(answer: &[u8], closes: bool) -> Result<Progress, ExchangeFailure> {
    let whole = read_pieces(&[answer], closes);
    for cut in 0..=answer.len() {
        let (a, b) = answer.split_at(cut);
        assert_eq!(read_pieces(&[a, b], closes), whole, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = answer.chunks(1).collect();
    assert_eq!(read_pieces(&bytes, closes), whole, "a byte at a time");
    whole
}

fn answered(body: &str) -> Result<Progress, ExchangeFailure> {
    Ok(Progress::Answered(Bytes::copy_from_slice(body.as_bytes())))
}

fn broken_with(text: &str) -> impl Fn(&Result<Progress, ExchangeFailure>) -> bool + '_ {
    move |result| matches!(result, Err(ExchangeFailure::Broken(why)) if why.contains(text))
}

#[test]
fn a_body_of_known_length_ends_at_its_length_without_waiting_for_the_close() {
    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{\"id\":\"abc\"}\n";
    assert_eq!(
        read_every_way(answer, false),
        answered("{\"id\":\"abc\"}\n")
    );
    let extra = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}garbage after";
    assert_eq!(read_every_way(extra, false), answered("{}"));
}

#[test]
fn a_chunked_body_is_joined_with_extensions_and_trailers_ignored() {
    let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                   4;name=value\r\n{\"a\"\r\n6\r\n:\"b c\"\r\n1\r\n}\r\n0\r\nTrailer: x\r\n\r\n";
    assert_eq!(read_every_way(answer, false), answered("{\"a\":\"b c\"}"));
}

#[test]
fn a_body_without_framing_runs_to_the_close() {
    let answer = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"x\":1}";
    assert_eq!(read_pieces(&[answer], false), Ok(Progress::More));
    assert_eq!(read_every_way(answer, true), answered("{\"x\":1}"));
}

#[test]
fn interim_answers_are_skipped() {
    let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n\
                   HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    assert_eq!(read_every_way(answer, false), answered("{}"));
}

#[test]
fn a_status_other_than_2xx_ends_the_exchange_without_its_body() {
    let answer = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 100000\r\n\r\n";
    assert_eq!(
        read_every_way(answer, false),
        Err(ExchangeFailure::Status(401))
    );
    let switching = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n";
    assert_eq!(
        read_every_way(switching, false),
        Err(ExchangeFailure::Status(101))
    );
}

#[test]
fn no_content_is_an_empty_body() {
    let answer = b"HTTP/1.1 204 No Content\r\n\r\n";
    assert_eq!(read_every_way(answer, false), answered(""));
}

#[test]
fn transfer_encoding_decides_over_content_length() {
    let chunked = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n\
                    2\r\n{}\r\n0\r\n\r\n";
    assert_eq!(read_every_way(chunked, false), answered("{}"));
    let gzip_last = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nzz";
    assert_eq!(read_every_way(gzip_last, true), answered("zz"));
    let two_lines =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n\
                      1\r\nz\r\n0\r\n\r\n";
    assert_eq!(read_every_way(two_lines, false), answered("z"));
}

#[test]
fn content_lengths_must_be_one_number() {
    let repeated = b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\n{}";
    assert_eq!(read_every_way(repeated, false), answered("{}"));
    for bad in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0x2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999999\r\n\r\n{}",
    ] {
        let result = read_every_way(bad, true);
        assert!(
            broken_with("Content-Length")(&result),
            "{}: {result:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn a_body_past_the_cap_is_refused_however_it_is_framed() {
    let big = "x".repeat(CAP + 1);
    let declared = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", CAP + 1);
    assert!(broken_with("more than 1024 bytes")(&read_pieces(
        &[declared.as_bytes()],
        false
    )));
    let chunked = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n{}\r\n201\r\n{}\r\n0\r\n\r\n",
        &big[..0x200],
        &big[..0x201]
    );
    assert!(broken_with("more than 1024 bytes")(&read_every_way(
        chunked.as_bytes(),
        false
    )));
    let huge_chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n";
    assert!(broken_with("more than 1024 bytes")(&read_every_way(
        huge_chunk, false
    )));
    let to_close = format!("HTTP/1.1 200 OK\r\n\r\n{big}");
    assert!(broken_with("more than 1024 bytes")(&read_every_way(
        to_close.as_bytes(),
        true
    )));
    let exactly = format!("HTTP/1.1 200 OK\r\n\r\n{}", &big[..CAP]);
    assert_eq!(
        read_every_way(exactly.as_bytes(), true),
        answered(&big[..CAP])
    );
}

#[test]
fn a_head_past_its_bounds_is_refused() {
    let long = format!("HTTP/1.1 200 OK\r\nX: {}\r\n", "a".repeat(MAX_HEAD_BYTES));
    assert!(broken_with("head larger than")(&read_pieces(
        &[long.as_bytes()],
        false
    )));
    let whole_but_long = format!("{long}\r\n");
    assert!(broken_with("head larger than")(&read_pieces(
        &[whole_but_long.as_bytes()],
        false
    )));
    let many = format!("HTTP/1.1 200 OK\r\n{}\r\n", "X: y\r\n".repeat(101));
    assert!(broken_with("more than 100 headers")(&read_pieces(
        &[many.as_bytes()],
        false
    )));
    let line = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;{}",
        "e".repeat(MAX_CHUNK_LINE_BYTES)
    );
    assert!(broken_with("chunk-size line too long")(&read_pieces(
        &[line.as_bytes()],
        false
    )));
}

#[test]
fn an_answer_cut_short_says_where() {
    let nothing = read_pieces(&[b""], true);
    assert!(
        broken_with("without a valid HTTP answer")(&nothing),
        "{nothing:?}"
    );
    for no_answer in [
        &b"HTTP/1.1 200 OK\r\nContent-Le"[..],
        b"HTTP/1.1 100 Continue\r\n\r\n",
    ] {
        let result = read_every_way(no_answer, true);
        assert!(
            broken_with("without a valid HTTP answer")(&result),
            "{result:?}"
        );
    }
    for cut in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r",
        // The last chunk, but not the blank line that ends its trailers.
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nA: b\r\n",
    ] {
        let result = read_every_way(cut, true);
        assert!(
            broken_with("broke off its answer")(&result),
            "{}: {result:?}",
            String::from_utf8_lossy(cut)
        );
    }
}

#[test]
fn what_is_not_http_or_not_chunked_right_is_no_answer() {
    let result = read_every_way(b"SSH-2.0-OpenSSH_9.6\r\n\x00\x01\x02 garbage", true);
    assert!(
        broken_with("without a valid HTTP answer")(&result),
        "{result:?}"
    );
    for bad in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
    ] {
        let result = read_every_way(bad, true);
        assert!(broken_with("malformed chunk")(&result), "{result:?}");
    }
}

#[test]
fn an_answer_is_whole_only_after_the_blank_line_that_ends_its_trailers() {
    let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n";
    assert_eq!(read_pieces(&[answer], false), Ok(Progress::More));
    let trailers = [&answer[..], b"A: b\r\n", b"C: d\r\n"];
    assert_eq!(read_pieces(&trailers, false), Ok(Progress::More));
    let ended = [&answer[..], b"A: b\r\n", b"\r\n"];
    assert_eq!(read_pieces(&ended, false), answered("{}"));
    let long = format!("X: {}\r\n", "t".repeat(MAX_HEAD_BYTES));
    let too_long = [&answer[..], long.as_bytes()];
    assert!(broken_with("trailers larger than")(&read_pieces(
        &too_long, false
    )));
    let unended = [&answer[..], &long.as_bytes()[..MAX_HEAD_BYTES + 1]];
    assert!(broken_with("trailers larger than")(&read_pieces(
        &unended, false
    )));
}

#[test]
fn heads_at_their_bounds_are_read() {
    let prefix = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX: ";
    let filler = "a".repeat(MAX_HEAD_BYTES - prefix.len() - 4);
    let at_bound = format!("{prefix}{filler}\r\n\r\n{{}}");
    assert_eq!(at_bound.len(), MAX_HEAD_BYTES + 2);
    assert_eq!(read_pieces(&[at_bound.as_bytes()], false), answered("{}"));
    let past_bound = format!("{prefix}{filler}b\r\n\r\n{{}}");
    assert!(broken_with("head larger than")(&read_pieces(
        &[past_bound.as_bytes()],
        false
    )));
    let hundred = format!(
        "HTTP/1.1 200 OK\r\n{}Content-Length: 2\r\n\r\n{{}}",
        "X: y\r\n".repeat(99)
    );
    assert_eq!(read_every_way(hundred.as_bytes(), false), answered("{}"));
}

#[test]
fn faulty_framings_the_rfc_names_bring_no_body() {
    let old_chunked = b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    let result = read_every_way(old_chunked, true);
    assert!(
        broken_with("HTTP/1.0 with a Transfer-Encoding")(&result),
        "{result:?}"
    );
    let not_modified = b"HTTP/1.1 304 Not Modified\r\n\r\n";
    assert_eq!(
        read_every_way(not_modified, true),
        Err(ExchangeFailure::Status(304))
    );
}

#[test]
fn a_folded_header_line_is_read_as_one() {
    let folded = b"HTTP/1.1 200 OK\r\nX-Long: a\r\n  b\r\nContent-Length: 2\r\n\r\n{}";
    assert_eq!(read_every_way(folded, false), answered("{}"));
}
