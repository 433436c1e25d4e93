"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

The bytes go to a temporary file beside the target (same filesystem, so ``os.replace`` is one rename), which
gets the permissions an ordinary ``open(path, "w")`` would have had - ``mkstemp`` alone creates 0600.
"""

import os
import tempfile
from pathlib import Path


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
