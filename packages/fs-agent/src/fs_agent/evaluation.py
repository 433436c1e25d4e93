"""Judge a run by what can be observed - the final answer, file bytes, tool results and receipts."""

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from .loop import AgentRun
from .protocol import AgentError, ToolAction
from .receipts import ReceiptStore
from .workspace import Workspace


def _norm_path(raw: Any, what: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"{what} path must not be blank")
    p = PurePosixPath(raw)
    if p.is_absolute() or ".." in p.parts or "\0" in raw or str(p) == ".":
        raise ValueError(f"{what} path must be a relative file path")
    return str(p)


@dataclass(frozen=True)
class FileExpectation:
    path: str
    content: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", _norm_path(self.path, "file"))
        if not isinstance(self.content, str):
            raise ValueError("file content must be a string")


@dataclass(frozen=True)
class ResultExpectation:
    tool: str
    contains: str

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool.strip():
            raise ValueError("result tool must not be blank")
        if not isinstance(self.contains, str) or not self.contains.strip():
            raise ValueError("result substring must not be blank")


@dataclass(frozen=True)
class ReceiptExpectation:
    tool_call_id: str
    tool: str
    exit_state: str
    result_contains: str
    changed_artifacts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for value, name in (
            (self.tool_call_id, "receipt call id"),
            (self.tool, "receipt tool"),
            (self.result_contains, "receipt result substring"),
        ):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must not be blank")
        if self.exit_state not in ("ok", "error"):
            raise ValueError("receipt exit_state must be 'ok' or 'error'")
        if not isinstance(self.changed_artifacts, tuple):
            raise ValueError("receipt changed_artifacts must be a tuple")
        object.__setattr__(
            self, "changed_artifacts", tuple(_norm_path(a, "changed artifact") for a in self.changed_artifacts)
        )


@dataclass(frozen=True)
class EvaluationCase:
    final_contains: str | None  # None: the run need not end with a final answer (the other expectations grade it)
    files: tuple[FileExpectation, ...] = ()
    results: tuple[ResultExpectation, ...] = ()
    receipts: tuple[ReceiptExpectation, ...] = ()

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        final = self.final_contains
        if final is not None and (not isinstance(final, str) or not final.strip()):
            raise ValueError("final substring must not be blank")
        if self.final_contains is None and not (self.files or self.results or self.receipts):
            raise ValueError("an evaluation case must expect something: final_contains, files, results or receipts")
        for group, kind in (
            ("files", FileExpectation),
            ("results", ResultExpectation),
            ("receipts", ReceiptExpectation),
        ):
            value = getattr(self, group)
            if not isinstance(value, tuple) or not all(isinstance(x, kind) for x in value):
                raise ValueError(f"evaluation {group} must be a tuple of expectations")
        if len({f.path for f in self.files}) != len(self.files):
            raise ValueError("evaluation file paths must be unique")
        if len({r.tool_call_id for r in self.receipts}) != len(self.receipts):
            raise ValueError("evaluation receipt call ids must be unique")


@dataclass(frozen=True)
class EvaluationCheck:
    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class EvaluationReport:
    checks: tuple[EvaluationCheck, ...]

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def render(self) -> str:
        lines = [f"evaluation: {'PASS' if self.passed else 'FAIL'}"]
        lines += [f"- {c.name}: {'PASS' if c.passed else 'FAIL'} ({c.detail})" for c in self.checks]
        return "\n".join(lines)


def evaluate_run(run: AgentRun, workspace: Workspace, receipts: ReceiptStore, case: EvaluationCase) -> EvaluationReport:
    if not isinstance(run, AgentRun):
        raise ValueError("run must be an AgentRun")
    if not isinstance(workspace, Workspace):
        raise ValueError("workspace must be a Workspace")
    if not isinstance(receipts, ReceiptStore):
        raise ValueError("receipts must be a ReceiptStore")
    if not isinstance(case, EvaluationCase):
        raise ValueError("case must be an EvaluationCase")
    case.validate()
    checks = []
    if case.final_contains is not None:
        ok = run.completed and run.final is not None and case.final_contains in run.final
        checks.append(EvaluationCheck("final", ok, "required final observed" if ok else "required final not observed"))
    for f in case.files:
        try:
            data = workspace.file_bytes(f.path).decode("utf-8")
            same = data == f.content
            checks.append(
                EvaluationCheck(f"file:{f.path}", same, "content matches" if same else "content does not match")
            )
        except (AgentError, OSError, UnicodeDecodeError) as e:
            checks.append(EvaluationCheck(f"file:{f.path}", False, f"evidence unavailable: {e}"))
    for r in case.results:
        seen = any(
            isinstance(e.action, ToolAction)
            and e.action.tool == r.tool
            and isinstance(e.result, str)
            and r.contains in e.result
            for e in run.events
        )
        checks.append(
            EvaluationCheck(
                f"result:{r.tool}", seen, "required result observed" if seen else "required result not observed"
            )
        )
    store: ReceiptStore | None = receipts
    load_error = None
    if receipts.path is not None:
        try:
            store = ReceiptStore(receipts.path)
        except (AgentError, OSError, UnicodeError) as e:
            store, load_error = None, e
    for exp in case.receipts:
        name = f"receipt:{exp.tool_call_id}"
        if store is None:
            checks.append(EvaluationCheck(name, False, f"receipt evidence unavailable: {load_error}"))
            continue
        try:
            got = store.get(exp.tool_call_id)
        except (AgentError, OSError) as e:
            checks.append(EvaluationCheck(name, False, f"receipt lookup failed: {e}"))
            continue
        if got is None:
            checks.append(EvaluationCheck(name, False, "receipt is absent"))
            continue
        match = (
            got.tool == exp.tool
            and got.exit_state == exp.exit_state
            and exp.result_contains in got.result
            and tuple(got.changed_artifacts) == exp.changed_artifacts
        )
        checks.append(EvaluationCheck(name, match, "receipt facts match" if match else "receipt facts do not match"))
    return EvaluationReport(tuple(checks))
