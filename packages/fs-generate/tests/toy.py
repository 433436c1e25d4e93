"""A toy model whose logits the test chooses, and a byte-level toy tokenizer (id i = byte i)."""

from dataclasses import dataclass, field

import numpy as np

from fs_tokenizer import StreamDecoder


@dataclass
class ToyConfig:
    vocab_size: int = 256
    max_position_embeddings: int = 64
    eos_token_id: int | list[int] | None = None


class ToyModel:
    """``script(sequence) -> logits [V]``: the test decides what comes next from the tokens so far."""

    def __init__(self, script, **config):
        self.config = ToyConfig(**config)
        self.script = script
        self.calls: list[tuple[list[int], int, bool]] = []
        self.path = None

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def make_cache(self):
        return [ToyCache()]

    def __call__(self, tokens, offset, caches, logits_to_keep=None):
        tokens = np.asarray(tokens)
        self.calls.append((tokens[0].tolist(), offset, caches is not None))
        if caches is not None:
            assert caches[0].offset == offset, "fed at the wrong offset"
            caches[0].seq += tokens[0].tolist()
            caches[0].offset += tokens.shape[1]
            seq = caches[0].seq
        else:
            assert offset == 0
            seq = tokens[0].tolist()
        return np.asarray(self.script(seq), dtype=np.float32)[None, None, :]


@dataclass
class ToyCache:
    offset: int = 0
    seq: list[int] = field(default_factory=list)


def one_hot(i: int, V: int = 256, hi: float = 10.0) -> np.ndarray:
    z = np.zeros(V, np.float32)
    z[i] = hi
    return z


def spell(text: str, after: int):
    """A script that, once the prompt (``after`` tokens) is read, emits the UTF-8 bytes of ``text`` one per step."""
    data = text.encode()

    def script(seq):
        n = len(seq) - after
        return one_hot(data[n] if n < len(data) else 0)

    return script


class ByteTokenizer:
    eos_token_ids = ()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode())

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def stream_decoder(self) -> StreamDecoder:
        return StreamDecoder(lambda i: bytes([i]))
