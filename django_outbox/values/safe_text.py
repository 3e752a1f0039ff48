"""Text from remote servers made safe to store, log and hand to signal receivers.

A server chooses its status line, its TLS alert texts and what its resolver says,
and such text ends up in error messages.  ``HTTP/1.1 <script>...\\r\\nX: y`` stored
as it came would split a log line, forge a header in a receiver that copies it
into a request, or hide text behind bidirectional overrides.  No Django import:
the transport uses it too.
"""

from __future__ import annotations

#: The longest error the package stores in ``Delivery.last_error``.
ERROR_LIMIT = 2000


def one_line(text: str, limit: int = ERROR_LIMIT) -> str:
    """``text`` on one printable line of at most ``limit`` characters.

    Every character ``str.isprintable`` refuses (control characters, line and
    paragraph separators, format characters such as bidirectional overrides,
    surrogates, non-ASCII spaces) is written as its Python escape (``\\r``,
    ``\\u202e``), and a longer text is cut, ending in ``...``.
    """
    if not text.isprintable():
        text = "".join(c if c.isprintable() else _escape(c) for c in text)
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 3)] + "..."


def shown(value: object, limit: int = 100) -> str:
    """``value`` for an error message: its repr, cut to about ``limit`` characters.

    A long string is cut before its repr is taken; a value whose repr fails (that
    of an integer of 5,000 digits raises) is shown by its type.
    """
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + "..."
    try:
        text = repr(value)
    except Exception:
        return f"an object of type {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def _escape(char: str) -> str:
    return char.encode("unicode_escape", "backslashreplace").decode("ascii")
