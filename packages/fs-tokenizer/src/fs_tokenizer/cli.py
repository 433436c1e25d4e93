"""``fs-tokenizer encode|decode|chat --model PATH ...``: look at what the tokenizer does, token by token."""

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

from . import __version__
from .errors import TokenizerError
from .tokenizer import Tokenizer, load_json, parse_json


def readable(tok: Tokenizer, token_id: int) -> str:
    """A token's bytes shown as text where they are complete UTF-8, else as \\xNN escapes."""
    text = tok.token_bytes(token_id).decode("utf-8", errors="backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fs-tokenizer", description="Byte-level BPE tokenizer for Qwen2/Qwen3.")
    ap.add_argument("--version", action="version", version=f"fs-tokenizer {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("encode", help="text -> IDs, with each token's piece")
    e.add_argument("text", help="text to encode ('-' reads standard input)")
    d = sub.add_parser("decode", help="IDs -> text")
    d.add_argument("ids", nargs="+", type=int)
    d.add_argument("--skip-special-tokens", action="store_true")
    c = sub.add_parser("chat", help="render the model's chat template over a JSON list of messages")
    c.add_argument("messages", help="JSON file: [{'role': ..., 'content': ...}, ...] ('-' for stdin)")
    c.add_argument("--generation-prompt", action="store_true", help="end with the assistant header")
    c.add_argument("--no-thinking", action="store_true", help="enable_thinking=False")
    c.add_argument("--ids", action="store_true", help="print the IDs instead of the text")
    for p in (e, d, c):
        p.add_argument("--model", required=True, help="model directory or tokenizer.json")
        p.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    return run_main(lambda: _run(args))


def run_main(body: Callable[[], int], prog: str = "fs-tokenizer") -> int:
    """The same four endings as every fs command line (fs_weights.command_line, which this layer-0 package cannot
    import): known error -> ``prog: error:`` exit 2; closed pipe -> quiet 0; Ctrl-C -> 130; a bug -> one line
    plus a trace file, exit 1. Lone surrogates print as escapes instead of killing ``print``."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # interrupts.py exited at once until now
    for stream in (sys.stdout, sys.stderr):
        getattr(stream, "reconfigure", lambda **_: None)(errors="backslashreplace")
    try:
        return body()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):  # Python flushes stdout at exit: make that harmless
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (TokenizerError, OSError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        fd, where = tempfile.mkstemp(prefix=f"{prog}-crash-", suffix=".txt")
        with os.fdopen(fd, "w", errors="backslashreplace") as f:
            f.write(traceback.format_exc())
        print(f"{prog}: internal error: {type(err).__name__}: {err} (traceback in {where})", file=sys.stderr)
        return 1


def _stdin_text() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TokenizerError(f"<stdin>: not valid UTF-8 (byte offset {e.start})") from None


def _run(args: argparse.Namespace) -> int:
    tok = Tokenizer.from_pretrained(args.model)
    if args.cmd == "encode":
        text = _stdin_text() if args.text == "-" else args.text
        ids = tok.encode(text)
        if args.json:
            print(json.dumps({"ids": ids, "pieces": [readable(tok, i) for i in ids]}))
        else:
            print(" ".join(map(str, ids)))
            for i in ids:
                print(f"{i:>8}  {readable(tok, i)}")
            print(f"{len(ids)} tokens")
    elif args.cmd == "decode":
        text = tok.decode(args.ids, skip_special_tokens=args.skip_special_tokens)
        print(json.dumps({"text": text}) if args.json else text)
    else:
        if args.messages == "-":
            messages = parse_json(sys.stdin.buffer.read(), "<stdin>", list)
        else:
            messages = load_json(Path(args.messages), list)
        out = tok.apply_chat_template(
            messages,
            add_generation_prompt=args.generation_prompt,
            enable_thinking=not args.no_thinking,
            tokenize=args.ids,
        )
        print(json.dumps(out) if args.json or args.ids else out, end="" if not (args.json or args.ids) else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
