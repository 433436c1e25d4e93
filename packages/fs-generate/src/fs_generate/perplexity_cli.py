"""``fs-perplexity``: how well a model predicts a text, as one number (mlx_lm.perplexity's role, llama-perplexity's
running table).

    fs-perplexity --model Qwen/Qwen3-0.6B wiki.test.raw --sequence-length 512 --batch-size 8
    fs-perplexity --model ./qwen3 --data-path ./my-dataset          # a .jsonl, or a directory holding them

The text is tokenized as one stream (a ``.jsonl``: each row's ``text``, ``messages`` under the chat template, or
``prompt`` + ``completion``, concatenated in file order), cut into non-overlapping sequences of
``--sequence-length`` tokens (the tail that does not fill one is dropped) and scored ``--batch-size`` sequences
at a time by ``fs_generate.scoring.score``, the function ``echo`` on fs-serve uses. Every token but each
sequence's first is predicted; perplexity is ``exp(mean of -log p)`` over all of them, and ``±`` its standard
error (mlx-lm's delta method: ``ppl * std(-log p, ddof=1) / sqrt(N)``). stdout carries llama-perplexity's
running table (``[1]14.2,[2]13.9,...``: the perplexity of the sequences so far) and the result; stderr the
progress bar. Sequences are taken in order, not sampled, so a run is reproducible with no seed.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fs_weights.command_line import positive_int, progress_bar, run_main
from fs_weights.jsonfile import decode_utf8
from fs_weights.regular_file import read_regular

from . import __version__
from .cli import KNOWN_ERRORS
from .errors import GenerateError
from .model_flags import add_model_flags, load_from_args
from .scoring import score

MAX_TEXT = 1 << 30  # a text file above 1 GiB is refused rather than read into memory


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fs-perplexity", description="The perplexity of a model on a text.")
    add_model_flags(ap)
    ap.add_argument("file", nargs="?", help="a UTF-8 text file ('-' reads standard input)")
    ap.add_argument("--data-path", help="a .jsonl file, a directory of them, or a Hugging Face dataset id")
    ap.add_argument("--sequence-length", "-c", type=positive_int, default=512, help="tokens per sequence (512)")
    ap.add_argument("--batch-size", "-b", type=positive_int, default=8, help="sequences per forward pass (8)")
    ap.add_argument("--num-samples", type=int, default=-1, help="score at most this many sequences (-1: all)")
    ap.add_argument("--version", action="version", version=f"fs-perplexity {__version__}")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run_main("fs-perplexity", lambda: _run(args), KNOWN_ERRORS)


# --- the text -------------------------------------------------------------------------------------------------


def jsonl_files(data_path: str) -> list[Path]:
    """The ``.jsonl`` files ``--data-path`` names: the file, a directory's (``train`` first, mlx-lm's split for
    perplexity), or a Hugging Face dataset repository's, downloaded to the local cache."""
    p = Path(data_path)
    if not p.exists():
        if data_path.count("/") != 1:
            raise GenerateError(f"--data-path: {data_path} is neither a file, a directory nor a dataset id (org/name)")
        from huggingface_hub import snapshot_download

        p = Path(snapshot_download(data_path, repo_type="dataset", allow_patterns=["*.jsonl", "**/*.jsonl"]))
    if p.is_file():
        return [p]
    found = sorted(p.rglob("*.jsonl"), key=lambda f: (f.stem != "train", str(f)))
    if not found:
        raise GenerateError(f"--data-path: {p} holds no .jsonl files (rows of text, messages or prompt+completion)")
    return found


def read_rows(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """What to score, read and checked before the model loads: ``(where, text or a .jsonl row)`` in order."""
    if (args.file is None) == (args.data_path is None):
        raise GenerateError("give a text file or --data-path (one of them)")
    if args.file is not None:
        where = "standard input" if args.file == "-" else args.file
        raw = sys.stdin.buffer.read() if args.file == "-" else read_regular(args.file, GenerateError, MAX_TEXT)
        return [(where, decode_utf8(raw, where, GenerateError))]
    rows: list[tuple[str, Any]] = []
    for f in jsonl_files(args.data_path):
        lines = decode_utf8(read_regular(f, GenerateError, MAX_TEXT), str(f), GenerateError).splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise GenerateError(f"{f}:{n}: not JSON ({e})") from None
            ok = isinstance(row, dict) and (
                isinstance(row.get("text"), str)
                or isinstance(row.get("messages"), list)
                or (isinstance(row.get("prompt"), str) and isinstance(row.get("completion"), str))
            )
            if not ok:
                raise GenerateError(f'{f}:{n}: a row needs "text", "messages", or "prompt" and "completion" strings')
            rows.append((f"{f}:{n}", row))
    return rows


def token_stream(rows: list[tuple[str, Any]], tok: Any) -> list[int]:
    ids: list[int] = []
    for _, row in rows:
        if isinstance(row, str):
            ids += tok.encode(row)
        elif isinstance(row.get("text"), str):
            ids += tok.encode(row["text"])
        elif isinstance(row.get("messages"), list):
            ids += tok.encode(tok.apply_chat_template(row["messages"], add_generation_prompt=False))
        else:
            ids += tok.encode(row["prompt"] + row["completion"])
    return ids


# --- scoring --------------------------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    if args.num_samples == 0 or args.num_samples < -1:
        raise GenerateError(f"--num-samples must be a positive count or -1 (all), got {args.num_samples}")
    rows = read_rows(args)
    model, tok = load_from_args(args)
    L = args.sequence_length
    if not 2 <= L <= model.config.max_position_embeddings:
        ctx = model.config.max_position_embeddings
        raise GenerateError(f"--sequence-length must be in [2, {ctx}] (the model's context), got {L}")
    ids = token_stream(rows, tok)
    n = len(ids) // L if args.num_samples == -1 else min(len(ids) // L, args.num_samples)
    if n == 0:
        raise GenerateError(f"the text is {len(ids)} tokens: not one sequence of --sequence-length {L}")
    seqs = [ids[i * L : (i + 1) * L] for i in range(n)]
    err, out = sys.stderr, sys.stdout
    print(f"scoring {n} sequences of {L} tokens, {args.batch_size} per batch", file=err, flush=True)
    bar, close = progress_bar(err, unit="seq", quiet=args.quiet)
    losses: list[float] = []
    t0 = time.perf_counter()
    try:
        for at in range(0, n, args.batch_size):
            for s in score(model, seqs[at : at + args.batch_size]):
                losses += [-lp for lp in s.logprobs[1:] if lp is not None]
                done = len(losses) // (L - 1)
                print(f"[{done}]{math.exp(float(np.mean(losses))):.4f},", end="", file=out, flush=True)
            if bar is not None:
                bar(min(at + args.batch_size, n), n)
    finally:
        close()
    seconds = time.perf_counter() - t0
    nll = np.asarray(losses)
    ppl = math.exp(float(nll.mean()))
    se = ppl * float(nll.std(ddof=1)) / math.sqrt(nll.size) if nll.size > 1 else 0.0
    print(file=out)
    print(f"Perplexity: {ppl:.4f} ± {se:.4f}", file=out)
    print(f"{nll.size} tokens scored in {seconds:.1f} s ({nll.size / seconds:.1f} tokens-per-sec)", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
