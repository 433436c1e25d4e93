"""The speculative-decoding flags fs-generate, fs-chat and fs-serve share, and loading the draft model they name.

    --draft-model PATH|ID       a smaller model of the same family drafts tokens (mlx-lm's flag)
    --draft-quantize int8|int4  quantize the draft at load: ``--draft-model`` = the model itself at int4 is a draft
    --num-draft-tokens K        tokens drafted per step with a draft model (default 3, mlx-lm's)
    --prompt-lookup-num-tokens K  draft up to K tokens from the context instead (Hugging Face's; 0 = off)

Either source is lossless: the model verifies every draft, and the output is the same bits as without them.
"""

import argparse
import sys
from typing import Any

from fs_weights.command_line import non_negative_int, positive_int

from .errors import GenerateError
from .resolve import load

SPECULATION_HELP = """\
speculative decoding (lossless: the output is the same bits as without it, on batch-invariant models - bf16 / int8 /
  int4 weights on the CPU kernels; other models are refused): --draft-model M drafts --num-draft-tokens K (default 3)
  tokens with a smaller model of the same tokenizer (--draft-quantize int4 makes the model's own weights a draft);
  --prompt-lookup-num-tokens K (1-16) drafts what followed the last 3, 2 or 1 tokens where they occurred before in
  the context - it pays when the text repeats its context (edits, quotes, code). One source at a time; the stats
  line says how many drafts were accepted.
"""


def add_speculation_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--draft-model", metavar="PATH|ID", help="speculative decoding: a smaller model drafts tokens")
    ap.add_argument("--draft-quantize", choices=["int8", "int4"], help="quantize the draft model at load")
    ap.add_argument(
        "--num-draft-tokens", type=positive_int, default=3, help="tokens the draft model proposes per step (3)"
    )
    ap.add_argument(
        "--prompt-lookup-num-tokens",
        type=non_negative_int,
        default=0,
        help="draft up to K tokens from the context (0: off)",
    )


def check_speculation_flags(args: argparse.Namespace) -> None:
    """The flags' own contradictions, before anything loads."""
    if args.draft_quantize and not args.draft_model:
        raise GenerateError("--draft-quantize needs --draft-model (the model to quantize as the draft)")
    if args.draft_model and args.prompt_lookup_num_tokens:
        raise GenerateError("--draft-model and --prompt-lookup-num-tokens are two draft sources: give one")


def speculation_from_args(args: argparse.Namespace, model: Any, tokenizer: Any) -> dict[str, Any]:
    """``generate`` / ``Engine`` keywords for the flags; loads ``--draft-model`` (refused when its tokenizer is
    not the model's) on the numpy backend."""
    check_speculation_flags(args)
    if not args.draft_model:
        return {"prompt_lookup_num_tokens": args.prompt_lookup_num_tokens} if args.prompt_lookup_num_tokens else {}
    if not getattr(args, "quiet", False):
        print(f"loading the draft model {args.draft_model} ...", file=sys.stderr, flush=True)
    draft, draft_tok = load(args.draft_model, quantize=args.draft_quantize)
    if draft_tok.vocab_size != tokenizer.vocab_size or draft_tok.encode(PROBE) != tokenizer.encode(PROBE):
        raise GenerateError(
            f"--draft-model {args.draft_model}: its tokenizer is not the model's (a draft must come from the same "
            "model family)"
        )
    return {"draft_model": draft, "num_draft_tokens": args.num_draft_tokens}


PROBE = "Speculative decoding: 草稿 tokens, verified. 🙂"  # two tokenizers that split it alike are the same here
