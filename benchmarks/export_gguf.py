"""Export an fs/HF Qwen3 checkpoint directory to GGUF so llama.cpp runs the very same weights.

    uv run --group bench --package fs-weights python benchmarks/export_gguf.py MODEL_DIR OUT.gguf --type q8_0

The tokenizer comes from MODEL_DIR/tokenizer.json, or --tokenizer DIR (a random checkpoint may have none);
the vocabulary is padded to the embedding's rows the way llama.cpp's own converter does ("[PAD{i}]").
"""

import argparse
import json
from pathlib import Path

import gguf
import numpy as np

from fs_weights import Checkpoint, load_config

TYPES = {
    "f32": gguf.GGMLQuantizationType.F32,
    "bf16": gguf.GGMLQuantizationType.BF16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
}
NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, i, rest = hf.split(".", 3)
    return f"blk.{i}.{NAMES[rest.removesuffix('.weight')]}.weight"


def add_tokenizer(w: gguf.GGUFWriter, tok_dir: Path, vocab_size: int) -> None:
    spec = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = {t: i for t, i in spec["model"]["vocab"].items()}
    added = {a["id"]: a for a in spec.get("added_tokens", [])}
    tokens, types = [], []
    by_id = {i: t for t, i in vocab.items()}
    for i in range(vocab_size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    specials = {a["content"]: a["id"] for a in added.values()}
    if "<|endoftext|>" in specials:
        w.add_bos_token_id(specials["<|endoftext|>"])
        w.add_pad_token_id(specials["<|endoftext|>"])
    if "<|im_end|>" in specials:
        w.add_eos_token_id(specials["<|im_end|>"])
    w.add_add_bos_token(False)


def export(model_dir: Path, out: Path, kind: str, tokenizer: Path | None = None) -> None:
    c = load_config(model_dir)
    ck = Checkpoint.open(model_dir)
    w = gguf.GGUFWriter(str(out), "qwen3")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(c.dim_head)
    w.add_value_length(c.dim_head)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_file_type({"f32": 0, "bf16": 32, "q8_0": 7, "q4_0": 2}[kind])
    add_tokenizer(w, tokenizer or model_dir, c.vocab_size)
    qtype = TYPES[kind]
    for name in ck.names():
        data = ck.get(name, np.float32, dequantize=True)
        if data.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(data, dtype=np.float32))
        else:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--type", choices=sorted(TYPES), default="bf16")
    ap.add_argument("--tokenizer", type=Path)
    args = ap.parse_args()
    export(args.model_dir, args.out, args.type, args.tokenizer)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB, {args.type})")


if __name__ == "__main__":
    main()
