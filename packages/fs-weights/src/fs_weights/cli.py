"""``fs-weights inspect PATH [--json]``, ``fs-weights random OUT --preset ...`` and
``fs-weights convert SRC OUT [--dtype D] [--quantize 4|8 --group-size G]`` and
``fs-weights fuse --model M --adapter-path A --save-path OUT [--dequantize]``."""

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import __version__
from .byte_tokenizer import VOCAB_SIZE as BYTE_VOCAB_SIZE
from .command_line import non_negative_int, positive_float, progress_bar, run_main
from .errors import WeightsError
from .random_checkpoint import PRESETS, preset, write_random_checkpoint
from .report import format_table, tensor_report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fs-weights", description="Inspect and create Qwen3 checkpoints.")
    ap.add_argument("--version", action="version", version=f"fs-weights {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inspect", help="list tensors, totals, parameter count and the cross-check verdict")
    p.add_argument("path", help="model directory, .safetensors file or model.safetensors.index.json")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    r = sub.add_parser("random", help="write a random-weight checkpoint in the HF layout")
    r.add_argument("out", help="directory to create")
    r.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    r.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    r.add_argument("--quantize", type=int, choices=[4, 8], help="write the MLX affine-quantized layout")
    r.add_argument("--group-size", type=int, default=64, choices=[32, 64, 128])
    r.add_argument("--seed", type=non_negative_int, default=0)
    r.add_argument(
        "--tokenizer",
        help="directory whose tokenizer files are copied in, or 'bytes' for a built-in "
        "byte-level tokenizer (vocab_size becomes its 265 ids)",
    )
    r.add_argument("--max-shard-size", type=positive_float, default=2.0, help="GiB per shard (default 2)")
    r.add_argument("--untied", action="store_true", help="write a separate lm_head")
    r.add_argument("--overwrite", action="store_true")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    c = sub.add_parser(
        "convert",
        help="write a model as an MLX-layout directory (mlx_lm.convert's): another dtype, or 4/8-bit quantized",
    )
    c.add_argument("src", nargs="?", help="model directory or Hugging Face id (or --hf-path / --model)")
    c.add_argument("out", nargs="?", help="directory to create (or --mlx-path)")
    c.add_argument("--hf-path", "--model", dest="hf_path", help="mlx_lm.convert's names for SRC")
    c.add_argument("--mlx-path", help="mlx_lm.convert's name for OUT")
    c.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], help="default: the source's")
    c.add_argument(
        "--quantize",
        type=int,
        choices=[4, 8],
        nargs="?",
        const=0,
        metavar="BITS",
        help="quantize to 4 or 8 bits (alone, as mlx_lm.convert's --quantize: to --q-bits)",
    )
    c.add_argument("-q", action="store_true", help="mlx_lm.convert's: quantize to --q-bits (default 4)")
    c.add_argument("--q-bits", type=int, choices=[4, 8], default=4, help="bits for -q / a bare --quantize (4)")
    c.add_argument(
        "-d", "--dequantize", action="store_true", help="mlx_lm.convert's: write a quantized source as floats"
    )
    c.add_argument("--group-size", "--q-group-size", type=int, default=64, choices=[32, 64, 128])
    c.add_argument("--max-shard-size", type=positive_float, default=2.0, help="GiB per shard (default 2)")
    c.add_argument("--overwrite", action="store_true")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    f = sub.add_parser("fuse", help="fuse a LoRA adapter into a model directory (mlx_lm.fuse's flags and output)")
    f.add_argument("--model", default="mlx_model", help="base model directory or Hugging Face id (mlx_model)")
    f.add_argument("--adapter-path", default="adapters", help="mlx-lm or PEFT adapter directory (adapters)")
    f.add_argument("--save-path", default="fused_model", help="directory to create (fused_model)")
    f.add_argument("--dequantize", action="store_true", help="write a quantized base as a float model")
    f.add_argument("--export-gguf", action="store_true", help=argparse.SUPPRESS)
    f.add_argument("--upload-repo", help=argparse.SUPPRESS)
    f.add_argument("--max-shard-size", type=positive_float, default=2.0, help="GiB per shard (default 2)")
    f.add_argument("--overwrite", action="store_true")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.cmd == "fuse" and args.export_gguf:  # mlx_lm.fuse's, for llama/mistral only; fs's GGUF writer is a step
        f.error(f"--export-gguf: fuse first, then `fs-convert-gguf {args.save_path} OUT.gguf --outtype bf16`")
    if args.cmd == "fuse" and args.upload_repo:
        f.error(f"--upload-repo: fs does not upload; `huggingface-cli upload {args.upload_repo} {args.save_path}`")
    if args.cmd == "convert":
        args.src, args.out = args.src or args.hf_path, args.out or args.mlx_path
        if args.src is None or args.out is None:
            c.error("give SRC and OUT (or --hf-path and --mlx-path)")
        if (args.q and args.quantize is None) or args.quantize == 0:
            args.quantize = args.q_bits
        if args.dequantize and args.quantize:
            c.error("choose --dequantize or --quantize/-q, not both")
    return run_main("fs-weights", lambda: _run(args), (WeightsError, OSError))


def _convert(args: argparse.Namespace) -> int:
    from .convert import convert_checkpoint
    from .hub import resolve_model_path

    if str(args.out).lower().endswith(".gguf"):  # it would be a safetensors directory named like a GGUF file
        raise WeightsError(
            f"{args.out}: fs-weights convert writes a safetensors directory; write a GGUF file with "
            f"`fs-convert-gguf {args.src} {args.out} --outtype bf16|f16|f32|q8_0|q4_0|q4_k` (fs-generate's: it "
            "converts the vocabulary too)"
        )
    src = resolve_model_path(args.src)
    out, seconds = _with_progress(
        args,
        lambda bar: convert_checkpoint(
            src,
            args.out,
            dtype=args.dtype,
            quantize=args.quantize,
            group_size=args.group_size,
            max_shard_bytes=int(args.max_shard_size * 1024**3),
            overwrite=args.overwrite,
            progress=bar,
        ),
    )
    what = f"{args.quantize}-bit, group {args.group_size}" if args.quantize else (args.dtype or "source dtype")
    print(f"wrote {out} ({what}) in {seconds:.1f}s")
    return 0


def _fuse(args: argparse.Namespace) -> int:
    from .fuse import fuse_adapter
    from .hub import resolve_model_path

    src = resolve_model_path(args.model)
    out, seconds = _with_progress(
        args,
        lambda bar: fuse_adapter(
            src,
            args.adapter_path,
            args.save_path,
            dequantize=args.dequantize,
            max_shard_bytes=int(args.max_shard_size * 1024**3),
            overwrite=args.overwrite,
            progress=bar,
        ),
    )
    print(f"wrote {out} ({args.adapter_path} fused into {args.model}) in {seconds:.1f}s")
    return 0


def _with_progress(args: argparse.Namespace, work: Callable[[Any], Path]) -> tuple[Path, float]:
    """``work(bar)`` under the byte progress bar (unless --quiet) -> (its result, seconds taken)."""
    t0 = time.perf_counter()
    bar, close = progress_bar(sys.stderr, quiet=args.quiet)
    try:
        return work(bar), time.perf_counter() - t0
    finally:
        close()


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "convert":
        return _convert(args)
    if args.cmd == "fuse":
        return _fuse(args)
    if args.cmd == "inspect":
        report = tensor_report(args.path)
        print(json.dumps(report, indent=2) if args.json else format_table(report))
        return 0 if report["verdict"] in ("ok",) or report["verdict"].startswith("no config") else 1
    t0 = time.perf_counter()
    overrides: dict[str, object] = {"tie_word_embeddings": False} if args.untied else {}
    if args.tokenizer == "bytes":
        overrides["vocab_size"] = BYTE_VOCAB_SIZE
    cfg = preset(args.preset, **overrides)
    bar, close = progress_bar(sys.stderr, quiet=args.quiet)
    out = write_random_checkpoint(
        args.out,
        cfg,
        seed=args.seed,
        dtype=args.dtype,
        quantize=args.quantize,
        group_size=args.group_size,
        tokenizer=args.tokenizer,
        max_shard_bytes=int(args.max_shard_size * 1024**3),
        overwrite=args.overwrite,
        progress=bar,
    )
    close()
    print(
        f"wrote {args.preset} ({args.dtype}{f', {args.quantize}-bit' if args.quantize else ''}) to {out}"
        f" in {time.perf_counter() - t0:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
