"""The keywords of ``generate``, ``stream_generate`` and ``generate_batch``: fs's own, mlx-lm's where fs has the same
thing under another name, and a clear refusal for the rest.

Why: code written for ``mlx_lm.generate(model, tokenizer, prompt, max_tokens=100)`` should run unchanged where fs
computes the same thing, and where it does not, the error should name fs's spelling - not "Generator.__init__()
got an unexpected keyword argument", which names a class the caller never used.

Contract: ``resolve(where, kw)`` returns the keywords ``Generator`` takes. mlx-lm's spellings of fs keywords
(``ALIASES``) are renamed; giving both spellings is an error. mlx-lm keywords fs has no equivalent for
(``REFUSED``) raise ``GenerateError`` saying what to use instead (``sampler=`` and ``logits_processors=`` are
taken, user_hooks.py); any other unknown keyword raises one listing
fs's keywords.

    resolve("generate", {"max_tokens": 8, "temp": 0.7})  ->  {"max_new_tokens": 8, "temperature": 0.7}
"""

import inspect
from typing import Any

from .errors import GenerateError

ALIASES = {"max_tokens": "max_new_tokens", "temp": "temperature"}  # mlx-lm's name -> fs's
REFUSED = {
    "verbose": "fs returns a Generation: print its .text; its prompt_tps / generation_tps are mlx-lm's stats line",
    "prompt_cache": "fs's is prefix_cache= (a KVPrefix, or a file made by fs-cache-prompt via load_prompt)",
    "prefill_step_size": "fs prefills a prompt in one pass per call; there is no step size to set",
    "kv_cache": "fs's is prefix_cache=",
}


def _accepted() -> frozenset[str]:
    from .generate import Generator  # generate.py imports this module: resolve the names at call time

    return frozenset(p for p in inspect.signature(Generator.__init__).parameters if p not in ("self", "model"))


def resolve(where: str, kw: dict[str, Any]) -> dict[str, Any]:
    """``kw`` with mlx-lm's spellings renamed to fs's; a GenerateError for a keyword fs does not take."""
    out = dict(kw)
    for theirs, ours in ALIASES.items():
        if theirs in out:
            if ours in out:
                raise GenerateError(f"{where}() got both {theirs}= (mlx-lm's name) and {ours}=; pass one")
            out[ours] = out.pop(theirs)
    accepted = _accepted()
    for name in out:
        if name in REFUSED:
            raise GenerateError(f"{where}() does not take mlx-lm's {name}=: {REFUSED[name]}")
        if name not in accepted:
            known = ", ".join(sorted(accepted - {"tokenizer", "prompt"}))
            raise GenerateError(f"{where}() got an unknown keyword {name!r}; it takes: {known}")
    if "max_new_tokens" not in out:
        raise GenerateError(f"{where}() needs max_new_tokens= (mlx-lm's max_tokens=)")
    return out
