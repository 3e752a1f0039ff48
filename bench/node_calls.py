"""Node calls: the CPU one call of the package's LND client costs the calling thread.

``python -m bench.node_calls [--calls N] [--repeats R]`` starts the paid farm's fake LND
(``bench.paid_farm``, in a process of its own, answering at once) and times ``N``
``lookup`` calls of :class:`~django_outbox.payments.clients.lnd.LndRestClient` for a
payment hash the node never saw (the answer a lookup before a first payment gets),
``R`` times, against the same call made through a ``requests.Session`` as the client made
it until e138c41 (``stream=True``, the first line read with ``iter_content``).  A paid
delivery makes two node calls on its worker's payment threads, beside the free hosts'
deliveries, so what one costs the worker is what counts: the calling thread's CPU
(``time.thread_time``), not the node's.  Results go to ``bench/results/node_calls.json``.
"""

from __future__ import annotations

import argparse
import base64
import json
import time
from collections.abc import Callable

import requests

from bench.common import RESULTS_DIR, log, setup_django, start_services
from bench.figures import machine, save_json, summary
from bench.processes import PaidFarm
from django_outbox.payments.clients.lnd import LndRestClient

#: The payment hash looked up: one the node never saw.
UNKNOWN_HASH = "ab" * 32


def through_requests(url: str, macaroon_hex: str) -> Callable[[], None]:
    """One ``TrackPaymentV2`` call as the client made it through a ``requests.Session``."""
    session = requests.Session()
    session.trust_env = False
    encoded = base64.urlsafe_b64encode(bytes.fromhex(UNKNOWN_HASH)).decode("ascii")
    headers = {"Grpc-Metadata-macaroon": macaroon_hex}

    def call() -> None:
        with session.get(
            f"{url}/v2/router/track/{encoded}",
            headers=headers,
            timeout=(5.0, 10.0),
            allow_redirects=False,
            stream=True,
        ) as response:
            data = b""
            for chunk in response.iter_content(chunk_size=8192):
                data += chunk
                if b"\n" in data:
                    break
        json.loads(data.split(b"\n", 1)[0])

    return call


def cpu_per_call(call: Callable[[], None], calls: int) -> float:
    """Milliseconds of the calling thread's CPU per call, after a warm-up."""
    for _ in range(50):
        call()
    started = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - started) * 1000 / calls


def main() -> None:
    """Run the comparison; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    env = start_services()
    setup_django(env)
    with PaidFarm(env, 1, first="127.0.9.2") as farm:
        url, macaroon = farm.ready["lnd_url"], farm.ready["lnd_macaroon_hex"]
        client = LndRestClient(url, macaroon_hex=macaroon, timeout=10)

        def package_call() -> None:
            client.lookup(UNKNOWN_HASH)

        variants = {"package": package_call, "requests": through_requests(url, macaroon)}
        measured: dict[str, list[float]] = {name: [] for name in variants}
        for repeat in range(options.repeats):
            for name, call in variants.items():  # interleaved: a busy spell hits both
                measured[name].append(cpu_per_call(call, options.calls))
            log(
                f"node calls run {repeat + 1}: "
                + ", ".join(f"{n} {v[-1]:.3f} ms" for n, v in measured.items())
            )
    results = {
        "machine": machine(),
        "calls": options.calls,
        "cpu_ms_per_call": {name: summary(values) for name, values in measured.items()},
    }
    save_json(RESULTS_DIR / "node_calls.json", results)
    log(f"wrote {RESULTS_DIR / 'node_calls.json'}")


if __name__ == "__main__":
    main()
