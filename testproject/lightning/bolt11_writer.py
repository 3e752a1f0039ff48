"""Write signed BOLT11 invoices for the fake network, fast.

The ``bolt11`` package builds a ``bitstring`` object per 5-bit group: about 3.5 ms of
CPU per invoice, which an L402 gate answering hundreds of ``402`` s a second cannot
afford.  Here the groups are integers and ``coincurve`` signs.  What is written is
checked against ``bolt11``'s decoder in ``tests/unit/payments/test_bolt11_reader.py``.
"""

from __future__ import annotations

from coincurve import PrivateKey

from django_outbox.payments.bolt11_reader import CHARSET, expand, polymod, to_bytes


def _words(data: bytes) -> list[int]:
    """``data`` as 5-bit words, the last padded with zero bits."""
    bits = 8 * len(data)
    value = int.from_bytes(data, "big") << (-bits % 5)
    return [(value >> 5 * i) & 31 for i in reversed(range((bits + 4) // 5))]


def _number(value: int, size: int = 0) -> list[int]:
    """``value`` as 5-bit words: ``size`` of them, or as few as it takes."""
    size = size or max(1, (value.bit_length() + 4) // 5)
    return [(value >> 5 * i) & 31 for i in reversed(range(size))]


def _amount(amount_msat: int) -> str:
    """The shortest BOLT11 amount for ``amount_msat``, as ``bolt11`` writes it."""
    value = amount_msat * 10  # in pico-bitcoin
    for unit in ("p", "n", "u", "m"):
        if value % 1000:
            return f"{value}{unit}"
        value //= 1000
    return str(value)


def _field(tag: str, words: list[int]) -> list[int]:
    return [CHARSET.index(tag), len(words) >> 5, len(words) & 31, *words]


def write_invoice(
    key: bytes,
    *,
    network: str,
    amount_msat: int | None,
    timestamp: int,
    payment_hash: str,
    payment_secret: str,
    description: str,
    expiry: int,
    min_final_cltv: int = 40,
    amount_text: str | None = None,
) -> str:
    """A BOLT11 invoice signed with ``key`` (32 bytes); hashes in hex.

    ``amount_text`` writes the amount as given (``"15p"``) instead of as the shortest
    form of ``amount_msat``: for tests of amounts a node would not pay as written.
    """
    amount = _amount(amount_msat) if amount_msat else ""
    hrp = f"ln{network}{amount if amount_text is None else amount_text}"
    data = [
        *_number(timestamp, 7),
        *_field("p", _words(bytes.fromhex(payment_hash))),
        *_field("s", _words(bytes.fromhex(payment_secret))),
        *_field("d", _words(description.encode())),
        *_field("x", _number(expiry)),
        *_field("c", _number(min_final_cltv)),
    ]
    signed = hrp.encode("ascii") + to_bytes(data, pad=True)
    signature = PrivateKey(key).sign_recoverable(signed)
    data += _words(signature)
    checksum = polymod(expand(hrp) + data + [0] * 6) ^ 1
    data += [(checksum >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(CHARSET[word] for word in data)
