"""HTTP transport for deliveries: URL parsing, the SSRF guard, pooled connections.

No Django import.
"""
