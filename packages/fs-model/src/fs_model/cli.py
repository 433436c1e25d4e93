"""``fs-model logits --model PATH "text" [--top 10]``: the next-token candidates, a debugger for the forward pass."""

import argparse
import sys
from typing import Any

import numpy as np

from fs_kvcache import KVCacheError
from fs_weights import WeightsError
from fs_weights.command_line import positive_int, run_main

from . import __version__
from .errors import ModelError
from .loader import load_model


def top_candidates(logits: np.ndarray, k: int) -> list[tuple[int, float, float]]:
    """(id, logit, probability) for the k largest logits; ties by lower id, probabilities over the full V."""
    z = logits.astype(np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.lexsort((np.arange(len(z)), -z))[:k]
    return [(int(i), float(z[i]), float(p[i])) for i in order]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fs-model", description="Run the Qwen3 forward pass and show the logits.")
    ap.add_argument("--version", action="version", version=f"fs-model {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("logits", help="next-token candidates after a prompt")
    lg.add_argument("text", nargs="?", help="prompt text (needs fs-tokenizer: pip install 'fs-model[tokenizer]')")
    lg.add_argument("--ids", type=int, nargs="+", help="prompt as token IDs instead of text")
    lg.add_argument("--model", required=True, help="model directory")
    lg.add_argument("--backend", choices=["numpy", "mlx"], default="numpy")
    lg.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16", "native"],
        help="MLX: compute dtype (default: the checkpoint's); numpy: native (the default) keeps the checkpoint's "
        "storage, float32 computes on float32 copies, bfloat16 keeps bf16 bits",
    )
    lg.add_argument("--quantize", choices=["int8", "int4"], help="numpy: quantize weights at load (MLX affine)")
    lg.add_argument("--top", type=positive_int, default=10)
    lg.add_argument("--threads", type=positive_int, help="cap the CPU kernels' threads (default: every core)")
    args = ap.parse_args(argv)
    return run_main("fs-model", lambda: _run(args), (ModelError, WeightsError, KVCacheError, OSError))


def _run(args: argparse.Namespace) -> int:
    from .cpu import set_threads

    set_threads(args.threads)
    tok = None
    if args.ids is None:
        if args.text is None:
            raise ModelError("give a prompt: text, or --ids 1 2 3")
        try:
            from fs_tokenizer import Tokenizer, TokenizerError
        except ImportError:
            raise ModelError(
                "text prompts need fs-tokenizer (pip install 'fs-model[tokenizer]'); or pass --ids"
            ) from None
        try:
            tok = Tokenizer.from_pretrained(args.model)
            ids = tok.encode(args.text)
        except TokenizerError as e:
            raise ModelError(str(e)) from None
    else:
        ids = args.ids
        tok = _tokenizer_if_any(args.model)  # only to show each candidate's text
    model = load_model(args.model, backend=args.backend, dtype=args.dtype, quantize=args.quantize)
    logits = np.asarray(model.to_numpy(model.forward(ids)), dtype=np.float32)[-1]
    print(f"prompt: {len(ids)} tokens {ids[:16]}{' ...' if len(ids) > 16 else ''}")
    print(f"next-token candidates ({model.backend} backend, logits [{logits.shape[0]}] at position {len(ids)}):")
    print(f"{'rank':>4}  {'id':>7}  {'logit':>9}  {'prob':>8}" + ("  token" if tok is not None else ""))
    for r, (i, z, p) in enumerate(top_candidates(logits, args.top), 1):
        shown = f"  {tok.decode([i])!r}" if tok is not None and i < tok.vocab_size else ""
        print(f"{r:>4}  {i:>7}  {z:>9.4f}  {p:>8.4f}{shown}")
    if tok is None:
        print("(no token column: the model directory has no tokenizer fs-tokenizer can read)")
    return 0


def _tokenizer_if_any(path: str) -> Any:
    """The model's tokenizer where fs-tokenizer is installed and can read one beside the weights; else None."""
    try:
        from fs_tokenizer import Tokenizer, TokenizerError
    except ImportError:
        return None
    try:
        return Tokenizer.from_pretrained(path)
    except (TokenizerError, OSError):
        return None


if __name__ == "__main__":
    sys.exit(main())
