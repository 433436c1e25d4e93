"""fs_tokenizer: byte-level BPE (Qwen2/Qwen3 tokenizer.json), streaming UTF-8-safe decode, chat templates."""

from . import interrupts as _interrupts  # noqa: F401 - first: quiet Ctrl-C during the imports below
from .added import AddedToken
from .errors import TokenizerError
from .stream import StreamDecoder
from .tokenizer import Tokenizer

__version__ = "0.1.0"
__all__ = ["AddedToken", "StreamDecoder", "Tokenizer", "TokenizerError"]
