"""The structured-output issue's benchmark: what a JSON-schema constraint costs per generated token, and what
compiling a schema costs, on the real Qwen3-0.6B shapes (random bf16 weights) with the real Qwen3 tokenizer.

    uv run --all-packages --group bench python benchmarks/structured_overhead.py [--new 48] [--rounds 3]

Per token: the decode time per generated token (``Generation.generation_seconds`` over the tokens after the first)
of the same prompts for the same number of tokens, unconstrained vs under a JSON schema, at batch 1 (``generate``)
and batch 8 (the ``Engine``, eight requests submitted together). The constrained runs are timed twice: with the
next mask computed on a worker thread while the forward pass runs (fs's default) and in line
(``constraints.PREFETCH = False``). Rounds are interleaved, best of ``--rounds``; the ratio constrained /
unconstrained is the figure (goal: at most 1.10). As that ratio sits inside this host's noise, the time spent in
``Constraint.mask`` (waiting for the mask and applying it) is also measured directly, per step, as a share of it.

Compile: ``make_constraint`` for each schema below (grammar text + llguidance matcher), p50 of 5, after the
tokenizer view is built once (its own figure: it is built once per tokenizer per process).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

SCHEMAS = {
    "flat object": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150}},
        "required": ["name", "age"],
    },
    "nested + enum + array": {
        "type": "object",
        "properties": {
            "tool": {"enum": ["read_file", "write_file", "run", "final_answer"]},
            "args": {
                "type": "object",
                "properties": {"path": {"type": "string", "pattern": "^[a-z/._-]{1,40}$"}, "n": {"type": "number"}},
                "required": ["path"],
            },
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        },
        "required": ["tool", "args"],
    },
}


MASK_SECONDS = [0.0, 0]  # time spent inside Constraint.mask (the critical path's share), calls


def timed_masks() -> None:
    """Count what masking costs the decode loop: the wait for the mask plus applying it to the logits."""
    from fs_generate.constraints import Constraint

    inner = Constraint.mask

    def mask(self, logits):
        t0 = time.perf_counter()
        out = inner(self, logits)
        MASK_SECONDS[0] += time.perf_counter() - t0
        MASK_SECONDS[1] += 1
        return out

    Constraint.mask = mask


def per_token(gens) -> float:
    """Median decode seconds per token over requests (the first token belongs to the prefill)."""
    return float(np.median([g.generation_seconds / max(1, len(g.token_ids) - 1) for g in gens]))


def run(model, tok, prompts, lengths, schema, batch) -> tuple[float, list[int]]:
    """(seconds per token, tokens each request generated). Unconstrained requests run EOS off for exactly
    ``lengths`` tokens (what the constrained ones generated), so both time the same context lengths."""
    from fs_generate import Engine, generate

    def kw(i):
        if schema:
            return {"max_new_tokens": lengths[i], "json_schema": schema}
        return {"max_new_tokens": lengths[i], "eos_token_ids": []}

    if batch == 1:
        gens = [generate(model, tok, prompts[0], **kw(0))]
    else:
        engine = Engine(model, tok, max_batch=batch, prefix_cache=False)
        handles = [engine.submit(p, **kw(i)) for i, p in enumerate(prompts[:batch])]
        engine.run_until_idle()
        gens = [h.result() for h in handles]
    return per_token(gens), [len(g.token_ids) for g in gens]


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import qwen3_06b

    from fs_generate import constraints
    from fs_model import load_model
    from fs_tokenizer import Tokenizer

    ap = argparse.ArgumentParser()
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    tok = Tokenizer.from_pretrained(args.tokenizer)
    model = load_model(qwen3_06b("bfloat16"))
    eos = frozenset(tok.eos_token_ids)

    t0 = time.perf_counter()
    constraints.make_constraint(tok, model.vocab_size, eos, SCHEMAS["flat object"], None, None)
    view_s = time.perf_counter() - t0
    compile_ms = {}
    for name, schema in SCHEMAS.items():
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            constraints.make_constraint(tok, model.vocab_size, eos, schema, None, None)
            times.append(time.perf_counter() - t0)
        compile_ms[name] = 1e3 * float(np.median(times))

    prompts = [f"Reply with JSON for person number {i}: " for i in range(8)]
    schema = SCHEMAS["nested + enum + array"]
    run(model, tok, prompts, [4] * 8, None, 1)  # load the kernels before timing
    timed_masks()
    best: dict[str, float] = {}
    mask_ms: dict[str, float] = {}
    for r in range(args.rounds):
        for batch in (1, 8):
            lengths = [args.new] * 8
            for mode in ("prefetch", "inline", "none"):  # constrained first: their lengths bound the plain run
                constraints.PREFETCH = mode != "inline"
                MASK_SECONDS[:] = [0.0, 0]
                s, lengths = run(model, tok, prompts, lengths, None if mode == "none" else schema, batch)
                key = f"b{batch}_{mode}"
                if MASK_SECONDS[1]:  # per step: batch masks per step
                    per_step = 1e3 * MASK_SECONDS[0] / MASK_SECONDS[1] * batch
                    mask_ms[key] = min(mask_ms.get(key, float("inf")), per_step)
                best[key] = min(best.get(key, float("inf")), s)
                print(f"round {r} batch {batch} {mode}: {1e3 * s:.1f} ms/token", flush=True)
    constraints.PREFETCH = True
    results = {
        "view_build_s": view_s,
        "compile_ms": compile_ms,
        "ms_per_token": {k: 1e3 * v for k, v in best.items()},
        "mask_ms_per_step": mask_ms,  # the masks' time on the critical path of one step (all rows)
        "mask_share": {k: v / (1e3 * best[k]) for k, v in mask_ms.items()},
        "overhead": {
            f"b{b}_{m}": best[f"b{b}_{m}"] / best[f"b{b}_none"] for b in (1, 8) for m in ("prefetch", "inline")
        },
    }
    print(json.dumps(results, indent=1))
    if args.out:
        body = {"date": time.strftime("%Y-%m-%d"), "new": args.new, "rounds": args.rounds, "results": results}
        Path(args.out).write_text(json.dumps(body, indent=1) + "\n")


if __name__ == "__main__":
    main()
