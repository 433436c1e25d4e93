"""``fs-generate``: generate text from a Qwen3 checkpoint, streaming, like ``mlx_lm.generate``.

fs-generate --model Qwen/Qwen3-0.6B --prompt "Write a haiku about the sea" --chat --max-tokens 100
fs-generate --model ./my-qwen3 --prompt "def fib(n):" --temp 0.7 --top-p 0.9 --seed 1
"""

import argparse
import json
import resource
import sys
from pathlib import Path
from typing import Any

from fs_kvcache import KV_BITS, KVCacheError
from fs_model import ModelError
from fs_tokenizer import TokenizerError
from fs_weights import WeightsError, interrupts
from fs_weights.command_line import non_negative_int, positive_int, run_main
from fs_weights.jsonfile import decode_utf8
from fs_weights.regular_file import read_regular

from . import __version__
from .chat_prompt import rest_of_turn, whole_turn
from .constraints import compile_grammar
from .errors import GenerateError
from .generate import ROTATING_KEEP, Generator
from .kv_bits import DEFAULT_QUANTIZED_KV_START, KV_GROUP_SIZES
from .model_flags import add_model_flags, load_from_args, token_budget, token_count
from .reused_prefix import load_prompt
from .sampling_flags import add_sampling_flags, sampling_from_args
from .speculation_flags import SPECULATION_HELP, add_speculation_flags, speculation_from_args

EPILOG = """\
prompt handling (mlx-lm's): when the tokenizer has a chat template, the --prompt becomes a user message (after an
  optional --system-prompt) under the template, with the assistant header; --enable-thinking keeps Qwen3's
  <think> block open (default off: the template closes it). --ignore-chat-template (or --raw) encodes the prompt
  exactly as given (no BOS, no template); --chat insists on the template (an error without one).
sampling (applied in this order): --temp T, then --top-k K, --top-p P, --min-p M, renormalize, draw.
  --temp 0 (default) is greedy: the largest logit, the lowest id on ties. --seed makes draws reproducible.
prompt cache (mlx-lm's pair): fs-cache-prompt saves a prompt's K/V (under the template its user message is left
  open); fs-generate --prompt-cache-file FILE --prompt TEXT continues that message with TEXT and prefills only it.
  A file made with other weights, tokenizer or K/V dtype is refused.
stopping: an EOS id of the model (generation_config.json + config.json), --max-tokens, the context limit
  (max_position_embeddings, or --max-context), or any --stop string (the output is cut before it).
--max-kv-size N (mlx-lm's meaning) bounds memory, not length: attention sees the first 4 positions and the most
  recent N-4; positions still stop at max_position_embeddings.
--kv-bits 2|4|8 (mlx-lm's): once the cache holds --quantized-kv-start positions (default 5000) it is kept as affine
  codes, groups of --kv-group-size dims (default 64), and attention reads them: ~1/3 (4-bit) or ~1/2 (8-bit) of a bf16
  cache's bytes. Lossy: outputs drift from the exact cache's. Not with --max-kv-size.
{speculation}exit codes: 0 done, 2 bad input (unknown model, bad flag values, empty prompt, template errors).
The last line on stderr is: prompt tokens and tok/s, generated tokens and tok/s, peak memory.
""".replace("{speculation}", SPECULATION_HELP)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="fs-generate",
        description="Generate text with a Qwen3 model.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_flags(ap)
    add_speculation_flags(ap)
    ap.add_argument("--prompt", "-p", default="hello", help="prompt text ('-' reads standard input; default 'hello')")
    ap.add_argument(
        "--max-tokens",
        "-m",
        "-n",
        "--n-predict",
        type=token_count(0, unlimited=True),
        default=256,
        help="generated-token budget (default 256; -n/--n-predict: llama.cpp's spelling, -1: until EOS or the "
        "context limit)",
    )
    add_sampling_flags(ap)
    ap.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    ap.add_argument("--chat", action="store_true", help="require the chat template (applied by default when present)")
    ap.add_argument(
        "--ignore-chat-template", "--raw", action="store_true", help="send the prompt as is, without the template"
    )
    ap.add_argument("--system-prompt", "--system", dest="system", help="system message (under the chat template)")
    ap.add_argument("--enable-thinking", action="store_true", help="let Qwen3 think (under the chat template)")
    ap.add_argument(
        "--max-kv-size",
        type=positive_int,
        help="mlx-lm's: keep at most N positions per layer - the first 4, then a sliding window (memory bound)",
    )
    ap.add_argument(
        "--max-context",
        "-c",
        "--ctx-size",
        type=non_negative_int,
        help="stop at N tokens, prompt included (default or 0: max_position_embeddings; -c/--ctx-size: llama.cpp's)",
    )
    ap.add_argument("--kv-bits", type=int, choices=KV_BITS, help="mlx-lm's: keep the KV cache as N-bit codes")
    ap.add_argument(
        "--kv-group-size", type=int, choices=KV_GROUP_SIZES, default=64, help="dims per KV scale (default 64)"
    )
    ap.add_argument(
        "--quantized-kv-start",
        type=non_negative_int,
        default=DEFAULT_QUANTIZED_KV_START,
        help=f"with --kv-bits: quantize once the cache holds N positions (default {DEFAULT_QUANTIZED_KV_START})",
    )
    ap.add_argument(
        "--prompt-cache-file",
        metavar="FILE",
        help="reuse this prompt's K/V (made by fs-cache-prompt); --prompt continues the cached prompt",
    )
    ap.add_argument("--json-schema", metavar="FILE|JSON", help="constrain the output to this JSON schema")
    ap.add_argument("--regex", help="constrain the output to match this regular expression")
    ap.add_argument("--grammar", metavar="FILE", help="constrain the output to this Lark grammar")
    ap.add_argument("--eos-token-id", type=non_negative_int, action="append", help="override the EOS set (repeatable)")
    ap.add_argument(
        "--extra-eos-token", action="append", default=[], metavar="TOKEN", help="also stop at this token (repeatable)"
    )
    ap.add_argument("--verbose", action="store_true", help="print the prompt IDs and per-token log-probabilities")
    ap.add_argument("--json", action="store_true", help="print one JSON object at the end instead of streaming")
    ap.add_argument("--version", action="version", version=f"fs-generate {__version__}")
    return ap


SHORT_PROMPT = 64  # below this a prompt's rate mostly measures the first pass paging in the weights, not prefill


def peak_memory_gb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1 << 30) if sys.platform == "darwin" else rss / (1 << 20)


KNOWN_ERRORS = (GenerateError, ModelError, TokenizerError, WeightsError, KVCacheError, OSError)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run_main("fs-generate", lambda: _run(args), KNOWN_ERRORS)


def _constraint(args: argparse.Namespace) -> dict[str, Any]:
    """--json-schema (a file, else JSON text), --regex, --grammar (a file) as generate's keyword, compiled once here
    so a bad one fails before the model loads."""
    kw: dict[str, Any] = {}
    if args.json_schema is not None:
        path = Path(args.json_schema)
        text = _read(path, "--json-schema") if path.is_file() else args.json_schema
        try:
            kw["json_schema"] = json.loads(text)
        except json.JSONDecodeError as e:
            raise GenerateError(f"--json-schema: not a file and not JSON ({e})") from None
    if args.regex is not None:
        kw["regex"] = args.regex
    if args.grammar is not None:
        kw["grammar"] = _read(Path(args.grammar), "--grammar")
    compile_grammar(**kw)
    return kw


def _eos(args: argparse.Namespace, model: Any, tok: Any) -> list[int] | None:
    """--eos-token-id replaces the EOS set; --extra-eos-token adds tokens to it (mlx-lm's flag): a vocabulary
    entry such as ``<|endoftext|>``, or text that encodes to exactly one token."""
    if not args.extra_eos_token:
        return args.eos_token_id
    from .stopping import model_eos_ids

    ids = set(args.eos_token_id) if args.eos_token_id is not None else set(model_eos_ids(model, tok))
    for text in args.extra_eos_token:
        tid = tok.token_to_id(text) if hasattr(tok, "token_to_id") else None  # its vocabulary form (mlx-lm's)
        if tid is None and len(one := tok.encode(text)) == 1:  # or text that is exactly one token
            tid = one[0]
        if tid is None:
            raise GenerateError(f"--extra-eos-token {text!r} is not one token of this tokenizer")
        ids.add(tid)
    return sorted(ids)


def _read(path: Path, flag: str) -> str:
    try:
        return decode_utf8(read_regular(path, GenerateError), str(path), GenerateError)
    except GenerateError as e:
        raise GenerateError(f"{flag}: {e}") from None


def _run(args: argparse.Namespace) -> int:
    out, err = sys.stdout, sys.stderr
    prompt_text = (
        decode_utf8(sys.stdin.buffer.read(), "standard input", GenerateError) if args.prompt == "-" else args.prompt
    )
    constraint = _constraint(args)  # checked before the model loads
    if args.chat and args.ignore_chat_template:
        raise GenerateError("--chat and --ignore-chat-template contradict each other; give one")
    if args.ignore_chat_template and (args.system is not None or args.enable_thinking):
        raise GenerateError("--system-prompt and --enable-thinking need the chat template; drop --ignore-chat-template")
    if args.max_kv_size is not None and args.max_kv_size <= ROTATING_KEEP:
        raise GenerateError(f"--max-kv-size must be more than {ROTATING_KEEP} (the positions it always keeps)")
    if args.kv_bits is not None and args.max_kv_size is not None:
        raise GenerateError("--kv-bits and --max-kv-size cannot be combined: a rotating cache is not quantized")
    if args.prompt_cache_file is not None and args.system is not None:
        raise GenerateError("--system-prompt belongs to the cached prompt; give it to fs-cache-prompt")
    if args.prompt_cache_file is not None and not Path(args.prompt_cache_file).is_file():
        raise GenerateError(f"--prompt-cache-file: no such file {args.prompt_cache_file}")
    model, tok = load_from_args(args)
    templated = getattr(tok, "chat_template", None) is not None and not args.ignore_chat_template
    if args.chat and not templated:
        raise GenerateError(f"--chat: {args.model or 'the demo model'} has no chat template")
    if not templated and (args.system is not None or args.enable_thinking):
        raise GenerateError("--system-prompt and --enable-thinking need a chat template, and this tokenizer has none")
    speculation = speculation_from_args(args, model, tok)
    prefix = load_prompt(args.prompt_cache_file, model, tok) if args.prompt_cache_file is not None else None
    prompt: str | list[int] = prompt_text
    if prefix is not None:  # mlx-lm's: the prompt continues the cached one (its open user message)
        rest = rest_of_turn(tok, prompt_text, args.enable_thinking) if templated else tok.encode(prompt_text)
        prompt = prefix.tokens + rest
    elif templated:
        prompt = whole_turn(tok, prompt_text, args.system, args.enable_thinking)
    g = Generator(
        model,
        tok,
        prompt,
        max_new_tokens=token_budget(args.max_tokens, model),
        **sampling_from_args(args),
        stop=args.stop,
        eos_token_ids=_eos(args, model, tok),
        context_limit=args.max_context or None,  # llama.cpp: -c 0 is the model's own
        max_kv_size=args.max_kv_size,
        kv_bits=args.kv_bits,
        kv_group_size=args.kv_group_size,
        quantized_kv_start=args.quantized_kv_start,
        prefix_cache=prefix,
        **speculation,
        **constraint,
    )
    if args.verbose:
        print(f"prompt ids ({len(g.prompt)}): {g.prompt}", file=err)
    if prefix is not None and not args.quiet:
        print(f"prompt cache: {len(prefix.tokens)} tokens from {args.prompt_cache_file}", file=err)
    streamed, printed = "", 0
    for step in g.steps():
        interrupts.check()  # a Ctrl-C that came during a finalizer: stop here, not after the whole budget
        if args.verbose:
            print(f"[{step.token_id} {step.logprob:.3f}]", end="", file=err)
        if args.json:
            continue
        streamed += step.text
        # hold back text that may be the start of a stop string; at the end show the (cut) result text
        upto = len(g.result.text) if step.finish_reason else len(streamed) - g.stops.holdback(streamed)
        if upto > printed:
            out.write(streamed[printed:upto])
            out.flush()
            printed = upto
    r = g.result
    if args.json:
        print(
            json.dumps(
                {
                    "text": r.text,
                    "token_ids": r.token_ids,
                    "finish_reason": r.finish_reason,
                    "prompt_tokens": len(r.prompt_ids),
                    "cached_tokens": r.cached_tokens,
                    "eos_token_id": r.eos_token_id,
                    "drafted_tokens": r.drafted_tokens,
                    "accepted_tokens": r.accepted_tokens,
                }
            )
        )
    else:
        print(file=out)
    print("=" * 10, file=err)
    fed = len(r.prompt_ids) - r.cached_tokens  # the rate counts the tokens this run prefilled
    reused = f" ({r.cached_tokens} reused from the prompt cache)" if r.cached_tokens else ""
    tps = fed / r.prompt_seconds if r.prompt_seconds else 0.0
    short = f" (under {SHORT_PROMPT} tokens: the first pass's one-time costs dominate; fs-bench -p measures prefill)"
    print(f"Prompt: {fed} tokens{reused}, {tps:.3f} tokens-per-sec{short if fed < SHORT_PROMPT else ''}", file=err)
    print(
        f"Generation: {len(r.token_ids)} tokens, {r.generation_tps:.3f} tokens-per-sec (finish: {r.finish_reason})",
        file=err,
    )
    if speculation:
        rate = r.accepted_tokens / r.drafted_tokens if r.drafted_tokens else 0.0
        print(f"Speculation: {r.accepted_tokens} of {r.drafted_tokens} drafted tokens accepted ({rate:.0%}), "
              f"{r.forward_passes} forward passes", file=err)  # fmt: skip
    print(f"Peak memory: {peak_memory_gb():.3f} GB", file=err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
