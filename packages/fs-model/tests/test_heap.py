"""glibc keeps a prompt's freed activations (cpu/heap.py): the pages a layer frees are the next layer's, not new
page faults. Each case runs in a fresh process, since the setting is per process and never undone."""

import subprocess
import sys

import pytest

PAGES = 16 * (2 << 20) // 4096  # a layer's worth of blocks: 16 of 2 MiB (under numpy's huge-page size)

SCRIPT = """
import resource, sys
import numpy as np
from fs_model.cpu import heap
if sys.argv[1] == "keep":
    assert heap.keep_freed_memory()
def layer():
    blocks = [np.empty(1 << 19, np.float32) for _ in range(16)]  # 2 MiB each, as a compiled half allocates
    for b in blocks:
        b.fill(1.0)  # touch every page
for _ in range(2):
    layer()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
layer()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    env = {"FS_KEEP_HEAP": "0", "PATH": "", "HF_HUB_OFFLINE": "1"}  # the import must not set it already
    run = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    return int(run.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux); elsewhere nothing is set")
def test_a_layers_freed_blocks_are_reused_without_page_faults():
    default = faults("default")
    if default < PAGES // 2:
        gone = f"glibc's defaults no longer fault a freed layer's pages back in ({default} faults, {PAGES} pages)"
        pytest.fail(f"{gone}: cpu/heap.py's reason may be gone - measure a prefill with FS_KEEP_HEAP=0 and revisit")
    assert faults("keep") < PAGES // 20, "the freed blocks went back to the kernel: heap.keep_freed_memory not applied"
