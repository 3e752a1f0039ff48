"""Helpers the tests share: worker processes, chaos tooling, verifiers, rows, a fake broker."""
