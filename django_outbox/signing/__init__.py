"""How a delivery is signed: HTTP Signatures for ActivityPub, Standard Webhooks for webhooks."""
