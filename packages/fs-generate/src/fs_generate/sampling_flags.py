"""The sampling flags fs-generate and fs-chat share (mlx_lm.generate's and mlx_lm.chat's names and meanings),
declared once, and the ``Generator`` keywords they become.

    --temp T                 0 = greedy (the default); llama.cpp spells it the same
    --top-k K, --top-p P     0 / 1 = off
    --min-p M                drop tokens with p < M · p_max (0 = off)
    --repetition-penalty R   mlx-lm's: over the last 20 tokens (llama.cpp's --repeat-penalty looks back 64, so it
                             is not taken as a spelling of this)
    --seed S                 reproducible draws
"""

import argparse
from typing import Any

from fs_weights.command_line import non_negative_float, non_negative_int, positive_float


def add_sampling_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--temp", type=non_negative_float, default=0.0, help="sampling temperature; 0 = greedy (default)")
    ap.add_argument("--top-k", type=non_negative_int, default=0, help="keep the K most likely tokens (0 = off)")
    ap.add_argument(
        "--top-p", type=non_negative_float, default=1.0, help="nucleus: smallest set with mass >= P (1 = off)"
    )
    ap.add_argument("--min-p", type=non_negative_float, default=0.0, help="drop tokens with p < M * p_max (0 = off)")
    ap.add_argument("--repetition-penalty", type=positive_float, help="mlx-lm semantics over the last 20 tokens")
    ap.add_argument("--seed", type=non_negative_int, help="seed for reproducible sampling")


def sampling_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as ``Generator`` / ``ChatSession`` keywords (``seed`` included)."""
    return dict(
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repetition_penalty=args.repetition_penalty,
        seed=args.seed,
    )
