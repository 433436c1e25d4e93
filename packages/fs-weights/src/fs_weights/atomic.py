"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

The bytes go to a temporary file beside the target (same filesystem, so ``os.replace`` is one rename), which
gets the permissions an ordinary ``open(path, "w")`` would have had - ``mkstemp`` alone creates 0600.

What may be replaced: nothing but a regular file (or a link to one). ``os.replace`` onto ``/dev/full`` or a FIFO
would swap the device node for a plain file - as root, ``--out /dev/null`` would break the system - so a target
that exists and is anything else is refused before a byte is written. Every writer in fs goes through here (or,
in fs-kvcache, which depends on no other fs package, through the same rule in ``prompt_cache``).
"""

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import WeightsError


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_replaceable(path: str | os.PathLike[str], error: type[Exception] = WeightsError) -> None:
    """Refuse ``path`` if it exists and is not a regular file (a device, FIFO, socket or directory)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as e:
        raise error(f"{path}: cannot write: {getattr(e, 'strerror', None) or e}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
        raise error(f"{path}: exists and is {kind}, not a regular file; fs replaces only regular files")


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike[str], *, mode: int = 0o666, durable: bool = False, error: type[Exception] = WeightsError
) -> Iterator[BinaryIO]:
    """A binary file to write; on a clean exit it replaces ``path`` in one rename (after an fsync if ``durable``),
    on an exception it is removed and ``path`` is untouched."""
    target = Path(path)
    check_replaceable(target, error)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode & ~current_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike[str], data: bytes | str, error: type[Exception] = WeightsError) -> None:
    with atomic_output(path, error=error) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
