"""A fake Lightning network for tests and the demo: real bytes, no real nodes.

* :mod:`.issuer`: the payee's side: signed regtest BOLT11 invoices (``lnbcrt...``)
  whose preimages an :class:`~.issuer.InvoiceRegistry` keeps, and L402 macaroons.
* :mod:`.node`: the payer's node, which "pays" by settling invoices in that registry.
* :mod:`.lnd` and :mod:`.cln`: that node behind LND's REST API and Core Lightning's
  JSON-RPC socket, speaking the shapes the real ones document.
* :mod:`.l402_inbox`: an inbox that answers 402 with a fresh L402 challenge until paid.

Tests pass one registry to both sides, so a payment flows through real encodings:
issuer -> 402 challenge -> decode and check -> client.pay -> preimage -> Authorization
checked by the issuer.
"""
