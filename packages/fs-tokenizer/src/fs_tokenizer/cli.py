"""``fs-tokenizer encode|decode|chat --model PATH ...``: look at what the tokenizer does, token by token."""

import argparse
import json
import sys
from pathlib import Path

from .errors import TokenizerError
from .tokenizer import Tokenizer


def readable(tok: Tokenizer, token_id: int) -> str:
    """A token's bytes shown as text where they are complete UTF-8, else as \\xNN escapes."""
    text = tok.token_bytes(token_id).decode("utf-8", errors="backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fs-tokenizer", description="Byte-level BPE tokenizer for Qwen2/Qwen3.")
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
    try:
        tok = Tokenizer.from_pretrained(args.model)
        if args.cmd == "encode":
            text = sys.stdin.read() if args.text == "-" else args.text
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
            raw = sys.stdin.read() if args.messages == "-" else Path(args.messages).read_text(encoding="utf-8")
            try:
                messages = json.loads(raw)
            except json.JSONDecodeError as err:
                raise TokenizerError(f"{args.messages}: not valid JSON: {err}") from None
            out = tok.apply_chat_template(
                messages,
                add_generation_prompt=args.generation_prompt,
                enable_thinking=not args.no_thinking,
                tokenize=args.ids,
            )
            print(json.dumps(out) if args.json or args.ids else out, end="" if not (args.json or args.ids) else "\n")
        return 0
    except BrokenPipeError:  # a subclass of OSError: caught first, so `| head` ends quietly with 0
        return 0
    except (TokenizerError, OSError) as err:
        print(f"fs-tokenizer: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
