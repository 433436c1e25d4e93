import json

import pytest

from fs_weights import ConfigError, Qwen3Config, load_config, load_generation_config, preset

QWEN3_06B = {  # Qwen/Qwen3-0.6B config.json
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def write(tmp_path, d):
    (tmp_path / "config.json").write_text(json.dumps(d))
    return tmp_path


def test_real_config_loads_with_hf_keys_and_keeps_unknown_keys(tmp_path):
    c = load_config(write(tmp_path, QWEN3_06B))
    assert (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.dim_head) == (1024, 16, 8, 128)
    assert c.tie_word_embeddings is True and c.rope_theta == 1000000
    assert c.extra["max_window_layers"] == 28 and c.extra["initializer_range"] == 0.02
    assert c.to_dict() | {"rope_scaling": None, "sliding_window": None} == QWEN3_06B | {"use_cache": True}
    assert c == preset("qwen3-0.6b").replace(torch_dtype="bfloat16")


MOE = {"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64}


def test_a_qwen3_moe_config_names_its_sparse_layers_and_round_trips(tmp_path):
    """Qwen3-30B-A3B's keys (router_aux_loss_coef only matters to training: kept, unused)."""
    d = QWEN3_06B | MOE | {"norm_topk_prob": True, "decoder_sparse_step": 2, "mlp_only_layers": [5],
                           "router_aux_loss_coef": 0.001, "architectures": ["Qwen3MoeForCausalLM"]}  # fmt: skip
    c = load_config(write(tmp_path, d))
    assert [i for i in range(8) if c.is_sparse(i)] == [1, 3, 7]  # (i + 1) % 2 == 0, and 5 is dense
    assert c.to_dict() | {"rope_scaling": None, "sliding_window": None} == d | {"use_cache": True}
    assert "num_experts" not in load_config(write(tmp_path, QWEN3_06B)).to_dict()  # dense configs stay as written


def test_head_dim_is_derived_when_absent(tmp_path):
    d = {k: v for k, v in QWEN3_06B.items() if k != "head_dim"}
    assert load_config(write(tmp_path, d)).dim_head == 1024 // 16


@pytest.mark.parametrize(
    "change,key,words",
    [
        ({"hidden_size": "1024"}, "hidden_size", "must be int"),
        ({"num_hidden_layers": True}, "num_hidden_layers", "must be int"),
        ({"rms_norm_eps": "1e-6"}, "rms_norm_eps", "must be int or float"),
        ({"tie_word_embeddings": 1}, "tie_word_embeddings", "must be bool"),
        ({"num_key_value_heads": 5}, "num_key_value_heads", "must divide"),
        ({"vocab_size": 0}, "vocab_size", "must be positive"),
        ({"head_dim": None, "hidden_size": 1000, "num_attention_heads": 16}, "head_dim", "not divisible"),
        ({"model_type": "llama"}, "model_type", "supported: 'qwen3', 'qwen3_moe'"),
        ({"model_type": "qwen3_moe"}, "num_experts", "must be positive for a qwen3_moe model"),
        (MOE | {"num_experts_per_tok": 9}, "num_experts_per_tok", "exceeds num_experts (8)"),
        (MOE | {"mlp_only_layers": [28]}, "mlp_only_layers", "layer indices below 28"),
        (MOE | {"norm_topk_prob": 1}, "norm_topk_prob", "must be bool"),
        (MOE | {"decoder_sparse_step": 0}, "decoder_sparse_step", "must be positive"),
        ({"quantization": {"bits": "4"}}, "quantization", "'bits' must be one of"),
        ({"quantization": {"bits": 4, "group_size": 0}}, "quantization", "'group_size' must be one of"),
        ({"rms_norm_eps": float("nan")}, "rms_norm_eps", "finite positive"),
        ({"rope_theta": float("inf")}, "rope_theta", "finite positive"),
    ],
)
def test_bad_values_name_the_key_and_file(tmp_path, change, key, words):
    path = write(tmp_path, QWEN3_06B | change)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert f"'{key}'" in str(e.value) and words in str(e.value) and "config.json" in str(e.value)


def test_missing_key_and_broken_json(tmp_path):
    d = {k: v for k, v in QWEN3_06B.items() if k != "vocab_size"}
    with pytest.raises(ConfigError, match="missing required key.*'vocab_size'"):
        load_config(write(tmp_path, d))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        Qwen3Config.from_dict([1, 2])  # type: ignore[arg-type]


def test_generation_config(tmp_path):
    assert load_generation_config(tmp_path) is None
    (tmp_path / "generation_config.json").write_text(
        json.dumps(
            {
                "eos_token_id": [151645, 151643],
                "temperature": 0.6,
                "top_k": 20,
                "top_p": 0.95,
                "do_sample": True,
                "transformers_version": "4.51.0",
            }
        )
    )
    g = load_generation_config(tmp_path)
    assert g is not None and g.eos_token_id == (151645, 151643) and g.top_k == 20
    assert g.extra == {"transformers_version": "4.51.0"}
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": "x"}))
    with pytest.raises(ConfigError, match="eos_token_id"):
        load_generation_config(tmp_path)
