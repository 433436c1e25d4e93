"""Incremental decode that never emits part of a UTF-8 character.

Bytes of a character split across tokens are held back until the character is complete; invalid bytes
become U+FFFD exactly as ``bytes.decode(errors="replace")`` would place them, so the concatenation of all
outputs equals ``decode(all ids)``.
"""

import codecs
from collections.abc import Callable


class StreamDecoder:
    def __init__(self, to_bytes: Callable[[int], bytes]):
        self._to_bytes = to_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Feed one token; return the text that became complete (possibly "")."""
        data = self._to_bytes(token_id)
        return self._utf8.decode(data)

    def flush(self) -> str:
        """End of stream: bytes still held back are incomplete, so they become U+FFFD."""
        return self._utf8.decode(b"", final=True)
