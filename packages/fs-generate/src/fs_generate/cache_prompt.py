"""``fs-cache-prompt``: prefill a long prompt once and save its K/V, like ``mlx_lm.cache_prompt``.

fs-cache-prompt --model Qwen/Qwen3-0.6B --prompt "$(cat report.txt)" --out report.safetensors
fs-generate --model Qwen/Qwen3-0.6B --prompt-cache-file report.safetensors --prompt " Summarize it."

Under the chat template the saved prompt is ``[system] + user`` with the user message left open; a later
``fs-generate --prompt-cache-file`` continues that message and prefills only its own text.
"""

import argparse
import sys
import time
from pathlib import Path

from fs_weights.atomic import check_replaceable
from fs_weights.command_line import progress_bar, run_main
from fs_weights.jsonfile import decode_utf8

from . import __version__
from .chat_prompt import open_turn
from .cli import KNOWN_ERRORS
from .errors import GenerateError
from .model_flags import add_model_flags, load_from_args
from .reused_prefix import prefill_state, save_prompt


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="fs-cache-prompt", description="Save a prompt's K/V for fs-generate --prompt-cache-file."
    )
    add_model_flags(ap)
    ap.add_argument("--prompt", "-p", required=True, help="prompt text ('-' reads standard input)")
    ap.add_argument("--out", "--prompt-cache-file", dest="out", required=True, metavar="FILE", help="the file to write")
    ap.add_argument(
        "--ignore-chat-template", "--raw", action="store_true", help="cache the prompt as is, without the template"
    )
    ap.add_argument("--system-prompt", "--system", dest="system", help="system message (under the chat template)")
    ap.add_argument("--version", action="version", version=f"fs-cache-prompt {__version__}")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run_main("fs-cache-prompt", lambda: _run(args), KNOWN_ERRORS)


def _run(args: argparse.Namespace) -> int:
    err = sys.stderr
    text = decode_utf8(sys.stdin.buffer.read(), "standard input", GenerateError) if args.prompt == "-" else args.prompt
    out = Path(args.out)
    if not out.parent.is_dir():
        raise GenerateError(f"--out: no such directory {out.parent}")
    check_replaceable(out, GenerateError)  # before the prefill: --out /dev/full is refused, not replaced
    if args.ignore_chat_template and args.system is not None:
        raise GenerateError("--system-prompt needs the chat template; drop --ignore-chat-template")
    model, tok = load_from_args(args)
    templated = getattr(tok, "chat_template", None) is not None and not args.ignore_chat_template
    if not templated and args.system is not None:
        raise GenerateError("--system-prompt needs a chat template, and this tokenizer has none")
    ids = open_turn(tok, text, args.system) if templated else list(tok.encode(text))
    if not ids:
        raise GenerateError("empty prompt: nothing to cache")
    if len(ids) >= model.config.max_position_embeddings:
        raise GenerateError(
            f"the prompt is {len(ids)} tokens; the model's context is {model.config.max_position_embeddings}"
        )
    t0 = time.perf_counter()
    bar, close = progress_bar(err, unit="tok", quiet=args.quiet)
    try:
        state = prefill_state(model, ids, bar)
    finally:
        close()
    seconds = time.perf_counter() - t0
    save_prompt(out, model, tok, ids, state)
    print(f"saved {len(ids)} prompt tokens to {out} ({len(ids) / seconds:.1f} tokens-per-sec prefill)", file=err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
