"""``fs-convert-gguf``: a Qwen3 model as one llama.cpp GGUF file (convert_hf_to_gguf.py's role).

    fs-convert-gguf Qwen/Qwen3-0.6B qwen3-0.6b-q8_0.gguf --outtype q8_0
    fs-convert-gguf ./qwen3 --outfile qwen3-bf16.gguf                  # llama.cpp's flag names work too

Why here and not in fs-weights: a GGUF file carries the vocabulary, and the vocabulary is fs-tokenizer's; the
two packages sit side by side at layer 0, so the command that needs both lives one layer up. The tensors are
fs-weights' ``gguf_export.write_gguf`` (llama.cpp's Qwen3 layout, the ``gguf`` package's quantizers; an MLX 4/8-bit
source is dequantized first), the ``tokenizer.*`` keys fs-tokenizer's ``gguf_fields`` (ids past the tokenizer up
to the embedding's rows become ``[PADn]``, as llama.cpp's converter writes them). The file is written beside OUT
and renamed into place; an existing OUT is refused unless ``--overwrite``. What fs writes, fs reads back: the
round trip is tested for every type.
"""

import argparse
import sys
import time
from pathlib import Path

from fs_tokenizer import Tokenizer
from fs_tokenizer.gguf_vocab import gguf_fields
from fs_weights import load_config
from fs_weights.atomic import check_replaceable
from fs_weights.command_line import progress_bar, run_main
from fs_weights.gguf_export import write_gguf
from fs_weights.hub import resolve_model_path

from . import __version__
from .cli import KNOWN_ERRORS
from .errors import GenerateError

# llama.cpp's spellings -> ggml types
TYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k": "Q4_K"}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fs-convert-gguf", description="Write a Qwen3 model as a llama.cpp GGUF file.")
    ap.add_argument("src", help="model directory or Hugging Face id")
    ap.add_argument("out", nargs="?", help="the .gguf file to write (or --outfile)")
    ap.add_argument("--outfile", help="convert_hf_to_gguf.py's name for OUT")
    ap.add_argument("--outtype", "--type", choices=sorted(TYPES), default="bf16", help="tensor type (default bf16)")
    ap.add_argument("--tokenizer", help="a directory whose tokenizer to write (default: SRC's)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    ap.add_argument("--version", action="version", version=f"fs-convert-gguf {__version__}")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    args.out = args.out or args.outfile
    if args.out is None:
        ap.error("give OUT (or --outfile)")
    return run_main("fs-convert-gguf", lambda: _run(args), KNOWN_ERRORS)


def export(
    src: str, out: Path, outtype: str, tokenizer: str | None = None, *, overwrite: bool = False, quiet: bool = True
) -> Path:
    """The command's work: SRC (a directory or Hugging Face id) as OUT, checked before any tensor is touched."""
    if out.suffix.lower() != ".gguf":
        raise GenerateError(f"{out}: a GGUF file's name ends in .gguf")
    if not out.parent.is_dir():
        raise GenerateError(f"{out}: no such directory {out.parent}")
    check_replaceable(out, GenerateError)
    if out.exists() and not overwrite:
        raise GenerateError(f"{out} exists; pass --overwrite to replace it")
    where = resolve_model_path(src, GenerateError)
    tok = Tokenizer.from_pretrained(resolve_model_path(tokenizer, GenerateError) if tokenizer else where)
    fields = gguf_fields(tok, load_config(where).vocab_size)  # before any tensor work: a bad vocabulary fails fast
    bar, close = progress_bar(sys.stderr, unit="tensor", quiet=quiet)
    try:
        return write_gguf(where, out, ggml_type=TYPES[outtype], tokenizer_fields=fields, progress=bar)
    finally:
        close()


def _run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    out = export(args.src, Path(args.out), args.outtype, args.tokenizer, overwrite=args.overwrite, quiet=args.quiet)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {args.outtype}) in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
