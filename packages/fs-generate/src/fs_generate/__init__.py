"""fs_generate: Greedy and sampled generation, stop rules, streaming, KV-cached decode and the fs-generate CLI."""

__version__ = "0.1.0"
