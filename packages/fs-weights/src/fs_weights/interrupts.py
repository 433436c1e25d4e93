"""Ctrl-C while an fs command is still importing its dependencies (numpy, numba, mlx: up to a second) ends
quietly with exit 130, like a Ctrl-C anywhere later (``command_line.run_main``, which calls ``restore``).

Imported first by ``fs_weights/__init__.py``, so it is in place before any heavy import of fs-weights, fs-model,
fs-generate or fs-agent runs (their ``__init__`` imports ``fs_weights`` first). It only acts inside fs's own
command lines (``sys.argv[0]`` is one of ``COMMANDS``, or ``-m`` while ``python -m fs_x.cli`` imports): a program
that merely imports the library keeps Python's usual ``KeyboardInterrupt``.
"""

import contextlib
import os
import signal
import sys
from types import FrameType

COMMANDS = frozenset(
    {"fs-weights", "fs-model", "fs-generate", "fs-cache-prompt", "fs-chat", "fs-bench", "fs-agent", "fs-serve"}
)


def _is_command(commands: frozenset[str] = COMMANDS) -> bool:
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    return name in commands or name == "-m"


def install(commands: frozenset[str] = COMMANDS) -> None:
    """Until the command's ``run_main`` takes over (it restores Python's handler), SIGINT exits at once: an
    exception would not do, because C extensions turn a KeyboardInterrupt inside their import into an ImportError."""
    if _is_command(commands):
        signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))


def exit_interrupted(code: int) -> int:
    """After a command caught its KeyboardInterrupt: flush the output and end the process with ``code`` now. Python's
    own exit after it (joining threads, finalizing modules, SIGINT back at its default action) is a window in which
    the process can still die by SIGINT instead of returning 130: it did twice in CI (rc -2, after the command had
    caught the Ctrl-C and ended its last line). Exiting here leaves no such window. Inside a program that called
    ``main()`` itself: just returns ``code``."""
    if not _is_command():
        return code
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing left to say
            stream.flush()
    os._exit(code)


_deferred = False  # a Ctrl-C that came while a finalizer ran (``_interrupt``), for ``check`` to raise


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT in the command body: KeyboardInterrupt, as Python's own handler - except while a finalizer runs
    (a ``__del__`` the garbage collector started at any bytecode: llvmlite and numba objects while the first step's
    kernels compile). Python prints an exception raised there as "Exception ignored" and drops it, so the Ctrl-C
    was lost: once in CI a command generated to the end and exited 0. There it is kept for ``check``."""
    global _deferred
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            _deferred = True
            return
        frame = frame.f_back
    raise KeyboardInterrupt


def check() -> None:
    """Raise a Ctrl-C that came during a finalizer (commands call it once per generated token; ``run_main`` after the
    body)."""
    global _deferred
    if _deferred:
        _deferred = False
        raise KeyboardInterrupt


def restore() -> None:
    """KeyboardInterrupt again, for the command body (``run_main`` catches it and returns 130), by ``_interrupt``."""
    signal.signal(signal.SIGINT, _interrupt)


install()
