"""The top-level handler every fs command line runs under (fs-weights, fs-model, fs-generate, fs-agent).

A user of a command line should see one of four endings, never a Python traceback:

| what happened                          | stderr                                            | exit |
|----------------------------------------|---------------------------------------------------|------|
| a known error (bad file, bad flag)     | ``prog: error: <what, which file/key>``           | 2    |
| the reader went away (``| head -c1``)  | nothing                                           | 0    |
| Ctrl-C, at any moment                  | nothing                                           | 130  |
| a bug (any other exception)            | ``prog: internal error: ...`` + the trace file    | 1    |

Output streams are switched to ``backslashreplace`` first, so a tensor or file name holding a lone surrogate prints
as ``\\udc80`` instead of dying inside ``print``. fs-tokenizer (a layer-0 package that cannot import this one) has
its own copy of these ten lines in ``fs_tokenizer/cli.py``.
"""

import contextlib
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from . import interrupts

KNOWN_EXIT, BUG_EXIT, INTERRUPT_EXIT = 2, 1, 130


def run_main(prog: str, body: Callable[[], int], known: tuple[type[BaseException], ...]) -> int:
    """Run ``body`` (the parsed command) and turn every way it can end into the table above."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:  # Python's handler back only inside the try: a Ctrl-C between the two would escape as a bare SIGINT death
        interrupts.restore()
        code = body()
        interrupts.check()  # a Ctrl-C the body never saw (it came during a finalizer) still ends with 130
        return code
    except KeyboardInterrupt:
        return interrupts.exit_interrupted(INTERRUPT_EXIT)
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except known as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return KNOWN_EXIT
    except Exception as e:
        where = _write_trace(prog)
        print(f"{prog}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        print(f"{prog}: the full traceback is in {where}; please report it", file=sys.stderr)
        return BUG_EXIT


def _silence_stdout() -> None:
    """Python flushes stdout again at exit; point it at /dev/null so that flush cannot raise a second time."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _write_trace(prog: str) -> str:
    fd, path = tempfile.mkstemp(prefix=f"{prog}-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(f"{prog} {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}")
    return path


def _number(kind: type, test: Callable[[float], bool], what: str) -> Callable[[str], float]:
    import argparse
    import math

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (math.isfinite(value) and test(value)):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what  # argparse names the type in its message
    return parse


# argparse ``type=`` converters: a bad value is argparse's usual "prog: error: argument --x: ..." (exit 2)
non_negative_int = _number(int, lambda v: v >= 0, "a non-negative integer")
positive_int = _number(int, lambda v: v > 0, "a positive integer")
non_negative_float = _number(float, lambda v: v >= 0, "a finite non-negative number")
positive_float = _number(float, lambda v: v > 0, "a finite positive number")
unit_interval = _number(float, lambda v: 0 < v <= 1, "a number in (0, 1]")


def progress_bar(
    stream: Any, unit: str = "B", quiet: bool = False
) -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A tqdm bar for a ``progress(done, total)`` callback - bytes (loading, writing) or another ``unit`` (tokens
    prefilled) - with rate and ETA; and the function that closes it. No bar (``None``, a no-op close) when
    ``stream`` is not a terminal or ``quiet`` (``--quiet``): the one place that decides."""
    if quiet or not stream.isatty():
        return None, lambda: None
    from tqdm import tqdm

    bar: list[Any] = []

    def show(done: int, total: int) -> None:
        if not bar:
            scale = {"unit_scale": True, "unit_divisor": 1024} if unit == "B" else {}
            bar.append(tqdm(total=total, unit=unit, file=stream, leave=False, **scale))
        bar[0].update(done - bar[0].n)

    def close() -> None:
        if bar:
            bar[0].close()

    return show, close
