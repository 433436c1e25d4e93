"""The engine's draft sources: which requests speculate, with what, and their drafts before each step.

Speculative decoding in continuous batching (speculative.py has the one-request loop): a request speculates when
it asks for prompt lookup (``Engine.submit(..., prompt_lookup_num_tokens=k)``, or the engine's default for every
request) or when the engine has a draft model (each request then gets its own ``DraftModel``: its own cache of
that request's context). Before each step every decoding request that speculates proposes up to
``min(k, room)`` drafts into ``Request.drafts``; the scheduler cuts them to the step's budget and the free blocks,
and the engine verifies them in the same ragged pass as the other sequences' rows.
"""

import logging
from collections.abc import Callable, Iterable
from typing import Any

from . import speculative
from .draft_model import DraftModel
from .errors import GenerateError
from .request import Request

log = logging.getLogger("fs_generate.engine")


class EngineDrafts:
    def __init__(self, model: Any, draft_model: Any, num_draft_tokens: int, prompt_lookup_num_tokens: int):
        """Refuses, by name: a k out of range, a target that is not batch invariant, a draft with another
        vocabulary, both sources at once."""
        if draft_model is not None:
            speculative.check(model, num_draft_tokens, "num_draft_tokens", low=1)
            DraftModel(draft_model, model)
        speculative.check(model, prompt_lookup_num_tokens)
        if draft_model is not None and prompt_lookup_num_tokens:
            raise GenerateError("draft_model and prompt_lookup_num_tokens are two draft sources: choose one")
        self.model, self.draft_model, self.num_draft = model, draft_model, num_draft_tokens
        self.prompt_lookup = prompt_lookup_num_tokens  # every request's unless it says otherwise (a server's flag)

    def lookup(self, asked: int | None) -> int:
        """A request's prompt-lookup k: its own, or the engine's when it gives None."""
        return self.prompt_lookup if asked is None else asked

    def keywords(self, lookup: int) -> dict[str, Any]:
        """``Generator`` keywords for a request with prompt-lookup ``lookup``: the draft model unless it looks up."""
        if self.draft_model is None or lookup:
            return {}
        return dict(draft_model=DraftModel(self.draft_model, self.model), num_draft_tokens=self.num_draft)

    def propose(self, running: Iterable[Request], fail: Callable[[Request, str], None]) -> None:
        """Each decoding request's drafts for the next step (``fail``: a request whose draft model raised)."""
        for r in list(running):
            g, r.drafts = r.gen, []
            k = min(g.num_draft, g.room())
            if g.drafter is None or r.remaining != 1 or k < 1:
                continue
            try:
                r.drafts = [int(t) for t in g.drafter(g.seq, k)]
            except Exception as e:  # a failing draft model fails its request, never the engine
                log.exception("drafting failed")
                fail(r, f"the draft model failed: {type(e).__name__}: {e}")

    @staticmethod
    def release(r: Request) -> None:
        """A finished request's draft cache goes with it."""
        if isinstance(r.gen.drafter, DraftModel):
            r.gen.drafter.reset()
