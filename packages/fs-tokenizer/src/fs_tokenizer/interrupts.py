"""Ctrl-C while ``fs-tokenizer`` is still importing (regex, jinja2) ends quietly with exit 130, as a Ctrl-C
later does (``cli.run_main``). fs-weights carries the same guard for the other commands; this layer-0 package
cannot import it. Only inside the command line: a program importing the library keeps Python's traceback."""

import os
import signal
import sys


def install() -> None:
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    if name in ("fs-tokenizer", "-m"):
        signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))


install()
