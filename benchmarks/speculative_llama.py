"""Issue 35 (d): llama.cpp's own speculative decoding on the same model and prompts as speculative.py's (a), side by
side with fs's figures there - its speed against its plain decoding, and whether its tokens stay those of its plain
run.

    uv run nox -s bench -- speculative_llama
    uv run --all-packages --all-extras --group bench python benchmarks/speculative_llama.py --llama-bin DIR

The demo model is exported to GGUF (BF16, ``fs_generate.gguf_cli.export``) and served by ``llama-server`` (built by
benchmarks/llama_cpp.py) once per mode: plain; n-gram drafts from the context (``--spec-type ngram-simple`` and
``ngram-mod``, llama.cpp's defaults, the peers of fs's prompt lookup); and the model drafting for itself
(``--spec-type draft-simple --model-draft`` the same file, 4 tokens: every draft should be accepted). Each request
sends speculative.py's prompt token ids, greedy, 128 tokens, no prompt cache, to a server started for the round;
tok/s is generated tokens over the server's own prompt + generation time (what fs's figure counts: prefill
included), best of the interleaved rounds. "changed"
compares the generated ids with the plain server's on the same prompt: llama.cpp verifies drafts in a batch whose
kernels differ from one-token decoding, so a speculative run may change its output (the issue's point).
"""

import argparse
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from common import free_port, post_json, server
from speculative import demo_prompts

from fs_generate import generate, load
from fs_generate.demo import demo_model_path
from fs_generate.gguf_cli import export

N = 128


def modes(gguf: Path) -> dict[str, list[str]]:
    return {
        "plain": [],
        "ngram-simple": ["--spec-type", "ngram-simple"],
        "ngram-mod": ["--spec-type", "ngram-mod"],
        "itself as draft model, 4 tokens": [
            "--spec-type", "draft-simple", "--model-draft", str(gguf), "--spec-draft-n-max", "4",
        ],
    }  # fmt: skip


def complete(port: int, ids: list[int], proc: "subprocess.Popen[bytes]") -> dict[str, Any]:
    body = {"prompt": ids, "n_predict": N, "temperature": 0, "cache_prompt": False, "ignore_eos": True,
            "return_tokens": True}  # fmt: skip
    return dict(post_json(port, "/completion", body, proc))


def run_mode(llama: Path, gguf: Path, extra: list[str], prompts: dict[str, list[int]], out: dict[str, Any]) -> None:
    """One fresh server (ngram-mod's n-gram pool outlives a request: a second identical request would be drafted
    from the first), each prompt once; keeps per prompt the best (tok/s, generated ids, drafted, accepted)."""
    port = free_port()
    cmd = [str(llama), "-m", str(gguf), "--port", str(port), "-t", "2", "-c", "1024", "-np", "1", *extra]
    with server(cmd, port) as proc:
        for label, ids in prompts.items():
            r = complete(port, ids, proc)
            tm = r["timings"]
            tps = len(r["tokens"]) / ((tm["prompt_ms"] + tm["predicted_ms"]) / 1e3)
            if label not in out or tps > out[label][0]:
                out[label] = (tps, r["tokens"], tm.get("draft_n", 0), tm.get("draft_n_accepted", 0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", required=True, type=Path, help="llama.cpp's bin directory (benchmarks/llama_cpp.py)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    model, tok = load(None, dtype="bfloat16")
    prompts = demo_prompts(tok)
    with tempfile.TemporaryDirectory() as tmp:
        gguf = export(str(demo_model_path()), Path(tmp) / "demo-bf16.gguf", "bf16")
        results: dict[str, dict[str, Any]] = {name: {} for name in modes(gguf)}
        for _ in range(args.rounds):  # interleaved: every mode once per round
            for name, extra in modes(gguf).items():
                run_mode(args.llama_bin / "llama-server", gguf, extra, prompts, results[name])
    for label in prompts:
        print(f"\n(d) llama-server, demo model BF16 GGUF, {len(prompts[label])}-token prompt: {label}, {N} greedy")
        base, plain = results["plain"][label][:2]
        ours = generate(model, tok, prompts[label], max_new_tokens=N, eos_token_ids=[]).token_ids
        print(f"fs's plain greedy tokens {'equal' if ours == plain else 'differ from'} llama.cpp's plain ones")
        print("| mode | tok/s | vs plain | drafted | accepted | tokens vs plain |\n|---|---|---|---|---|---|")
        for name, per in results.items():
            tps, ids, drafted, accepted = per[label]
            diff = next((i for i, (a, b) in enumerate(zip(ids, plain, strict=False)) if a != b), None)
            same = "same" if diff is None and len(ids) == len(plain) else f"changed from token {diff}"
            print(f"| {name} | {tps:.0f} | {tps / base:.2f}x | {drafted} | {accepted} | {same} |")


if __name__ == "__main__":
    main()
