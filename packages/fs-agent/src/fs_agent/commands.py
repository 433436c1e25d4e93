"""Running one allowed command: an explicit environment, its own session, and nothing of it left behind.

A command inherits nothing by accident. Its environment is ``PATH`` (the operator's), ``HOME`` (the workspace
root: tools that write dotfiles write them there) and ``LANG=C.UTF-8``; any other variable only when the operator
names it (``--pass-env NAME``), so a secret in the operator's shell is not visible to it. It starts a new session,
so it and every process it spawns share one process group; when it ends, or its time runs out, the whole group is
killed, and a ``sh -c "sleep 777 &"`` grandchild does not outlive it. Output (stdout, then stderr) is decoded as
UTF-8 with replacement characters.
"""

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from .protocol import AgentError

BASE_ENV = ("PATH", "HOME", "LANG")


def command_env(root: Path, pass_env: Sequence[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    env = {"PATH": environ.get("PATH", os.defpath), "HOME": str(root), "LANG": "C.UTF-8"}
    env.update({name: environ[name] for name in pass_env if name in environ})
    return env


def run_confined(argv: Sequence[str], root: Path, timeout: float, env: dict[str, str]) -> tuple[str, str]:
    """(status, output): status is the exit code as text, or ``timeout``. Runs through ``subprocess.run`` (the
    seam the agent's tests replace); the child reports its pid, which is its process group, through a pipe, so
    the group can be killed whatever ``run`` returned or raised."""
    r, w = os.pipe()

    def note_pid() -> None:  # in the child, between fork and exec: a new session, so pid == process group
        os.write(w, str(os.getpid()).encode())

    try:
        done = subprocess.run(
            list(argv),
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
            start_new_session=True,
            preexec_fn=note_pid,
        )
        status, output = str(done.returncode), text(done.stdout) + text(done.stderr)
    except subprocess.TimeoutExpired as e:
        status, output = "timeout", text(e.stdout) + text(e.stderr)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        raise AgentError(f"could not run command: {e}") from None
    finally:
        os.close(w)
        pid = os.read(r, 32)
        os.close(r)
        if pid:
            kill_group(int(pid))  # whatever the command left running in its session goes with it
    return status, output


def text(x: bytes | str | None) -> str:
    return x.decode("utf-8", errors="replace") if isinstance(x, bytes) else (x or "")


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
