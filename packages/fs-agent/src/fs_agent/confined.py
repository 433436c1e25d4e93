"""File access that cannot leave the workspace: every path is opened one component at a time, relative to a
directory file descriptor, with ``O_NOFOLLOW`` at every step.

Checking a path and then using it is a race: between ``resolve()`` and ``open()`` another process can swap a
subdirectory for a symlink to ``/`` (one atomic ``rename``). Here there is no separate check: ``open_dir`` walks
``("src", "pkg")`` as ``openat(root_fd, "src")`` then ``openat(src_fd, "pkg")``, each refusing a symlink, so the
directory finally used *is* the one inside the root, whatever the names point at a moment later. Files are refused
unless regular and singly linked (``st_nlink == 1``: a hard link inside the root to an outside file would otherwise be
readable). Writes are staged in ``.fs-agent/staged/`` at the root (a protected name) and renamed into place through
the held directory descriptors.
"""

import contextlib
import errno
import os
import stat
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .protocol import AgentError

STATE_DIR = ".fs-agent"  # at the workspace root: staged writes and (by default) the receipt log; never visible
STAGED = "staged"
O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO must not hang the read


class Missing(AgentError):
    """A component of the path does not exist."""


class ConfinedRoot:
    """The workspace root held open; ``parts`` are already-validated path components below it."""

    def __init__(self, root: Path):
        self.root = root
        try:
            self.fd = os.open(root, O_DIR)
        except OSError as e:
            raise AgentError(f"cannot open workspace root: {e.strerror}") from None
        self._closer = weakref.finalize(self, os.close, self.fd)  # the descriptor lives as long as the workspace

    def close(self) -> None:
        self._closer()

    @contextmanager
    def directory(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory ``parts`` (the root for ``()``), closed on exit."""
        fd = os.dup(self.fd)
        try:
            for name in parts:
                try:
                    nfd = os.open(name, O_DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(name, 0o700, dir_fd=fd)
                    nfd = os.open(name, O_DIR, dir_fd=fd)
                except OSError as e:
                    raise _refusal(e, fd, name) from None
                os.close(fd)
                fd = nfd
            yield fd
        except FileNotFoundError:
            raise Missing("path is not accessible") from None
        finally:
            os.close(fd)

    def lstat(self, parts: tuple[str, ...]) -> os.stat_result | None:
        """The entry itself (a symlink is reported as one), or None when it does not exist."""
        if not parts:
            return os.fstat(self.fd)
        try:
            with self.directory(parts[:-1]) as d:
                return _lstat_at(d, parts[-1])
        except Missing:
            return None

    def read(self, parts: tuple[str, ...], limit: int) -> tuple[bytes, os.stat_result]:
        """The bytes of a regular, singly linked file of at most ``limit`` bytes, and its stat."""
        with self.directory(parts[:-1]) as d:
            try:
                fd = os.open(parts[-1], O_READ, dir_fd=d)
            except FileNotFoundError:
                raise Missing("path is not accessible") from None
            except OSError as e:
                raise _refusal(e, d, parts[-1]) from None
            try:
                st = os.fstat(fd)
                check_file(st)
                if st.st_size > limit:
                    raise AgentError(f"file exceeds {limit} bytes")
                chunks, size = [], 0
                while chunk := os.read(fd, limit + 1 - size):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        raise AgentError(f"file exceeds {limit} bytes")
                return b"".join(chunks), st
            finally:
                os.close(fd)

    def entries(self, parts: tuple[str, ...]) -> list[tuple[str, str]]:
        """(name, "file" | "dir") of the regular files and directories directly in ``parts``; symlinks and
        anything else left out."""
        with self.directory(parts) as d:
            out = []
            with os.scandir(d) as it:
                for e in it:
                    if e.is_symlink():
                        continue
                    kind = (
                        "dir" if e.is_dir(follow_symlinks=False) else "file" if e.is_file(follow_symlinks=False) else ""
                    )
                    if kind:
                        out.append((e.name, kind))
            return sorted(out)

    # --- staged writes ----------------------------------------------------------------------------------------

    def stage(self, key: str, data: bytes, mode: int) -> None:
        """Write ``data`` to ``.fs-agent/staged/<key>`` and flush it to disk; nothing visible changes yet."""
        with self.directory((STATE_DIR, STAGED), create=True) as d:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(key, dir_fd=d)
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)

    def publish(self, key: str, parts: tuple[str, ...]) -> None:
        """Atomically rename the staged ``key`` onto ``parts`` (through descriptors: no name is re-resolved)."""
        with self.directory((STATE_DIR, STAGED)) as src, self.directory(parts[:-1]) as dst:
            st = _lstat_at(dst, parts[-1])
            if st is not None:
                check_file(st)
            os.replace(key, parts[-1], src_dir_fd=src, dst_dir_fd=dst)
            os.fsync(dst)

    def staged(self) -> list[str]:
        try:
            with self.directory((STATE_DIR, STAGED)) as d:
                return sorted(os.listdir(d))
        except AgentError:
            return []

    def discard(self, key: str) -> None:
        with self.directory((STATE_DIR, STAGED)) as d, contextlib.suppress(FileNotFoundError):
            os.unlink(key, dir_fd=d)


def check_file(st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise AgentError("path is not a regular file")
    if st.st_nlink > 1:
        raise AgentError("hard-linked files are not accessible")


def _lstat_at(d: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=d, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _refusal(e: OSError, d: int, name: str) -> AgentError:
    """Name why ``openat(d, name)`` was refused: a symlink (now, whatever it was at check time) or not a directory."""
    st = _lstat_at(d, name)
    if e.errno == errno.ELOOP or (st is not None and stat.S_ISLNK(st.st_mode)):
        return AgentError("symlinks are not accessible")
    if e.errno == errno.ENOTDIR:
        return AgentError("path is not a directory")
    return AgentError(f"path is not accessible: {e.strerror}")
