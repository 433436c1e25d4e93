"""Sessions: tests (one isolated env per package), kernels, parity, slow, metal, ui, bench, lint, build,
publish_local, docs.

`uv run nox -s kernels tests parity lint` is what CI runs (README): kernels first, so that the numba kernels it
compiles for this host land in the on-disk cache (next to the sources, shared by every session's environment) before
the other sessions load the same kernels. Each session syncs an exact environment from the one uv.lock, so a
package's tests see only that package, its declared dependencies and the test tools.
"""

import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import nox

nox.needs_version = ">=2025.10.14"
nox.options.default_venv_backend = "uv"
nox.options.sessions = ["kernels", "tests", "parity", "lint"]

ROOT = Path(__file__).parent
PACKAGES = [
    "fs-tokenizer",
    "fs-weights",
    "fs-kvcache",
    "fs-model",
    "fs-generate",
    "fs-agent",
    "fs-serve",
]  # low to high
APPLE_SILICON = platform.system() == "Darwin" and platform.machine() == "arm64"
QUICK = "not parity and not slow and not metal and not kernels and not ui"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def sync(session: nox.Session, *args: str) -> None:
    session.run_install(
        "uv",
        "sync",
        "--locked",
        "--no-default-groups",
        *args,
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
    )


def pytest(session: nox.Session, *args: str, **env: str) -> None:
    session.run("python", "-m", "pytest", *args, *session.posargs, env=ENV | env)


# pytest-xdist workers for the sessions whose tests take long enough to pay for a second process (measured on 2
# cores: the fs-generate suite 90 s -> 64 s, the kernels tests from a cold cache 82 s -> 60 s; 2026-12-07, Zen 4:
# fs-tokenizer 16-19 s -> 12-16, fs-weights 15-17 -> 11-12, fs-agent 26-28 -> 21-24). Not fs-serve's, whose tests
# start servers that use both cores (58-64 s either way), nor fs-model's: 7-10 s in one process now that the kernels
# session runs first and leaves the numba cache full (before that it compiled them, and two workers compiled them
# twice: 28 s -> 31 s)
WORKERS = ["-n", "2"]
ONE_PROCESS = {"fs-model", "fs-serve"}
CLIENTS = {"fs-serve"}  # packages/fs-serve/tests/test_clients.py: the openai-agents, langchain, instructor, lm-eval


def test_dirs() -> list[str]:
    return [f"packages/{p}/tests" for p in PACKAGES if (ROOT / "packages" / p / "tests").is_dir()]


@nox.session(tags=["tests"])
@nox.parametrize("package", [nox.param(p, id=p, tags=[p]) for p in PACKAGES])
def tests(session: nox.Session, package: str) -> None:
    """One package's tests in an environment holding only it, its dependencies and the test tools (fs-serve's also
    the client libraries it is driven by: a missing one fails there, FS_REQUIRE_CLIENTS)."""
    clients = ("--group", "clients") if package in CLIENTS else ()
    sync(session, "--package", package, "--group", "test", *clients)
    env = {"FS_REQUIRE_CLIENTS": "1"} if package in CLIENTS else {}
    pytest(session, f"packages/{package}/tests", "-m", QUICK, *([] if package in ONE_PROCESS else WORKERS), **env)


@nox.session
def kernels(session: nox.Session) -> None:
    """The numba / LLVM IR CPU kernels themselves (fs-model with its [fast] extra: numba's absence fails), and the
    equality contracts generation builds on them (fs-generate: batch == solo, radix hit == cold, bit for bit); on
    an AVX-512 host all of it twice, the second time compiled for AVX2 (FS_ISA=avx2)."""
    sync(session, "--package", "fs-generate", "--extra", "fast", "--group", "test")
    args = ("packages/fs-model/tests", "packages/fs-generate/tests", "-m", "kernels and not slow", *WORKERS)
    pytest(session, *args, FS_REQUIRE_REFERENCE="1")
    if beyond_avx2():  # one AVX-512 host proves the AVX2 hosts' code paths too (fs_model.cpu: FS_ISA)
        once = [f"--ignore={f}" for f in ONE_ISA_IS_ENOUGH]
        pytest(session, *args, *once, FS_REQUIRE_REFERENCE="1", FS_ISA="avx2")


# kernels tests about *whether* kernels compile, not about what they compute, tests of what feeds the kernels
# (GGUF repacks, MoE routing) whose kernels' own per-ISA contracts test_tiles.py proves, and the engine's scheduler
# (random schedules, preemption: its equality rests on the per-ISA batch == solo of test_batch_invariance.py,
# test_paged_step.py and test_fast_kernel_contracts.py, which do run twice): no second run under FS_ISA=avx2
ONE_ISA_IS_ENOUGH = [
    "packages/fs-model/tests/test_compile_notice.py",
    "packages/fs-model/tests/test_moe.py",
    "packages/fs-generate/tests/test_moe_contracts.py",
    "packages/fs-generate/tests/test_gguf_kquants.py",
    "packages/fs-generate/tests/test_engine.py",
    "packages/fs-generate/tests/test_speculative.py",
    "packages/fs-generate/tests/test_draft_model.py",  # lossless iff the kernels are invariant: proven per ISA above
    # generation features on the same kernels (LoRA adapters, sampler hooks, a rotating window, kv_bits through
    # generate): their equalities rest on the per-ISA contracts above; fs-model's test_kv_bits.py runs twice
    "packages/fs-generate/tests/test_adapter_contracts.py",
    "packages/fs-generate/tests/test_user_hooks.py",
    "packages/fs-generate/tests/test_rotating_window.py",
    "packages/fs-generate/tests/test_kv_bits.py",
    "packages/fs-generate/tests/test_engine_kv_bits.py",  # a pool of codes per ISA: fs-model's test_paged_step.py
    # the bf16 / affine layers against the float32 reference within tolerance (test_tiles.py: per-ISA bits)
    "packages/fs-model/tests/test_kernels.py",
    # the compiled block against the same block's Python path: both run tile_calls._run and attention._attend, the
    # code that differs per ISA (the tiles each kind's IR compiles to, chosen inside _run), so equal on one ISA is
    # equal on the other; the per-ISA bits of the whole model run through it in test_fast_kernel_contracts.py and
    # test_batch_invariance.py (~13 s of the AVX2 run's 63, nearly all of it compiling the block for AVX2)
    "packages/fs-model/tests/test_compiled_block.py",
    "packages/fs-model/tests/test_column_tiles.py",  # its AVX2 body is proven bit-equal to the VNNI one there
    # the cascade walk (which tiles a group reads, in which order) is numba code that only calls the per-ISA
    # attention kernels test_attention_tiles.py and test_paged_step.py prove twice; ~32 s of the AVX2 run, nearly
    # all of it compiling the walk's three variants again
    "packages/fs-model/tests/test_attention_groups.py",
]


def beyond_avx2() -> bool:
    """The host's CPU has AVX-512 (Linux: /proc/cpuinfo), so FS_ISA=avx2 compiles different kernels."""
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and " avx512f" in cpuinfo.read_text()


@nox.session
def parity(session: nox.Session) -> None:
    """Every layer against the references: mlx / mlx-lm (MLX CPU on Linux), HF tokenizers, transformers."""
    sync(session, "--all-packages", "--all-extras", "--group", "test", "--group", "parity")
    pytest(
        session,
        *test_dirs(),
        "-m",
        "parity and not slow and not metal",
        *WORKERS,
        FS_REQUIRE_REFERENCE="1",
    )


@nox.session(default=False)
def ui(session: nox.Session) -> None:
    """fs-serve's chat page in a real headless Chromium: Debian's (`apt install chromium`) or $FS_CHROMIUM, driven by
    playwright; screenshots land in ui-screenshots/. Not in CI: it needs the browser installed."""
    sync(session, "--package", "fs-serve", "--group", "test", "--group", "ui")
    pytest(session, "packages/fs-serve/tests/test_chat_page.py", "-m", "ui")


@nox.session(default=False)
def slow(session: nox.Session) -> None:
    """Real Qwen3-0.6B shapes (minutes, GBs of disk)."""
    sync(session, "--all-packages", "--all-extras", "--group", "test", "--group", "parity")
    pytest(session, *test_dirs(), "-m", "slow and not metal", FS_REQUIRE_REFERENCE="1")


@nox.session(default=APPLE_SILICON, tags=["metal"])
def metal(session: nox.Session) -> None:
    """MLX-backend tests on the Apple GPU; skipped with a reason anywhere else."""
    if not APPLE_SILICON:
        session.skip(
            "Metal needs macOS on Apple silicon (this is "
            f"{platform.system()} {platform.machine()}); the MLX CPU path is covered by `parity`"
        )
    sync(session, "--all-packages", "--all-extras", "--group", "test", "--group", "parity")
    session.run(
        "python",
        "-c",
        "import mlx.core as mx, sys; sys.exit(0 if mx.metal.is_available() else "
        "'mx.metal.is_available() is False: no usable Metal device')",
    )
    pytest(
        session,
        *test_dirs(),
        "-m",
        "metal or parity",
        FS_MLX_DEVICE="gpu",
        FS_REQUIRE_REFERENCE="1",
    )


# Every published figure's script, as docs/performance.md runs it (name -> argv after `python`).
BENCHES = {
    "cpu_speed": ["benchmarks/cpu_speed.py", "--rounds", "3", "--out", "docs/data/cpu_speed.json"],
    "cpu_speed_avx2": [
        *("benchmarks/cpu_speed.py", "--prefill", "512", "--batches", "8", "--skip-mlx-lm", "--rounds", "3")
    ],  # with FS_ISA=avx2 (AVX2_PROXY)
    "weights_io": ["benchmarks/weights_io.py"],
    "gguf_load": ["benchmarks/gguf_load.py"],
    "moe_experts": ["benchmarks/moe_experts.py"],
    "speculative": ["benchmarks/speculative.py"],
    "speculative_llama": ["benchmarks/speculative_llama.py"],
    "attention": ["benchmarks/attention.py"],
    "tile_streaming": ["benchmarks/tile_streaming.py"],
    "call_cost": ["benchmarks/call_cost.py"],
    "gguf_vs_llama": ["benchmarks/gguf_vs_llama.py"],
    "kquant_speed": ["benchmarks/kquant_speed.py"],
    "moe_speed": ["benchmarks/moe_speed.py"],
    "moe_full": ["benchmarks/moe_full.py"],
    "tokenizer_speed": ["benchmarks/tokenizer_speed.py"],
    "model_prefill": ["benchmarks/model_prefill.py", "--lengths", "128", "512", "--peer-lengths", "128"],
    "generate_decode": ["benchmarks/generate_decode.py"],
    "generate_batch": ["benchmarks/generate_batch.py"],
    "kvcache_decode": ["benchmarks/kvcache_decode.py"],
    "kv_bits": ["benchmarks/kv_bits.py", "--contexts", "1024", "4096"],
    "engine_kv_bits": ["benchmarks/engine_kv_bits.py"],
    "step_scaling": ["benchmarks/step_scaling.py"],
    "quant_quality": ["benchmarks/quant_quality.py"],
    "invariance_cost": ["benchmarks/invariance_cost.py"],
    "tile_groups": ["benchmarks/tile_groups.py"],
    "compiled_block": ["benchmarks/compiled_block.py"],
    "superblock_scales": ["benchmarks/superblock_scales.py"],
    "half_scales": ["benchmarks/half_scales.py"],
    "q6k_integer_scales": ["benchmarks/q6k_integer_scales.py"],
    "q4_column_lanes": ["benchmarks/q4_column_lanes.py"],
    "threads": ["benchmarks/threads.py"],
    "engine_serving": ["benchmarks/engine_serving.py", "--out", "docs/data/engine_serving.json"],
    "agent_branches": ["benchmarks/agent_branches.py"],
    "structured_overhead": ["benchmarks/structured_overhead.py", "--out", "docs/data/structured_overhead.json"],
    "serve_load": ["benchmarks/serve_load.py", "--out", "docs/data/serve_load.json"],
    "cold_start": ["benchmarks/cold_start.py", "--out", "docs/data/cold_start.json"],
}
# the scripts that take --llama-bin
PEERS = {"half_scales", "cpu_speed", "engine_serving", "engine_kv_bits", "serve_load", "gguf_vs_llama", "kquant_speed",
         "moe_speed", "speculative_llama", "step_scaling"}  # fmt: skip
# the AVX2 host kind's proxy on any AVX2 machine: fs under FS_ISA=avx2 against llama.cpp built for AVX2 alone
AVX2_PROXY = {"cpu_speed_avx2"}


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Reproduce docs/performance.md: builds llama.cpp (pinned llama-cpp-python sdist, cached in nox's cache dir),
    runs every figure's script (`nox -s bench -- cpu_speed` for some), rewrites docs/data/cpu_speed.json and the
    plots. Tens of minutes on 2 cores; run it on a quiet machine."""
    sync(session, "--all-packages", "--all-extras", "--group", "parity", "--group", "bench")
    chosen = session.posargs or list(BENCHES)
    unknown = sorted(set(chosen) - set(BENCHES))
    if unknown:
        session.error(f"unknown benchmark(s) {unknown}; choose from {sorted(BENCHES)}")
    cache = Path(session.cache_dir) / "llama.cpp"
    bindir = session.run("python", "benchmarks/llama_cpp.py", "--cache", str(cache), silent=True)
    llama = ["--llama-bin", str(bindir).strip().splitlines()[-1]]
    for name in chosen:
        peer, env = (llama if name in PEERS else []), ENV | {"RAYON_NUM_THREADS": "1"}
        if name in AVX2_PROXY:
            out = session.run("python", "benchmarks/llama_cpp.py", "--cache", str(cache), "--isa", "avx2", silent=True)
            peer, env = ["--llama-bin", str(out).strip().splitlines()[-1]], env | {"FS_ISA": "avx2"}
        session.run("python", *BENCHES[name], *peer, env=env)
    session.run("python", "benchmarks/plot_results.py", env=ENV)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, mypy over every src/, the layer and version-bound check, actionlint on the workflows."""
    sync(session, "--all-packages", "--group", "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("python", "scripts/check_layers.py")
    session.run("mypy", *[f"packages/{p}/src" for p in PACKAGES])
    session.run("actionlint", "-color", *sorted(str(p) for p in (ROOT / ".github/workflows").glob("*.yml")))


@nox.session(default=False)
def build(session: nox.Session) -> None:
    """Build each package alone (--no-sources), then install each wheel alone into a fresh venv and import it."""
    shutil.rmtree(ROOT / "dist", ignore_errors=True)
    for p in PACKAGES:
        session.run("uv", "build", "--package", p, "--no-sources", "-o", f"dist/{p}", external=True)
    links = [a for p in PACKAGES for a in ("--find-links", f"dist/{p}")]
    for p in PACKAGES:
        venv = Path(tempfile.mkdtemp(prefix=f"fs-build-{p}-"))
        session.run("uv", "venv", "-q", str(venv), external=True)
        py = str(venv / "bin" / "python")
        wheel = next((ROOT / "dist" / p).glob("*.whl"))
        # --refresh: every package is 0.1.0 until bumped; a wheel cached from an earlier build must not be reused
        session.run("uv", "pip", "install", "-q", "--refresh", "--python", py, *links, str(wheel), external=True)
        mod = p.replace("-", "_")
        session.run(py, "-c", f"import {mod}; print('{p}', {mod}.__version__, 'imports alone')", external=True)
        meta = tomllib.loads((ROOT / "packages" / p / "pyproject.toml").read_text())["project"]
        version = meta["version"]
        for script in meta.get("scripts", {}):
            # every console script starts from the wheel alone: --help, and --version saying the package's version
            session.run(str(venv / "bin" / script), "--help", external=True, silent=True, env=ENV)
            said = session.run(str(venv / "bin" / script), "--version", external=True, silent=True, env=ENV)
            if str(said).strip() != f"{script} {version}":
                session.error(f"{script} --version said {str(said).strip()!r}, not '{script} {version}'")
        if p == "fs-generate":  # the wheel carries the demo model: the CLI must run from it, offline
            session.run(
                str(venv / "bin" / "fs-generate"),
                "--prompt",
                "The with statement",
                "--max-tokens",
                "8",
                external=True,
                env=ENV,
            )
        if p == "fs-agent":  # the wheel carries the shipped evaluation packages
            session.run(
                str(venv / "bin" / "fs-agent"),
                "eval",
                "failure-recovery",
                "--baseline",
                external=True,
                success_codes=[1],
            )
        shutil.rmtree(venv)


@nox.session(default=False)
def publish_local(session: nox.Session) -> None:
    """Upload all seven packages to a real index on 127.0.0.1 and install from it in a fresh venv."""
    sync(session, "--only-group", "publish")
    if not (ROOT / "dist").exists() or len(list((ROOT / "dist").glob("*/*.whl"))) != len(PACKAGES):
        build(session)
    store = Path(tempfile.mkdtemp(prefix="fs-index-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            str(Path(session.bin) / "pypi-server"),
            "run",
            "-i",
            "127.0.0.1",
            "-p",
            str(port),
            "-a",
            ".",
            "-P",
            ".",
            "--disable-fallback",
            str(store),
        ]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        files = sorted(str(f) for p in PACKAGES for f in (ROOT / "dist" / p).iterdir() if f.suffix in (".whl", ".gz"))
        session.run("uv", "publish", "--publish-url", f"{url}/", "-u", "fs", "-p", "fs", *files, external=True)
        venv = Path(tempfile.mkdtemp(prefix="fs-from-index-"))
        session.run("uv", "venv", "-q", str(venv), external=True)
        py = str(venv / "bin" / "python")
        # first-index strategy: fs-* must come from the local index, third-party packages from PyPI
        index = ["--index", f"local={url}/simple"]
        session.run("uv", "pip", "install", "--refresh", "--python", py, *index, "fs-weights", external=True)
        session.run("uv", "pip", "install", "--refresh", "--python", py, *index, "fs-generate", external=True)
        session.run(py, "-c", CHECK_FROM_INDEX, external=True)
        shutil.rmtree(venv)
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(store, ignore_errors=True)


CHECK_FROM_INDEX = """
import importlib.metadata as md, tomllib
from pathlib import Path
for d in md.distributions():
    name = d.metadata["Name"]
    if name.startswith("fs-"):
        want = tomllib.loads(Path(f"packages/{name}/pyproject.toml").read_text())["project"]["version"]
        assert d.version == want, (name, d.version, want)
        print(f"{name} {d.version} from the local index")
installed = {d.metadata["Name"] for d in md.distributions()}
assert {"fs-weights", "fs-model", "fs-kvcache", "fs-tokenizer", "fs-generate"} <= installed, installed
"""


@nox.session(default=False)
def docs(session: nox.Session) -> None:
    """Build the MkDocs site into site/ with --strict (broken links and missing pages fail); open site/index.html."""
    sync(session, "--only-group", "docs")
    session.run("mkdocs", "build", "--strict", "-d", str(ROOT / "site"))


@nox.session(default=False)
def docs_serve(session: nox.Session) -> None:
    """The site on http://127.0.0.1:8000, rebuilt as docs/ changes (`nox -s docs_serve -- -a 127.0.0.1:9000`)."""
    sync(session, "--only-group", "docs")
    session.run("mkdocs", "serve", "--strict", *(session.posargs or ["-a", "127.0.0.1:8000"]))


if __name__ == "__main__":
    sys.exit("run through nox: uv run nox -l")
