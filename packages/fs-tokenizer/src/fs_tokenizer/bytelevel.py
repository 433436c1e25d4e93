"""GPT-2's byte <-> unicode table: every byte gets a printable character, so BPE can work on str.

Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 onwards, in byte order.
"""


def bytes_to_unicode() -> dict[int, str]:
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def to_bytelevel(piece: str) -> str:
    """UTF-8 bytes of ``piece`` as byte-level characters."""
    return piece.encode("utf-8").decode("latin-1").translate(BYTE_TO_CHAR)  # latin-1: one char per byte


def token_bytes(token: str) -> bytes:
    """Inverse mapping, as HF's ByteLevel decoder does it: a token whose characters are not all byte-level
    characters (an added token such as ``<|im_end|>`` is, a non-ASCII added token is not) is its own UTF-8."""
    try:
        return bytes(CHAR_TO_BYTE[c] for c in token)
    except KeyError:
        return token.encode("utf-8")
