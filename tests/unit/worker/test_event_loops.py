"""OUTBOX_EVENT_LOOP: the engine's loops are asyncio's or uvloop's, and both deliver.

The transport runs on uvloop unchanged (framing, the body cap, malformed answers and the
read timeout here; a real worker on uvloop in tests/integration/test_delivery.py).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import uvloop
from django.test import override_settings

from django_outbox.checks import check_settings
from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.transport import ProtocolFailed, TimedOut, TLSFailed, Transport
from django_outbox.transport.loops import loop_factory
from django_outbox.worker.engine import Engine
from tests.support.raw_server import RawServer
from tests.support.tls_servers import tls_server

JSON = {"Content-Type": "application/activity+json"}


def test_the_names_and_what_they_make() -> None:
    assert loop_factory("asyncio") is asyncio.new_event_loop
    loop = loop_factory("uvloop")()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    with pytest.raises(OutboxConfigurationError, match="one of asyncio, uvloop"):
        loop_factory("trio")


@pytest.mark.parametrize(("value", "errors"), [("asyncio", []), ("uvloop", []), ("x", ["E018"])])
def test_a_system_check_names_a_loop_that_cannot_be_made(value: str, errors: list[str]) -> None:
    with override_settings(OUTBOX_EVENT_LOOP=value):
        found = [message.id.split(".")[-1] for message in check_settings()]
    assert [e for e in found if e == "E018"] == errors


def test_the_engine_runs_its_jobs_on_uvloop() -> None:
    ran: list[tuple[int, str]] = []
    done = threading.Event()

    async def work(job: int) -> None:
        await asyncio.sleep(0.01)
        ran.append((job, type(asyncio.get_running_loop()).__module__))
        if len(ran) == 20:
            done.set()

    engine: Engine[int] = Engine(
        work,
        host_of=lambda job: f"h{job % 3}",
        urgent=lambda job: job % 5 == 0,
        concurrency=4,
        per_host=2,
        new_loop=loop_factory("uvloop"),
    )
    engine.submit(list(range(20)))
    assert done.wait(10)
    engine.stop()
    assert sorted(job for job, _ in ran) == list(range(20))
    assert {module for _, module in ran} == {"uvloop"}


def post_on_uvloop(transport: Transport, url: str) -> object:
    async def post() -> object:
        try:
            return await transport.post(url, JSON, b"{}")
        except Exception as error:  # the test looks at which
            return error

    return uvloop.run(post())


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok", (202, b"ok")),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            (200, b"abcde"),
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n" + b"x" * 50, (200, b"x" * 10)),
        (b"HTTP/1.1 abc\r\n\r\n", ProtocolFailed),
    ],
)
def test_the_transport_reads_answers_on_uvloop(answer: bytes, outcome: object) -> None:
    transport = Transport(
        user_agent="test", allowed_networks=["127.0.0.0/8"], max_response_bytes=10
    )
    with RawServer([[answer[:7], answer[7:]]], pause=0.01) as server:
        result = post_on_uvloop(transport, server.url)
    if isinstance(outcome, tuple):
        assert (result.status, result.body) == outcome  # type: ignore[attr-defined]
    else:
        assert isinstance(result, outcome)  # type: ignore[arg-type]


def test_the_read_timeout_holds_on_uvloop() -> None:
    transport = Transport(user_agent="test", allowed_networks=["127.0.0.0/8"], read_timeout=0.3)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab"
    with RawServer([[head, b"cd"]], pause=1.0) as server:
        result = post_on_uvloop(transport, server.url)
    assert isinstance(result, TimedOut)  # before the last piece came


def test_tls_with_the_host_name_and_a_bad_certificate_on_uvloop(ca: Any, ca_file: str) -> None:
    transport = Transport(
        user_agent="test",
        allowed_networks=["127.0.0.0/8"],
        ca_bundle=ca_file,
        resolver=lambda host, port: ["127.0.0.1"],
    )
    seen: list[str] = []
    with tls_server(ca, "a.test", seen=seen) as server:
        ok = post_on_uvloop(transport, server.url(host="a.test"))
        wrong = post_on_uvloop(transport, server.url(host="b.test"))
    assert ok.status == 202  # type: ignore[attr-defined]
    assert seen == ["a.test", "b.test"]
    assert isinstance(wrong, TLSFailed)
