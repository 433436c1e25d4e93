"""HTTP framing rules the server enforces before any route sees a request.

A request carrying both ``Content-Length`` and ``Transfer-Encoding`` is how request smuggling starts: a proxy in
front may frame the body by one header and this server (h11 lets ``Transfer-Encoding`` win) by the other, so the
tail of one request is read as a second, unauthenticated one. RFC 9112 section 6.3 allows rejecting such a
message and then requires closing the connection. ``Framing`` does both: 400 with ``Connection: close`` (uvicorn
closes after the response), so bytes sent after the body are never parsed as a request.
"""

from typing import Any

from .errors import APIError

Scope = dict[str, Any]


class Framing:
    """ASGI middleware: refuse ambiguous message framing and close the connection."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            names = [name.lower() for name, _ in scope.get("headers", [])]
            if b"transfer-encoding" in names and b"content-length" in names:
                refusal = APIError(
                    400,
                    "a request may carry Content-Length or Transfer-Encoding, not both (RFC 9112 section 6.3); "
                    "the connection is closed",
                    code="ambiguous_framing",
                    headers={"Connection": "close"},
                )
                await refusal.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)
