"""Ctrl-C while an fs command is still importing its dependencies (numpy, numba, mlx: up to a second) ends
quietly with exit 130, like a Ctrl-C anywhere later (``command_line.run_main``, which calls ``restore``).

Imported first by ``fs_weights/__init__.py``, so it is in place before any heavy import of fs-weights, fs-model,
fs-generate or fs-agent runs (their ``__init__`` imports ``fs_weights`` first). It only acts inside fs's own
command lines (``sys.argv[0]`` is one of ``COMMANDS``, or ``-m`` while ``python -m fs_x.cli`` imports): a program
that merely imports the library keeps Python's usual ``KeyboardInterrupt``.
"""

import os
import signal
import sys

COMMANDS = frozenset(
    {"fs-weights", "fs-model", "fs-generate", "fs-cache-prompt", "fs-chat", "fs-bench", "fs-agent", "fs-serve"}
)


def install(commands: frozenset[str] = COMMANDS) -> None:
    """Until the command's ``run_main`` takes over (it restores Python's handler), SIGINT exits at once: an
    exception would not do, because C extensions turn a KeyboardInterrupt inside their import into an ImportError."""
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    if name in commands or name == "-m":
        signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))


def restore() -> None:
    """Back to KeyboardInterrupt, for the command body (``run_main`` catches it and returns 130)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


install()
