"""Constrained decoding: a request's output must match a JSON schema, a regular expression or a Lark grammar.

Why a library: deciding which of 151,936 tokens may come next under a grammar is an incremental parser over the
token vocabulary's bytes. llguidance (Rust; what llama.cpp and vLLM use) computes that mask in about a millisecond
per token here. fs builds llguidance's view of the vocabulary from the very tokenizer.json fs-tokenizer loaded
(``Tokenizer.to_json``), sized to the model's logits, with the request's EOS ids as the grammar's end.

Contract, per step: ``mask(logits [V]) -> logits`` with every token the grammar cannot take next set to -inf
(EOS stays allowed only where the grammar may end); ``accept(token)`` advances the parser. Sampling then runs
unchanged on the masked logits, so greedy picks the best allowed token and a seeded draw stays reproducible.
``stopped`` turns True once the grammar admits nothing more; the request then ends with ``finish_reason="stop"``.

Off the critical path: after ``accept`` the next mask is computed on a worker thread (llguidance releases the GIL)
while the next forward pass runs, so ``mask`` usually only waits for work already done. The result is the same
mask either way; ``PREFETCH = False`` computes it in line (the benchmark's baseline).

Refused at submit, as the request's ``ConstraintError`` (``kind`` names which field): what llguidance will not
compile, a schema nested deeper than ``MAX_DEPTH``, and a constraint that admits no output at all (a regex that
matches nothing, a schema whose ``$ref`` only refers to itself): its first mask is computed before the request is
queued, and one that allows nothing but EOS where the grammar cannot yet end would return empty text as if the
model had chosen it. A mask that fails mid-way fails only its request, with the same error class.

JSON schemas compile strict (``strict_schema.close_objects``: an object listing ``properties`` admits no other
keys unless it says so) and with compact whitespace (``{"a":1}``): with llguidance's flexible default a small model
filled its budget with spaces and newlines (the structured-output issue measured 0 of 9 outputs complete at 96
tokens, 9 of 9 with compact whitespace).
"""

import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from fs_weights.jsonfile import check_depth

from .errors import ConstraintError, GenerateError
from .strict_schema import close_objects

_VIEWS: dict[tuple[str, int, tuple[int, ...]], Any] = {}  # building one costs ~1.4 s: once per tokenizer
_LOCK = threading.Lock()
PREFETCH = True  # compute the next mask while the forward pass runs (one worker: a mask is ~0.05-3 ms)
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fs-mask")
MAX_DEPTH = 64  # JSON nesting of a schema: real ones stay under 10; Python's json recursion gives out near 1,000


def _view(tokenizer: Any, vocab_size: int, eos: tuple[int, ...]) -> Any:
    import llguidance

    if tokenizer is None or not hasattr(tokenizer, "to_json"):
        raise GenerateError("constrained decoding needs the model's tokenizer (an fs_tokenizer.Tokenizer)")
    key = (getattr(tokenizer, "digest", "") or str(id(tokenizer)), vocab_size, eos)
    with _LOCK:
        if key not in _VIEWS:
            _VIEWS[key] = llguidance.LLTokenizer(tokenizer.to_json(), n_vocab=vocab_size, eos_token=list(eos))
        return _VIEWS[key]


def compile_grammar(json_schema: Any = None, regex: str | None = None, grammar: str | None = None) -> str | None:
    """llguidance's grammar text for the one constraint given (None when none is)."""
    import llguidance

    given = [n for n, v in (("json_schema", json_schema), ("regex", regex), ("grammar", grammar)) if v is not None]
    if len(given) > 1:
        raise GenerateError(f"give at most one of json_schema, regex and grammar, got {', '.join(given)}")
    if not given:
        return None
    try:
        if json_schema is not None:
            parsed = json.loads(json_schema) if isinstance(json_schema, str) else json_schema
            check_depth(parsed, "json_schema", ConstraintError, MAX_DEPTH)
            text = json.dumps(close_objects(parsed))  # strict objects by default (strict_schema.py)
            out = llguidance.LLMatcher.grammar_from_json_schema(text, defaults={"whitespace_flexible": False})
        elif regex is not None:
            if not isinstance(regex, str):
                raise ConstraintError(f"regex must be a str, got {type(regex).__name__}", "regex")
            out = llguidance.LLMatcher.grammar_from_regex(regex)
        else:
            if not isinstance(grammar, str):
                raise ConstraintError(f"grammar must be Lark text (a str), got {type(grammar).__name__}", "grammar")
            out = llguidance.LLMatcher.grammar_from_lark(grammar)
    except ConstraintError as e:
        e.kind = given[0]
        raise
    except (ValueError, TypeError, RecursionError) as e:  # json.loads, or llguidance refusing the text outright
        raise ConstraintError(f"invalid {given[0]}: {e}", given[0]) from None
    check(str(out), None, given[0])
    return str(out)


def gbnf_to_lark(text: Any) -> str:
    """llama.cpp's GBNF (``root ::= "yes" | "no"``) as the Lark text ``grammar=`` takes, by llguidance's converter;
    text that is Lark already (a ``start:`` rule) passes through. A grammar it cannot read is a ``ConstraintError``."""
    from llguidance.gbnf_to_lark import any_to_lark

    if not isinstance(text, str):
        raise ConstraintError(f"a GBNF grammar must be a str, got {type(text).__name__}", "grammar")
    try:
        return any_to_lark(text)
    except Exception as e:  # the converter raises bare Exceptions ("Rule 'foo' not found")
        raise ConstraintError(f"invalid GBNF grammar: {e}", "grammar") from None


def check(grammar: str, view: Any, kind: str) -> None:
    """llguidance's own validation (syntax, undefined rules, bad regexes; with a tokenizer view, its tokens)."""
    import llguidance

    problem = llguidance.LLMatcher.validate_grammar(grammar, view)
    if problem:  # several lines with a caret under the place: one line here, the lines kept in order
        lines = [line.strip() for line in problem.splitlines() if line.strip()]
        raise ConstraintError(f"invalid {kind}: " + "; ".join(lines), kind)


class Constraint:
    def __init__(self, grammar: str, tokenizer: Any, vocab_size: int, eos: frozenset[int], kind: str = "grammar"):
        import llguidance

        # the grammar's end: the request's EOS ids, else the tokenizer's (EOS switched off still needs an end)
        ends = tuple(sorted(eos)) or tuple(getattr(tokenizer, "eos_token_ids", ()) or ())
        if not ends:
            raise GenerateError("constrained decoding needs an EOS id to end on (eos_token_ids is empty)")
        self.ends = frozenset(ends)
        self.kind = kind
        view = _view(tokenizer, vocab_size, ends)
        check(grammar, view, kind)
        self.matcher = llguidance.LLMatcher(view, grammar)
        if self.matcher.is_error():
            raise ConstraintError(f"invalid {kind}: {self.matcher.get_error()}", kind)
        self.vocab_size = vocab_size
        self._bits = np.zeros((vocab_size + 31) // 32, np.int32)
        self._pending: Future[None] | None = None
        self._stopped = bool(self.matcher.is_stopped())
        self._compute()  # the first mask, here: a constraint that fails or admits nothing is refused at submit
        self._ready = True
        others = self._unpack()
        others[sorted(t for t in self.ends if t < vocab_size)] = False
        if not self.matcher.is_accepting() and not others.any():
            raise ConstraintError(f"the {kind} admits no output (no string satisfies it)", kind)

    def _compute(self) -> None:
        try:
            self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        except (ValueError, RuntimeError) as e:  # llguidance's limits (lexer size, fuel) reached mid-way
            raise ConstraintError(f"the {self.kind} could not be followed: {e}", self.kind) from None
        if self.matcher.is_error():
            why = (self.matcher.get_error() or "").strip().splitlines() or ["unknown"]
            if why[0].startswith("NoExtension"):  # llguidance's word for: no token can continue, none can end
                raise ConstraintError(f"the {self.kind} admits no output (no string satisfies it)", self.kind)
            raise ConstraintError(f"the {self.kind} could not be followed: {why[0]}", self.kind)

    def _prefetch(self) -> None:
        # the worker owns the matcher until _wait: touching it meanwhile is a "borrowed" error from llguidance
        if PREFETCH and not self._stopped:
            self._pending = _POOL.submit(self._compute)

    def _wait(self) -> bool:
        """True when a prefetched mask is in ``_bits`` (its errors surface here, in the caller's thread)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        pending.result()
        return True

    def allowed(self) -> np.ndarray:
        """bool [V]: the tokens the grammar can take next."""
        if not self._wait() and not self._ready:
            self._compute()
        self._ready = False
        return self._unpack()

    def _unpack(self) -> np.ndarray:
        return np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self.vocab_size].astype(bool)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        ok = self.allowed()
        if ok.shape[0] != logits.shape[0]:
            raise GenerateError(f"the constraint covers {ok.shape[0]} tokens but the logits have {logits.shape[0]}")
        return np.where(ok, logits, np.float32(-np.inf)).astype(np.float32)

    def accept(self, token: int) -> None:
        self._wait()  # never advance the parser under a mask still being computed
        if not self.matcher.consume_token(token):
            raise ConstraintError(f"token {token} does not fit the {self.kind}: {self.matcher.get_error()}", self.kind)
        self._stopped = bool(self.matcher.is_stopped())
        self._prefetch()

    @property
    def stopped(self) -> bool:
        return self._stopped


def make_constraint(
    tokenizer: Any, vocab_size: int, eos: frozenset[int], json_schema: Any, regex: Any, grammar: Any
) -> Constraint | None:
    text = compile_grammar(json_schema, regex, grammar)
    if text is None:
        return None
    kind = "json_schema" if json_schema is not None else "regex" if regex is not None else "grammar"
    return Constraint(text, tokenizer, vocab_size, eos, kind)
