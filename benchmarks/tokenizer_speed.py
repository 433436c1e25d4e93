"""Encode throughput and cold-load time: fs-tokenizer vs HF tokenizers (and tiktoken if installed), one thread.

    RAYON_NUM_THREADS=1 uv run --all-packages python benchmarks/tokenizer_speed.py [--model DIR]

Corpus: CPython's `pydoc_data.topics` (English prose and code) plus a multilingual part; the same text for
every tokenizer, and the IDs are checked equal before anything is timed.
"""

import argparse
import os
import pydoc_data.topics
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # HF tokenizers' batch path is parallel otherwise
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MULTI = (
    "中文分词测试：今天天气很好，我们去公园散步。日本語のテキストです。한국어 텍스트입니다. "
    "مرحبا بالعالم، كيف حالك؟ नमस्ते दुनिया, आप कैसे हैं? Привет, мир! 😀👍🏽 👨‍👩‍👧‍👦 "
) * 400


def best(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
    args = ap.parse_args()
    docs = list(pydoc_data.topics.topics.values())
    corpus = {"pydoc_data.topics": docs, "multilingual": [MULTI[i : i + 2000] for i in range(0, len(MULTI), 2000)]}

    from tokenizers import Tokenizer as HF

    from fs_tokenizer import Tokenizer

    t0 = time.perf_counter()
    fs = Tokenizer.from_pretrained(args.model)
    fs_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    hf = HF.from_file(str(Path(args.model) / "tokenizer.json"))
    hf_load = time.perf_counter() - t0
    print(
        f"cold load of tokenizer.json ({(Path(args.model) / 'tokenizer.json').stat().st_size / 1e6:.1f} MB): "
        f"fs {fs_load:.2f}s, HF tokenizers {hf_load:.2f}s"
    )

    for name, texts in corpus.items():
        mb = sum(len(t.encode()) for t in texts) / 1e6
        assert [fs.encode(t) for t in texts] == [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        fs.bpe.cache.clear()
        cold = best(lambda: [fs.encode(t) for t in texts], repeat=1)
        warm = best(lambda: [fs.encode(t) for t in texts])
        hf_one = best(lambda: [hf.encode(t, add_special_tokens=False) for t in texts])
        hf_batch = best(lambda: hf.encode_batch(texts, add_special_tokens=False))
        print(
            f"{name} ({mb:.2f} MB): fs {mb / warm:.2f} MB/s (first pass, empty cache: {mb / cold:.2f}) | "
            f"HF encode {mb / hf_one:.2f} MB/s | HF encode_batch {mb / hf_batch:.2f} MB/s | "
            f"ratio fs/HF encode = {hf_one / warm:.2f}x, fs/HF encode_batch = {hf_batch / warm:.2f}x"
        )
    try:
        import tiktoken
    except ImportError:
        print("tiktoken not installed (run with `uv run --with tiktoken ...`): not compared")
        return
    from fs_tokenizer.pipeline import QWEN2_PATTERN

    ranks = {fs.token_bytes(i): i for i in range(fs.bpe_size)}
    enc = tiktoken.Encoding(
        "qwen3", pat_str=QWEN2_PATTERN, mergeable_ranks=ranks, special_tokens={t.content: t.id for t in fs.added_tokens}
    )
    for name, texts in corpus.items():
        mb = sum(len(t.encode()) for t in texts) / 1e6
        same = [enc.encode_ordinary(t) for t in texts] == [fs.encode(t) for t in texts]
        warm = best(lambda: [fs.encode(t) for t in texts])
        tk = best(lambda: [enc.encode_ordinary(t) for t in texts])
        print(f"{name}: tiktoken {mb / tk:.2f} MB/s (same IDs: {same}) | ratio fs/tiktoken = {tk / warm:.2f}x")


if __name__ == "__main__":
    main()
