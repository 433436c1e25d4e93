"""The flags every fs-generate command shares for choosing and loading a model, and the loading itself.

``fs-generate``, ``fs-cache-prompt``, ``fs-chat`` and ``fs-bench`` take the same ``--model``, ``--backend``,
``--dtype``, ``--quantize`` and ``--threads`` with the same meanings; they are declared here once, and
``load_from_args`` is the one place that applies ``--threads``, prints the loading line and draws the byte
progress bar (on a terminal, unless ``--quiet``).
"""

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from fs_tokenizer import Tokenizer
from fs_weights.command_line import positive_int, progress_bar

from .demo import demo_banner
from .errors import GenerateError
from .resolve import load

TINY = 100_000_000  # parameters: below this a model is a test or demo model (the smallest Qwen3 has 596M)


def parameter_count(config: Any) -> int:
    """The model's parameters as the architecture has them (logical shapes: a 4-bit 0.6B still has 596M)."""
    import math

    from fs_weights import expected_tensors

    return sum(math.prod(s) for s in expected_tensors(config).values())


def add_model_flags(ap: argparse.ArgumentParser, *, peer: str = "mlx-lm") -> None:
    """The shared flags, with the short spellings of the command's ``peer`` (docs/generate.md's flag table):
    "mlx-lm" (fs-generate, fs-chat: ``-m`` is the command's own --max-tokens, as in mlx_lm.generate; llama.cpp's
    ``-t`` for --threads does not collide) or "llama.cpp" (fs-bench: ``-m`` is --model, as in llama-bench, whose
    ``-t`` the command defines itself)."""
    ap.add_argument(
        "--model",
        *(["-m"] if peer == "llama.cpp" else []),
        help="local model directory, .gguf file or Hugging Face id (Qwen/Qwen3-0.6B); default: the tiny "
        "demo model shipped with fs-generate",
    )
    ap.add_argument(
        "--adapter-path",
        help="LoRA adapter directory (mlx-lm's adapters.safetensors or PEFT's), fused into the weights at load",
    )
    ap.add_argument("--backend", choices=["numpy", "mlx"], default="numpy")
    ap.add_argument(
        "--threads",
        *(["-t"] if peer == "mlx-lm" else []),
        type=positive_int,
        help="cap the CPU kernels' threads (default: every core)",
    )
    ap.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16", "native"],
        help="MLX: compute dtype (default: the checkpoint's); numpy: native (the default) keeps the checkpoint's "
        "storage (bf16, MLX 4/8-bit) on the CPU kernels, float32 computes on float32 copies (BLAS), bfloat16 "
        "keeps bf16 bits",
    )
    ap.add_argument(
        "--quantize", choices=["int8", "int4"], help="numpy: quantize weights at load (MLX affine, group 64)"
    )
    ap.add_argument("--quiet", "-q", action="store_true", help="no loading line or progress bars on stderr")


def check_adapter(adapter_path: str) -> None:
    """Read ``--adapter-path`` now (its files and tensors; cheap), for a command that loads the model later - fs-serve
    loads after binding its port - so that a bad adapter is one error line at start, not a dead server."""
    from fs_weights import WeightsError
    from fs_weights.adapter import load_adapter

    try:
        load_adapter(adapter_path)
    except WeightsError as e:
        raise GenerateError(str(e)) from None


UNLIMITED = -1  # llama.cpp's -n -1: no budget of its own; generation ends at EOS, a stop or the context limit


def token_count(minimum: int, *, unlimited: bool = False) -> Callable[[str], int]:
    """argparse type of --max-tokens/-m/-n: a count >= ``minimum`` (or, ``unlimited``, llama.cpp's -1); a value
    that is not one - most often a model path typed as llama.cpp's ``-m`` - is told where the model goes."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if unlimited and value == UNLIMITED:
            return value
        if value is None or value < minimum:
            hint = f"; the model is --model {text} (llama.cpp's -m)" if value is None else ""
            what = "a non-negative" if minimum == 0 else "a positive" if minimum == 1 else f"an (>= {minimum})"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} integer (a count of tokens){hint}")
        return value

    return parse


def token_budget(max_tokens: int, model: Any) -> int:
    """A parsed --max-tokens as ``max_new_tokens``: -1 is as many as the model's context holds (the prompt's
    share and --ctx-size still end it earlier, with finish reason "context")."""
    return int(model.config.max_position_embeddings) if max_tokens == UNLIMITED else max_tokens


def load_from_args(args: argparse.Namespace) -> tuple[Any, Tokenizer]:
    """Apply ``--threads``, then load ``--model`` (the demo model without one) as the flags say."""
    err = sys.stderr
    if args.threads is not None:
        from fs_model.cpu import set_threads

        set_threads(args.threads)
    t0 = time.perf_counter()
    if args.quiet:
        from fs_model.cpu import compile_notice

        compile_notice.quiet()
    else:
        if args.model is None:
            print(demo_banner(), file=err)
        lora = f" + adapter {args.adapter_path}" if args.adapter_path else ""
        print(f"loading {args.model or 'the demo model'}{lora} ({args.backend}) ...", end="", file=err, flush=True)
    bar, close = progress_bar(err, quiet=args.quiet)
    try:
        model, tok = load(
            args.model,
            backend=args.backend,
            dtype=args.dtype,
            quantize=args.quantize,
            progress=bar,
            adapter_path=args.adapter_path,
        )
    except BaseException:
        close()
        if not args.quiet:
            print(file=err)  # end the "loading ..." line before the error line
        raise
    close()
    if not args.quiet:
        print(f"{' done' if bar else ''} {time.perf_counter() - t0:.1f}s", file=err, flush=True)
        params = parameter_count(model.config)
        if args.model is not None and params < TINY:  # the demo model says so in its own banner
            print(
                f"note: this is a tiny model ({params / 1e6:.1f}M parameters); for real output pass --model "
                "Qwen/Qwen3-0.6B or a local Qwen3 directory",
                file=err,
            )
    return model, tok
