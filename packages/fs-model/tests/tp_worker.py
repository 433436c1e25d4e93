"""One rank of a tensor-parallel run (spawned by test_tensor_parallel.py): loads its slice of the checkpoint,
writes the logits of IDS and 12 greedy tokens (KV-cached) to OUT/rank{r}.npz."""

import sys

import mlx.core as mx
import numpy as np

from fs_model import load_model

path, out, ids = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3].split(",")]
group = mx.distributed.init(backend="ring", strict=True)
if sys.argv[5:] == ["mlx_lm"]:  # the reference: mlx-lm's own sharded load of the same directory
    from mlx_lm.utils import sharded_load

    theirs, _ = sharded_load(path, tensor_group=group)
    logits = np.array(theirs(mx.array([ids]))[0].astype(mx.float32))
    np.savez(f"{out}/rank{group.rank()}.npz", logits=logits, size=group.size())
    sys.exit(0)
if sys.argv[5:] == ["shard"]:  # loaded whole, then cut in memory
    model = load_model(path, backend="mlx", dtype=sys.argv[4])
    model.shard(group)
else:
    model = load_model(path, backend="mlx", dtype=sys.argv[4], tensor_group=group)
logits = np.asarray(model.forward(ids), dtype=np.float32)
cache, seq = model.make_cache(), list(ids)
step = np.asarray(model.forward(ids, cache), dtype=np.float32)[-1]
for _ in range(12):
    seq.append(int(step.argmax()))
    step = np.asarray(model.forward([seq[-1]], cache), dtype=np.float32)[-1]
np.savez(f"{out}/rank{group.rank()}.npz", logits=logits, greedy=np.array(seq[len(ids) :]), size=group.size())
