"""Task packages: a task.json, a workspace to stage and held-out checks.json the model never sees (the
"evaluation packages" of docs/agent.md; evaluation.py judges one run). ``grade_package`` stages a copy, runs an agent
on it, freezes it, and grades observable facts only."""

import ast
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fs_weights.jsonfile import check_depth

ID_RE = re.compile(r"[a-z0-9_-]{1,128}")
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CHECK_FIELDS = {
    "path_exists": set(),
    "path_absent": set(),
    "unchanged": set(),
    "text_equals": {"expected"},
    "json_value": {"pointer", "expected"},
    "python_constant": {"constant", "expected"},
}


class PackageError(ValueError):
    """An invalid evaluation package (status ``error``, exit code 2)."""


def _strict_json(path: Path) -> Any:
    def no_dupes(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise PackageError(f"{path.name}: duplicate keys")
        return dict(pairs)

    def no_constants(name: str) -> Any:
        raise PackageError(f"{path.name}: non-finite number {name}")

    try:
        value = json.loads(path.read_bytes().decode("utf-8"), object_pairs_hook=no_dupes, parse_constant=no_constants)
    except RecursionError:
        raise PackageError(f"{path.name}: JSON nested too deeply") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PackageError(f"{path.name}: not strict UTF-8 JSON: {e}") from None
    check_depth(value, path.name, PackageError)
    return value


def _rel(raw: Any, what: str) -> str:
    if (
        not isinstance(raw, str)
        or not raw
        or raw != str(PurePosixPath(raw))
        or raw.startswith("/")
        or ".." in PurePosixPath(raw).parts
        or raw == "."
    ):
        raise PackageError(f"{what}: {raw!r} is not a normalized relative posix path")
    return raw


@dataclass(frozen=True)
class Package:
    root: Path
    task: dict[str, Any]
    checks: list[dict[str, Any]]


def load_package(root: str | Path) -> Package:
    root = Path(root)
    if not root.is_dir() or root.is_symlink():
        raise PackageError(f"{root}: not a package directory")
    top = sorted(p.name for p in root.iterdir())
    if top != ["held_out_tests", "task.json", "workspace"]:
        raise PackageError(f"{root}: top level must be exactly task.json, workspace/, held_out_tests/ (found {top})")
    for p in root.rglob("*"):
        if p.is_symlink() or p.name == ".git" or (p.is_file() and p.stat().st_nlink > 1):
            raise PackageError(f"{p}: symlinks, hard links and .git are not allowed in a package")
    task = _strict_json(root / "task.json")
    if not isinstance(task, dict) or set(task) != {"schema_version", "id", "prompt", "max_steps", "editable_paths"}:
        raise PackageError("task.json: keys must be exactly schema_version, id, prompt, max_steps, editable_paths")
    if task["schema_version"] != 1 or type(task["schema_version"]) is not int:
        raise PackageError("task.json: schema_version must be 1")
    if not isinstance(task["id"], str) or not ID_RE.fullmatch(task["id"]):
        raise PackageError("task.json: id must match [a-z0-9_-]{1,128}")
    if not isinstance(task["prompt"], str) or not task["prompt"].strip():
        raise PackageError("task.json: prompt must be a non-blank string")
    if type(task["max_steps"]) is not int or not 1 <= task["max_steps"] <= 1000:
        raise PackageError("task.json: max_steps must be an int in 1..1000")
    paths = task["editable_paths"]
    if not isinstance(paths, list) or not paths:
        raise PackageError("task.json: editable_paths must be a non-empty list")
    norm = [_rel(p, "editable_paths") for p in paths]
    if len(set(norm)) != len(norm) or any(a != b and b.startswith(a + "/") for a in norm for b in norm):
        raise PackageError("task.json: editable_paths must be unique and non-overlapping")
    if sorted(p.name for p in (root / "held_out_tests").iterdir()) != ["checks.json"]:
        raise PackageError("held_out_tests/ must hold exactly checks.json")
    data = _strict_json(root / "held_out_tests" / "checks.json")
    if not isinstance(data, dict) or set(data) != {"schema_version", "checks"} or data["schema_version"] != 1:
        raise PackageError("checks.json: must be exactly {schema_version: 1, checks: [...]}")
    checks = data["checks"]
    if not isinstance(checks, list) or not 1 <= len(checks) <= 256:
        raise PackageError("checks.json: checks must be a list of 1..256 objects")
    names = set()
    for c in checks:
        if not isinstance(c, dict) or c.get("type") not in CHECK_FIELDS:
            raise PackageError(f"checks.json: unknown check {c!r}")
        want = {"type", "name", "path"} | CHECK_FIELDS[c["type"]]
        if set(c) != want:
            raise PackageError(f"checks.json: check {c.get('name')!r} must have exactly {sorted(want)}")
        if not isinstance(c["name"], str) or not c["name"].strip() or c["name"] in names:
            raise PackageError(f"checks.json: check names must be unique and non-blank ({c['name']!r})")
        names.add(c["name"])
        _rel(c["path"], f"check {c['name']}")
        if c["type"] == "text_equals" and not isinstance(c["expected"], str):
            raise PackageError(f"checks.json: {c['name']}: expected must be a string")
        if c["type"] == "json_value" and (
            not isinstance(c["pointer"], str) or (c["pointer"] and not c["pointer"].startswith("/"))
        ):
            raise PackageError(f"checks.json: {c['name']}: pointer must be an RFC 6901 JSON pointer")
        if c["type"] == "python_constant" and (
            not isinstance(c["constant"], str) or not IDENT_RE.fullmatch(c["constant"])
        ):
            raise PackageError(f"checks.json: {c['name']}: constant must be an identifier")
    return Package(root, task, checks)


def _pointer(doc: Any, pointer: str) -> Any:
    for raw in pointer.split("/")[1:] if pointer else []:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, list):
            if not key.isdigit() or int(key) >= len(doc):
                raise KeyError(pointer)
            doc = doc[int(key)]
        elif isinstance(doc, dict) and key in doc:
            doc = doc[key]
        else:
            raise KeyError(pointer)
    return doc


def _python_constant(source: str, name: str) -> Any:
    """The value of exactly one top-level ``NAME = <JSON-like literal>``; the module is never imported."""
    tree = ast.parse(source)
    hits = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name)
        and n.targets[0].id == name
    ]
    if len(hits) != 1:
        raise ValueError(f"expected exactly one top-level assignment to {name}, found {len(hits)}")
    return ast.literal_eval(hits[0].value)


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_check(c: dict[str, Any], staged: Path, original: dict[str, bytes]) -> tuple[bool, str]:
    p = staged / c["path"]
    try:
        if c["type"] == "path_exists":
            return p.exists(), "exists" if p.exists() else "missing"
        if c["type"] == "path_absent":
            return not p.exists(), "absent" if not p.exists() else "present"
        if c["type"] == "unchanged":
            same = p.is_file() and original.get(c["path"]) == p.read_bytes()
            return same, "unchanged" if same else "changed"
        text = p.read_bytes().decode("utf-8")
        if c["type"] == "text_equals":
            return text == c["expected"], "text matches" if text == c["expected"] else "text differs"
        value = (
            _pointer(json.loads(text), c["pointer"])
            if c["type"] == "json_value"
            else _python_constant(text, c["constant"])
        )
        ok = _json_equal(value, c["expected"])
        return ok, f"value {json.dumps(value)}"
    except (OSError, UnicodeDecodeError, ValueError, KeyError, SyntaxError, RecursionError, MemoryError) as e:
        return False, f"unavailable: {type(e).__name__}: {e}"


EVALS = Path(__file__).parent / "evals"  # the packages shipped in the wheel (fs-agent eval NAME)


def shipped_eval(name: str) -> Path | None:
    """The shipped evaluation package called ``name``, if there is one."""
    d = EVALS / name
    return d if "/" not in name and name not in ("", ".", "..") and (d / "task.json").is_file() else None


def grade_package(package_dir: str | Path, agent: Callable[[Path, str, int], Any] | None = None) -> dict[str, Any]:
    """Stage ``workspace/``, call ``agent(staged_root, prompt, max_steps)`` (None: the untouched baseline), freeze,
    grade. Returns ``{"id", "status": passed|failed, "checks": [...], "forbidden_modifications": [...]}``."""
    pkg = load_package(package_dir)
    with tempfile.TemporaryDirectory(prefix=f"fs-eval-{pkg.task['id']}-") as tmp:
        staged = Path(tmp) / "workspace"
        shutil.copytree(pkg.root / "workspace", staged)
        original = _snapshot(staged)
        if agent is not None:
            agent(staged, pkg.task["prompt"], pkg.task["max_steps"])
        after = _snapshot(staged)
        changed = sorted(k for k in original.keys() | after.keys() if original.get(k) != after.get(k))
        editable = pkg.task["editable_paths"]
        forbidden = [k for k in changed if not any(k == e or k.startswith(e + "/") for e in editable)]
        results = [
            {
                "name": c["name"],
                "type": c["type"],
                **dict(zip(("passed", "detail"), run_check(c, staged, original), strict=True)),
            }
            for c in pkg.checks
        ]
    status = "passed" if not forbidden and all(r["passed"] for r in results) else "failed"
    return {
        "id": pkg.task["id"],
        "status": status,
        "checks": results,
        "forbidden_modifications": forbidden,
        "changed": changed,
    }
