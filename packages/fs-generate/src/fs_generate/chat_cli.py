"""``fs-chat``: a multi-turn chat REPL on the model's template, like ``mlx_lm.chat``.

fs-chat --model Qwen/Qwen3-0.6B --system-prompt "Answer in one sentence." --verbose

Answers stream as they are generated; the conversation's K/V is kept, so each turn prefills only its new
tokens (``--verbose`` prints how many were reused). Ctrl-C stops the current answer and keeps the session.
"""

import argparse
import json
import select
import sys
from typing import TextIO

from fs_weights.atomic import write_atomic
from fs_weights.command_line import positive_int, run_main
from fs_weights.errors import WeightsError

from . import __version__
from .chat_session import ChatSession
from .cli import KNOWN_ERRORS
from .errors import GenerateError
from .model_flags import add_model_flags, load_from_args, token_budget, token_count
from .sampling_flags import add_sampling_flags, sampling_from_args
from .speculation_flags import add_speculation_flags, speculation_from_args

HELP = """\
commands: /reset (forget the conversation), /system TEXT (a new system prompt; resets), /think on|off,
          /save FILE (the messages as JSON), /help, /quit (or Ctrl-D). Ctrl-C stops the current answer."""


COMMANDS = ("/quit", "/exit", "/q", "/reset", "/system", "/think", "/save", "/help")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fs-chat", description="Chat with a Qwen3 model.", epilog=HELP)
    add_model_flags(ap)
    add_speculation_flags(ap)
    ap.add_argument("--system-prompt", "--system", dest="system", help="system message for the conversation")
    ap.add_argument("--enable-thinking", action="store_true", help="let Qwen3 think (toggle with /think)")
    ap.add_argument(
        "--max-tokens",
        "-m",
        "-n",
        "--n-predict",
        type=token_count(1, unlimited=True),
        default=512,
        help="tokens per answer (512; -1: until EOS or the context limit, llama.cpp's)",
    )
    add_sampling_flags(ap)
    ap.add_argument(
        "--max-kv-size",
        type=positive_int,
        help="mlx_lm.chat's sliding window: refused - fs-chat keeps the conversation's exact K/V between turns",
    )
    ap.add_argument("--verbose", action="store_true", help="after each answer: tokens reused, prefilled, generated")
    ap.add_argument("--version", action="version", version=f"fs-chat {__version__}")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run_main("fs-chat", lambda: _run(args), KNOWN_ERRORS)


def _run(args: argparse.Namespace) -> int:
    if args.max_kv_size is not None:  # before loading: a window would drop what the next turn resumes from
        raise GenerateError(
            "--max-kv-size: fs-chat carries the conversation's exact K/V from turn to turn, which a sliding window "
            "would cut; bound a long chat with /reset, or use fs-generate --max-kv-size for one long answer"
        )
    model, tok = load_from_args(args)
    sampling = sampling_from_args(args) | speculation_from_args(args, model, tok)
    chat = ChatSession(model, tok, system=args.system, enable_thinking=args.enable_thinking,
                       max_new_tokens=token_budget(args.max_tokens, model), **sampling)  # fmt: skip
    out = sys.stdout
    print(f"[fs-chat] {args.model or 'the demo model'}. /help for commands, /quit or Ctrl-D to leave.", file=out)
    while True:
        try:
            line = _read_line(">> ", out)
        except EOFError:
            print(file=out)
            return 0
        except UnicodeDecodeError as e:  # one bad line (a pasted Latin-1 file) must not end the conversation
            print(f"error: that line is not valid UTF-8 (byte {e.start}); nothing was sent - type it again", file=out)
            continue
        except KeyboardInterrupt:
            print("\n(Ctrl-D or /quit to leave)", file=out)
            continue
        if not line.strip():
            continue
        if line.startswith("/"):
            if _command(chat, line.strip(), out):
                return 0
            continue
        _answer(chat, line, out, args.verbose)


def _read_line(prompt: str, out: TextIO) -> str:
    """``input()``, except that Ctrl-C interrupts it: the kernels' worker threads may take the SIGINT, leaving the
    main thread blocked in ``read``; polling with a timeout lets Python run the handler (KeyboardInterrupt)."""
    out.write(prompt)
    out.flush()
    if sys.stdin.isatty():
        while not select.select([sys.stdin], [], [], 0.1)[0]:
            pass
    stream = getattr(sys.stdin, "buffer", None)  # bytes, so a line that is not UTF-8 is refused alone
    raw = stream.readline() if stream is not None else sys.stdin.readline().encode("utf-8", "surrogateescape")
    if not raw:
        raise EOFError
    return raw.decode("utf-8").rstrip("\n")


def _answer(chat: ChatSession, text: str, out: TextIO, verbose: bool) -> None:
    stopped = False
    try:
        for step in chat.ask(text):
            out.write(step.text)
            out.flush()
    except KeyboardInterrupt:
        stopped = True
    except GenerateError as e:  # the conversation outgrew the context: say so, keep the session
        print(f"error: {e} (/reset starts over)", file=out)
        return
    print("\n[stopped]" if stopped else "", file=out)
    if verbose:
        r = chat.last
        drafts = f", {r.accepted_tokens} of {r.drafted_tokens} drafts accepted" if r.drafted_tokens else ""
        print(f"[{chat.reused} tokens reused, {chat.prefilled} prefilled, {len(r.token_ids)} generated{drafts}, "
              f"{r.generation_tps:.1f} tokens-per-sec]", file=out)  # fmt: skip


def _command(chat: ChatSession, line: str, out: TextIO) -> bool:
    """Run one /command; True to leave."""
    name, _, rest = line.partition(" ")
    rest = rest.strip()
    if name in ("/quit", "/exit", "/q"):
        return True
    if name == "/reset":
        chat.reset(chat.system)
        print("[conversation reset]", file=out)
    elif name == "/system":
        chat.reset(rest or None)
        print(f"[system prompt {'set' if rest else 'cleared'}; conversation reset]", file=out)
    elif name == "/think" and rest in ("on", "off"):
        chat.enable_thinking = rest == "on"
        print(f"[thinking {rest}]", file=out)
    elif name == "/save" and rest:
        try:
            write_atomic(rest, json.dumps({"messages": chat.messages}, ensure_ascii=False, indent=2) + "\n")
        except OSError as e:
            print(f"error: cannot write {rest}: {e.strerror}", file=out)
        except WeightsError as e:  # the target exists and is not a regular file (a device, a FIFO)
            print(f"error: {e}", file=out)
        else:
            print(f"[saved {len(chat.messages)} messages to {rest}]", file=out)
    elif name == "/help":
        print(HELP, file=out)
    elif name in COMMANDS:  # a known command with a missing or bad argument
        print(f"{line!r}: not a form this command takes (nothing was done)\n{HELP}", file=out)
    else:  # a typo must not look like a command that ran, nor go to the model
        print(f"unknown command {name!r} (nothing was sent to the model)\n{HELP}", file=out)
    return False


if __name__ == "__main__":
    sys.exit(main())
