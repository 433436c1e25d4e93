"""One rank of a lockstep engine run (spawned by test_lockstep.py). Rank 0 submits REQUESTS and writes every
result to OUT/results.json; the other ranks follow. With KILL_AFTER set, rank 1 dies after that many steps."""

import json
import os
import sys

REQUESTS = [
    ("The capital of France is", dict(max_new_tokens=12)),
    ("def fibonacci(n):", dict(max_new_tokens=20, temperature=0.8, seed=3)),
    ("A much longer prompt, with more tokens in it, so that it is prefilled in chunks.", dict(max_new_tokens=8)),
    ("你好", dict(max_new_tokens=16, top_k=5, temperature=1.0, seed=1)),
]


def main(path: str, out: str) -> None:
    import mlx.core as mx

    from fs_generate import load
    from fs_generate.lockstep import LockstepEngine

    group = mx.distributed.init(backend="ring", strict=True)
    model, tok = load(path, backend="mlx", dtype="float32", tensor_group=group)
    engine = LockstepEngine(model, tok, group=group, watchdog_s=float(os.environ.get("WATCHDOG_S", "20")), max_batch=3,
                            max_step_tokens=16)  # fmt: skip
    if group.rank() == 0:
        engine.start()
        handles = [engine.submit(p, eos_token_ids=[], **kw) for p, kw in REQUESTS]
        results = [h.result(timeout=300) for h in handles]
        engine.stop()
        with open(f"{out}/results.json", "w") as f:
            json.dump([[r.token_ids, r.logprobs] for r in results], f)
    else:
        kill_after = int(os.environ.get("KILL_AFTER", "0"))
        if kill_after:
            original, steps = engine._advance, [0]

            def advance(*a):
                steps[0] += 1
                if steps[0] == kill_after:
                    os._exit(9)  # dies mid-generation, as a crashed machine would
                return original(*a)

            engine._advance = advance
        engine.follow()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
