"""BOLT11 invoices made by LND, and what LND reads in them.

From LND's own tests (lightningnetwork/lnd at commit 90ea05d, 2026-08-20):

* ``zpay32/invoice_test.go``, ``TestDecodeEncode``: invoices that LND decodes and then
  encodes back to the very same text, so that each is exactly what LND's encoder writes
  for the fields it read; the fields are LND's expected reading of them (``MilliSat``,
  ``Timestamp``, ``PaymentHash``, ``Destination``, the default expiry of 3,600 s).  Only
  those with a payment address (``s`` field) are here: LND pays no invoice without one.
* ``lnrpc/routerrpc/router_backend_test.go``: a regtest invoice from a running LND node
  (``lnbcrt500u...``: a random payment hash, a one-day expiry) and one LND refuses to
  pay, "payment request must contain either a payment address or blinded paths".

LND turns an amount into millisatoshis with integer arithmetic (``zpay32/amountunits.go``:
``m`` x 10^8, ``u`` x 10^5, ``n`` x 100, ``p`` / 10 and only for multiples of 10), which
is what ``msat`` below says for each.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The payee of LND's test vectors (the BOLT 11 examples' key).
LND_TEST_PAYEE = "03e7156ae33b0a208d0744199163177e909e80176e55d97a2f221ede0f934dd9ad"
#: Their payment hash, 0001020304050607080900010203040506070809000102030405060708090102.
LND_TEST_HASH = "0001020304050607080900010203040506070809000102030405060708090102"
#: Their timestamp (2017-06-01).
LND_TEST_TIMESTAMP = 1496314658


@dataclass(frozen=True)
class LndInvoice:
    """An invoice LND wrote, and the amount (msat) LND reads in it, written as ``amount``."""

    what: str
    invoice: str
    msat: int
    amount: str


#: Written by LND's encoder (decoded and encoded back to the same text in its tests).
ENCODED_BY_LND = [
    LndInvoice(
        "coffee beans, features 9, 15 and 99",
        (
            "lnbc25m1pvjluezpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypqdq"
            "5vdhkven9v5sxyetpdeessp5zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3"
            "zygs9q5sqqqqqqqqqqqqqqqpqsq67gye39hfg3zd8rgc80k32tvy9xk2xunwm5lzexnvpx6f"
            "d77en8qaq424dxgt56cag2dpt359k3ssyhetktkpqh24jqnjyw6uqd08sgptq44qu"
        ),
        2_500_000_000,
        "25m",
    ),
    LndInvoice(
        "coffee beans, features 9, 15, 99 and 100",
        (
            "lnbc25m1pvjluezpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypqdq"
            "5vdhkven9v5sxyetpdeessp5zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3"
            "zygs9q4psqqqqqqqqqqqqqqqpqsqq40wa3khl49yue3zsgm26jrepqr2eghqlx86rttutve3"
            "ugd05em86nsefzh4pfurpd9ek9w2vp95zxqnfe2u7ckudyahsa52q66tgzcp6t2dyk"
        ),
        2_500_000_000,
        "25m",
    ),
    LndInvoice(
        "a cup of coffee, with a payment address and the payee's key",
        (
            "lnbc2500u1pvjluezpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypq"
            "dq5xysxxatsyp3k7enxv4jsnp4q0n326hr8v9zprg8gsvezcch06gfaqqhde2aj730yg0dur"
            "unfhv66sp5qszsvpcgpyqsyps8pqysqqgzqvyqjqqpqgpsgpgqqypqxpq9qcrsusq8nx2hdt"
            "3st3ankwz23xy9w7udvqq3f0mdlpc6ga5ew3y67u4qkx8vu72ejg5x6tqhyclm28r7r0mg6l"
            "x9x3vls9g6glp2qy3y34cpry54xp"
        ),
        250_000_000,
        "2500u",
    ),
    LndInvoice(
        "payment metadata 0x01fafaf0",
        (
            "lnbc10m1pvjluezpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqypqdp"
            "9wpshjmt9de6zqmt9w3skgct5vysxjmnnd9jx2mq8q8a04uqsp5zyg3zyg3zyg3zyg3zyg3z"
            "yg3zyg3zyg3zyg3zyg3zyg3zyg3zygs9q2gqqqqqqsgq7hf8he7ecf7n4ffphs6awl9t6676"
            "rrclv9ckg3d3ncn7fct63p6s365duk5wrk202cfy3aj5xnnp5gs3vrdvruverwwq7yzhkf5a"
            "3xqpd05wjc"
        ),
        1_000_000_000,
        "10m",
    ),
]

#: From a running LND node on regtest: 500 u = 500 x 10^5 msat.
FROM_AN_LND_NODE = LndInvoice(
    "a regtest invoice of an LND node",
    (
        "lnbcrt500u1pnh0xflpp56w08q26t896vg2e9mtdkrem320tpwws9z9sfr7dw86dx97d90u4"
        "sdqqcqzzsxqyz5vqsp5z9945kvfy5g9afmakzyrur2t4hhn2tr87un8j0r0e6l5m5zm0fus9"
        "qxpqysgqk98c6j7qefdpdmzt4g6aykds4ydvf2x9lpngqcfux3hv8qlraan9v3s9296r5w5e"
        "h959yzadgh5ckgjydgyfxdpumxtuk3p3caugmlqpz5necs"
    ),
    500 * 100_000,
    "500u",
)
#: An LND-encoded regtest invoice without a payment address: LND will not pay it.
WITHOUT_PAYMENT_ADDRESS = (
    "lnbcrt100p1p70xwfzpp5qqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqqqsyqcyq5rqwzqfqyp"
    "qdpl2pkx2ctnv5sxxmmwwd5kgetjypeh2ursdae8g6twvus8g6rfwvs8qun0dfjkxaqnp4q0"
    "n326hr8v9zprg8gsvezcch06gfaqqhde2aj730yg0durunfhv669qypqqqz3uu8wnr7883qz"
    "xr566nuhled49fx6e6q0jn06w6gpgyznwzxwf8xdmye87kpx0y8lqtcgwywsau0jkm66evel"
    "kw7cggwlegp4anv3cq62wusm"
)
