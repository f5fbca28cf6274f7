"""The API key as an HTTP header, spelled in one place.

httpx clients take it as a mapping (`bearer_header`); the raw-socket stream
client writes request heads itself and takes it as header lines
(`bearer_header_line`), built from the same mapping.
"""

from __future__ import annotations


def bearer_header(api_key: str | None) -> dict[str, str]:
    """{"Authorization": "Bearer <key>"}, or {} without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def bearer_header_line(api_key: str | None) -> str:
    """`bearer_header` as raw HTTP/1.1 header lines, each ending CRLF ("" without a key)."""
    return "".join(f"{name}: {value}\r\n" for name, value in bearer_header(api_key).items())
