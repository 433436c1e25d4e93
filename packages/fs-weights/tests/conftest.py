import pytest

from fs_weights import Qwen3Config


@pytest.fixture
def tiny() -> Qwen3Config:
    return Qwen3Config.from_dict(
        dict(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            max_position_embeddings=256,
            tie_word_embeddings=False,
        )
    )
