"""The one line a user reads while the CPU kernels compile, instead of silence.

numba compiles a kernel the first time it is called with a new signature and caches the machine code on disk, so
only a first run on a machine (or after an upgrade) waits. numba's ``numba:compile`` event fires exactly then - on
a cache miss, never on a cache hit - so the first time it fires for one of fs-model's kernels in a process, one
line goes to stderr naming what compiles:

    fs-model: compiling CPU kernels for bf16 weights (first run only, ~5-40 s; cached afterwards)

The format is what the model builder said it is building (``expect``, fs_model/numpy/build.py); ``quiet()`` is the
CLIs' ``--quiet``. Nothing is printed when every kernel comes from the cache.
"""

import sys
from typing import Any

from . import HAVE_NUMBA

# measured (benchmarks/cold_start.py): a bf16 model's first-run kernels take 5 s on a 2-core Zen 5, ~40 s on a
# slower 2-core AVX2 host; the quantized formats compile a few kernels more
ESTIMATE = "~5-40 s"


class _State:
    label = "CPU kernels"
    said = False
    quiet = False


_state = _State()


def expect(label: str) -> None:
    """The weights the next compiles are for (e.g. "bf16 weights"), named in the line."""
    _state.label = label


def quiet(on: bool = True) -> None:
    """No line (``--quiet``)."""
    _state.quiet = on


def _on_compile(dispatcher: Any) -> None:
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
    if _state.said or _state.quiet or not module.startswith("fs_model"):
        return
    _state.said = True
    print(
        f"fs-model: compiling CPU kernels for {_state.label} (first run only, {ESTIMATE}; cached afterwards)",
        file=sys.stderr,
        flush=True,
    )


if HAVE_NUMBA:
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            _on_compile((ev.data or {}).get("dispatcher"))

        def on_end(self, ev: Any) -> None:
            pass

    event.register("numba:compile", _Listener())
