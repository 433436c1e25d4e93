"""The docs' shell examples run as written: each ```sh block of a page, line by line in one temporary directory,
with this environment's console scripts and Python (what a reader pastes)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from fs_generate import load

DOCS = Path(__file__).resolve().parents[3] / "docs"


def run_blocks(page: str, cwd: Path) -> list[str]:
    """Every ```sh block of docs/``page``, in order; -> the commands run (a failing one fails with its output)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            cmd = line.split("  #")[0].strip()
            if not cmd:
                continue
            cmd = re.sub(r"^python ", f"{sys.executable} ", cmd)
            r = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"docs/{page}: `{line}` exited {r.returncode}:\n{r.stdout}{r.stderr}"
            ran.append(cmd)
    return ran


def test_the_lora_example_in_weights_md_runs_and_says_what_it_shows(tmp_path):
    ran = run_blocks("weights.md", tmp_path)
    assert any("--adapter-path" in c for c in ran) and any(c.startswith("fs-weights fuse") for c in ran)
    fused, _ = load(str(tmp_path / "fused"))
    adapted, _ = load(str(tmp_path / "base"), adapter_path=str(tmp_path / "adapters"))
    ids = [5, 17, 99, 3]
    assert np.array_equal(fused.forward(ids), adapted.forward(ids))  # "loads to the same bits"
