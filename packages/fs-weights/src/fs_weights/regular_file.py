"""Opening the files fs reads: regular files only, and bounded in size where the whole file is read.

A FIFO named ``grammar.lark`` (or ``x.gguf``) blocks ``open`` forever, and ``/dev/zero`` never ends; neither is a
file anyone means to hand fs. ``open_regular`` opens with ``O_NONBLOCK`` - a FIFO then opens at once - and refuses
whatever ``fstat`` says is not a regular file, so there is no window between checking and opening. Every file flag
and every file a checkpoint names goes through here.
"""

import os
import stat

from .errors import WeightsError

MAX_TEXT_BYTES = 256 * 2**20  # a JSON, grammar or schema file read whole; tokenizer.json is ~11 MiB


def open_regular(path: str | os.PathLike[str], error: type[Exception] = WeightsError) -> tuple[int, int]:
    """(file descriptor, size) of ``path``, opened read-only; ``error`` naming it if it is missing, unreadable or
    not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise error(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO, device or socket"
        raise error(f"{path}: is {kind}, not a regular file")
    return fd, st.st_size


def read_regular(
    path: str | os.PathLike[str], error: type[Exception] = WeightsError, limit: int = MAX_TEXT_BYTES
) -> bytes:
    """The bytes of regular file ``path``, refused beyond ``limit`` bytes."""
    fd, size = open_regular(path, error)
    with os.fdopen(fd, "rb") as f:
        if size > limit:
            raise error(f"{path}: {size} bytes; files read whole are limited to {limit} bytes")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise error(f"{path}: grew past {limit} bytes while it was read")
    return data
