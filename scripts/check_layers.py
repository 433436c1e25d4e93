"""Workspace invariants uv does not enforce (run by `nox -s lint`).

1. Every internal requirement points to a lower layer (dependencies point down).
2. Every internal requirement has a version bound, and that bound admits the member's current version.
3. Every `import fs_x` in a package's source is a declared dependency (or the package itself).
4. `__version__` in each package equals its pyproject version.
5. Each package page is complete: description, readme, license (+ its file), keywords, classifiers, console scripts
   that exist.
"""

import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LAYER = {
    "fs-tokenizer": 0,
    "fs-weights": 0,
    "fs-kvcache": 0,
    "fs-model": 1,
    "fs-generate": 2,
    "fs-agent": 3,
    "fs-serve": 3,
}


def main() -> int:
    projects = {
        p.name: tomllib.loads((p / "pyproject.toml").read_text())["project"]
        for p in sorted((ROOT / "packages").iterdir())
        if (p / "pyproject.toml").exists()
    }
    errors = []
    if set(projects) != set(LAYER):
        errors.append(f"packages/ holds {sorted(projects)}, the layer table names {sorted(LAYER)}")
    for name, proj in projects.items():
        reqs = list(proj.get("dependencies", []))
        reqs += [r for extra in proj.get("optional-dependencies", {}).values() for r in extra]
        declared = set()
        for r in map(Requirement, reqs):
            if r.name not in LAYER or r.name == name:
                continue
            declared.add(r.name)
            if LAYER[r.name] >= LAYER.get(name, -1):
                errors.append(f"{name} (layer {LAYER.get(name)}) depends on {r.name} (layer {LAYER[r.name]})")
            if not r.specifier:
                errors.append(f"{name}: requirement {r.name!r} has no version bound")
            elif not r.specifier.contains(projects[r.name]["version"], prereleases=True):
                errors.append(f"{name}: {r} does not admit {r.name} {projects[r.name]['version']}")
            elif not any(s.operator in ("<", "<=", "==", "~=") for s in r.specifier):
                errors.append(f"{name}: {r} has no upper bound")
        src = ROOT / "packages" / name / "src" / name.replace("-", "_")
        for f in src.rglob("*.py"):
            for m in re.finditer(r"^\s*(?:from|import)\s+(fs_[a-z]+)", f.read_text(), re.M):
                dep = m.group(1).replace("_", "-")
                if dep in LAYER and dep != name and dep not in declared:
                    errors.append(f"{f.relative_to(ROOT)} imports {m.group(1)}, which {name} does not declare")
        for key in ("description", "readme", "license", "license-files", "keywords", "classifiers"):
            if not proj.get(key):
                errors.append(f"{name}: pyproject [project] has no {key!r} (the package's PyPI page needs it)")
        if not (ROOT / "packages" / name / "LICENSE").is_file():
            errors.append(f"{name}: no LICENSE file beside its pyproject.toml")
        if "Typing :: Typed" not in proj.get("classifiers", []) or not (src / "py.typed").is_file():
            errors.append(f"{name}: ships typed code: needs py.typed and the 'Typing :: Typed' classifier")
        for script, target in proj.get("scripts", {}).items():
            module, _, func = target.partition(":")
            path = ROOT / "packages" / name / "src" / (module.replace(".", "/") + ".py")
            if not path.is_file() or not re.search(rf"^def {func}\(", path.read_text(), re.M):
                errors.append(f"{name}: console script {script} -> {target} does not exist")
        init = (src / "__init__.py").read_text()
        v = re.search(r'^__version__ = "([^"]+)"', init, re.M)
        if not v or v.group(1) != proj["version"]:
            errors.append(f"{name}: __version__ {v and v.group(1)!r} != pyproject version {proj['version']!r}")
    for e in errors:
        print(f"check_layers: {e}", file=sys.stderr)
    print(f"check_layers: {len(projects)} packages, {'OK' if not errors else f'{len(errors)} problem(s)'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
