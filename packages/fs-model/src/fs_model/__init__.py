"""fs_model: The Qwen3 forward pass: a readable numpy reference backend and an MLX backend."""

__version__ = "0.1.0"
