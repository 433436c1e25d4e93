"""``fs-weights inspect``: what is in a checkpoint, read from headers alone (no tensor bytes are touched)."""

import os
from pathlib import Path
from typing import Any

from .checkpoint import Checkpoint
from .config import Qwen3Config, load_config
from .crosscheck import cross_check
from .errors import WeightsError


def tensor_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    config: Qwen3Config | None = None
    if p.is_file() and p.suffix == ".gguf":  # a GGUF file carries its config: count and check as llama.cpp reads it
        from .gguf_file import open_gguf

        ckpt, cfg, _ = open_gguf(p)
        config = Qwen3Config.from_dict(cfg, source=str(p))
    else:
        ckpt = Checkpoint.open(p)
        model_dir = p if p.is_dir() else p.parent
        config = load_config(model_dir) if (model_dir / "config.json").exists() else None
    tensors = []
    for name in ckpt.names():
        t = ckpt.info(name)
        tensors.append({"name": name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.nbytes, "file": t.file.name})
    out: dict[str, Any] = {
        "path": str(p),
        "tensors": tensors,
        "tensor_count": len(tensors),
        "files": len(ckpt.files),
        "bytes": ckpt.nbytes,
        "stored_elements": sum(ckpt.info(n).numel for n in ckpt.names()),
    }
    if config is not None:  # the model's parameters at their logical shapes: a 4-bit 0.6B is 596M, not its words
        report = cross_check(config, ckpt)
        out |= {"parameters": report.parameters, "verdict": report.verdict, "cross_check": report.to_dict()}
    else:
        out |= {"parameters": out["stored_elements"], "verdict": "no config.json: not cross-checked"}
    return out


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise WeightsError("unreachable")


def format_table(report: dict[str, Any]) -> str:
    rows = [
        (t["name"], t["dtype"], "x".join(map(str, t["shape"])) or "scalar", human_bytes(t["bytes"]), t["file"])
        for t in report["tensors"]
    ]
    head = ("name", "dtype", "shape", "bytes", "file")
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    fmt = lambda r: "  ".join(c.ljust(w[i]) if i != 3 else c.rjust(w[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
    lines = [fmt(head), fmt(tuple("-" * x for x in w)), *map(fmt, rows), ""]
    lines.append(
        f"{report['tensor_count']} tensors in {report['files']} file(s), "
        f"{human_bytes(report['bytes'])} ({report['bytes']:,} bytes)"
    )
    lines.append(f"parameters: {report['parameters']:,} ({report['parameters'] / 1e6:.1f}M)")
    lines.append(f"cross-check: {report['verdict']}")
    for problem in report.get("cross_check", {}).get("problems", [])[:20]:
        lines.append(f"  {problem}")
    return "\n".join(lines)
