import pytest

from fs_weights import Qwen3Config, preset


@pytest.fixture
def tiny() -> Qwen3Config:
    """The library's tiny preset with a 512-id vocabulary, an untied head and no special-token ids."""
    return preset(
        "tiny",
        vocab_size=512,
        intermediate_size=128,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
    )
