"""How the transport reads answers: framing, limits and malformed ones, byte by byte too.

Each answer comes from a loopback server that sends exactly the bytes written here, whole
or trickled one byte at a time, so that every state of the parser is met at every split.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from django_outbox.transport import ProtocolFailed, Response, TimedOut
from django_outbox.transport.connection import MAX_HEAD
from tests.support.loop_transport import LoopTransport
from tests.support.raw_server import RawServer

JSON = {"Content-Type": "application/activity+json"}
OK = b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok"


def pieces_of(answer: bytes, split: str) -> list[bytes]:
    """``answer`` whole, one byte at a time ("trickled") or in pieces of 4 KiB ("4k")."""
    size = {"whole": len(answer) or 1, "trickled": 1, "4k": 4096}[split]
    return [answer[i : i + size] for i in range(0, len(answer), size)]


@pytest.fixture(params=["whole", "trickled"])
def split(request: pytest.FixtureRequest) -> str:
    """Whether answers arrive in one piece or one byte at a time."""
    return str(request.param)


def exchange(
    answers: Sequence[bytes], split: str = "whole", **options: object
) -> tuple[list[Response | Exception], RawServer]:
    """POST once per answer (one server, one transport) and return what each post gave."""
    pieces = [pieces_of(answer, split) for answer in answers]
    options.setdefault("total_timeout", 10.0)
    transport = LoopTransport(**options)
    results: list[Response | Exception] = []
    with RawServer(pieces, pause=0.0005 if split == "trickled" else 0.0) as server:
        for _ in answers:
            try:
                results.append(transport.post(server.url, JSON, b"{}"))
            except Exception as error:  # the test looks at which
                results.append(error)
        transport.close()
    return results, server


def answer_of(result: Response | Exception) -> tuple[int, bytes]:
    assert isinstance(result, Response), result
    return result.status, result.body


# -- answers read whole, connection kept ------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "status", "body"),
    [
        (b"HTTP/1.1 202 Accepted\r\nContent-Length: 5\r\n\r\nhello", 202, b"hello"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", 200, b""),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;name=value\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            200,
            b"abcde",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"A\r\n0123456789\r\n0\r\nX-Checksum: 1\r\nX-Other: 2\r\n\r\n",
            200,
            b"0123456789",
        ),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx",
            201,
            b"x",
        ),
        (b"HTTP/1.1 204 No Content\r\n\r\n", 204, b""),
        (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", 304, b""),
        (
            b"HTTP/1.1 410 Gone\r\nContent-Length: 4\r\nConnection: keep-alive\r\n\r\ngone",
            410,
            b"gone",
        ),
    ],
)
def test_framed_answers_are_read_whole_and_keep_the_connection(
    split: str, answer: bytes, status: int, body: bytes
) -> None:
    results, server = exchange([answer, OK], split)
    assert answer_of(results[0]) == (status, body)
    assert answer_of(results[1]) == (202, b"ok")
    assert server.connections == 1


def test_headers_are_case_insensitive_and_repeated_ones_joined(split: str) -> None:
    answer = (
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nLink: <a>\r\n"
        b"link: <b>\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n"
    )
    (result,), _ = exchange([answer], split)
    assert isinstance(result, Response)
    assert result.headers["retry-after"] == result.headers.get("RETRY-AFTER") == "7"
    assert result.headers["Link"] == "<a>, <b>"
    assert result.headers["x-empty"] == ""
    assert "Content-Length" in result.headers


def test_a_close_delimited_body_ends_with_the_connection(split: str) -> None:
    pieces = [pieces_of(b"HTTP/1.1 200 OK\r\n\r\nabc", split)]
    transport = LoopTransport(total_timeout=10.0)
    with RawServer([*pieces, [OK]], close_after=True) as server:
        assert answer_of(transport.post(server.url, JSON, b"{}")) == (200, b"abc")
        assert answer_of(transport.post(server.url, JSON, b"{}")) == (202, b"ok")
        transport.close()
    assert server.connections == 2


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",  # bytes nobody asked for
    ],
)
def test_a_connection_in_doubt_is_not_kept(answer: bytes) -> None:
    results, server = exchange([answer, OK])
    assert answer_of(results[0]) == (200, b"ok")
    assert answer_of(results[1]) == (202, b"ok")
    assert server.connections == 2


# -- the body cap -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n"
        + b"x" * 100
        + b"\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"1\r\nx\r\n" * 100
        + b"0\r\n\r\n",
    ],
)
def test_a_body_over_the_cap_is_cut_and_the_connection_dropped(split: str, answer: bytes) -> None:
    results, server = exchange([answer, OK], split, max_response_bytes=10)
    assert answer_of(results[0]) == (200, b"x" * 10)
    assert answer_of(results[1]) == (202, b"ok")
    assert server.connections == 2


# -- limits of the head ---------------------------------------------------------------------


def head_of(size: int) -> bytes:
    """A 200 answer whose head (status line and headers, without the blank line) is
    ``size`` bytes long."""
    start = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Pad: "
    return start + b"p" * (size - len(start)) + b"\r\n\r\n"


def test_a_head_within_the_limit_is_read() -> None:
    (result,), _ = exchange([head_of(MAX_HEAD - 1024)])
    assert answer_of(result) == (200, b"")


@pytest.mark.parametrize("split", ["whole", "4k"])
def test_a_head_over_the_limit_is_refused(split: str) -> None:
    (result,), _ = exchange([head_of(MAX_HEAD + 1024)], split)
    assert isinstance(result, ProtocolFailed)
    assert "headers are too long" in str(result)


def test_a_head_that_never_ends_is_refused_once_past_the_limit() -> None:
    endless = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"p" * (4 * MAX_HEAD)
    transport = LoopTransport(total_timeout=10.0)
    with RawServer([[endless]]) as server, pytest.raises(ProtocolFailed, match="too long"):
        transport.post(server.url, JSON, b"{}")


@pytest.mark.parametrize("split", ["whole", "4k"])
def test_trailers_and_framing_beyond_the_limit_are_refused(split: str) -> None:
    """Besides the body, the head and the trailers may take 2 * MAX_HEAD bytes, and each
    chunk 1 KiB of framing."""
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n"
    fits = chunked + b"X-Trailer: " + b"t" * MAX_HEAD + b"\r\n\r\n"
    too_long = chunked + b"X-Trailer: " + b"t" * (2 * MAX_HEAD + 4096) + b"\r\n\r\n"
    extensions = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + (b"1;" + b"e" * 2000 + b"\r\nx\r\n") * 1000
    )
    results, _ = exchange([fits, too_long, extensions], split)
    assert answer_of(results[0]) == (200, b"x")
    for result in results[1:]:
        assert isinstance(result, ProtocolFailed), result
        assert "trailers or chunk framing are too long" in str(result)


def test_many_headers_are_read_and_too_many_refused() -> None:
    many = b"".join(b"X-H%d: v\r\n" % n for n in range(150))
    too_many = b"".join(b"X-H%d: v\r\n" % n for n in range(250))
    results, _ = exchange(
        [
            b"HTTP/1.1 200 OK\r\n" + many + b"Content-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n" + too_many + b"Content-Length: 0\r\n\r\n",
        ]
    )
    assert answer_of(results[0]) == (200, b"")
    assert isinstance(results[1], ProtocolFailed)
    assert "too many headers" in str(results[1])


# -- malformed answers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "status_line",
    [
        b"HTTP/1.1 abc Bad",
        b"HTTP/1.1 20 OK",
        b"HTTP/1.1 2000 OK",
        b"HTTPS/1.1 200 OK",
        b"SMTP 220 mail.example ready",
        b"<html><body>hello</body></html>",
        b"HTTP/2.0 200 OK",
        b"HTTP/1.1 099 Too Low",
    ],
)
def test_a_malformed_status_line_is_refused_and_shown(split: str, status_line: bytes) -> None:
    (result,), _ = exchange([status_line + b"\r\nContent-Length: 0\r\n\r\n"], split)
    assert isinstance(result, ProtocolFailed), result
    assert "not an HTTP/1.x status line" in str(result)
    if split == "whole":  # trickled, it is refused at its first wrong byte
        assert status_line[:20].decode() in str(result)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTP/1.1 200 OK\r\nNo colon here\r\nContent-Length: 0\r\n\r\n", "header"),
        (b"HTTP/1.1 200 OK\r\nX-Space : b\r\nContent-Length: 0\r\n\r\n", "header"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n", "chunk"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n", "chunk"),
    ],
)
def test_a_malformed_answer_is_a_protocol_failure(split: str, answer: bytes, reason: str) -> None:
    (result,), _ = exchange([answer], split)
    assert isinstance(result, ProtocolFailed), result
    assert reason.lower() in str(result).lower()


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Le",
    ],
)
def test_a_server_closing_mid_answer_is_a_protocol_failure(split: str, answer: bytes) -> None:
    pieces = pieces_of(answer, split)
    transport = LoopTransport(total_timeout=10.0)
    with RawServer([pieces], close_after=True) as server:
        with pytest.raises(ProtocolFailed, match="closed the connection mid-answer"):
            transport.post(server.url, JSON, b"{}")
        transport.close()


def test_a_pause_longer_than_the_read_timeout_mid_body_times_out() -> None:
    transport = LoopTransport(total_timeout=10.0, read_timeout=0.3)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab"
    with RawServer([[head, b"cd"]], pause=1.0) as server, pytest.raises(TimedOut, match=r"0\.3 s"):
        transport.post(server.url, JSON, b"{}")


def test_switching_protocols_unasked_is_a_protocol_failure() -> None:
    answer = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
    (result,), _ = exchange([answer + b"\x00\x00\x12\x04"])
    assert isinstance(result, ProtocolFailed)
    assert "switched protocols" in str(result)
