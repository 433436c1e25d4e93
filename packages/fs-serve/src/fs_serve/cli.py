"""``fs-serve``: the OpenAI-compatible server on the command line.

    fs-serve                                   # the demo model shipped in fs-generate, on 127.0.0.1:8080
    fs-serve --model Qwen/Qwen3-0.6B --port 8000 --api-key "$KEY"

Options are checked, and the model's directory found, before the server starts; the weights then load while
``/health`` answers 503. SIGTERM or Ctrl-C: stop accepting connections, let the requests in flight finish for up to
``--shutdown-timeout`` seconds, cancel what is left, exit 0.
"""

import argparse
import json
import logging
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from fs_generate import GenerateError, load, resolve_model_path
from fs_generate.demo import demo_model_path
from fs_generate.kv_bits import KV_BITS, KV_GROUP_SIZES
from fs_generate.model_flags import check_adapter
from fs_generate.speculation_flags import add_speculation_flags, check_speculation_flags, speculation_from_args

from . import __version__
from .app import ServeConfig, create_app, make_engine

log = logging.getLogger("fs_serve")
SAMPLING_DEFAULTS = ("temperature", "top_p", "top_k", "min_p")


def positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fs-serve", description="An OpenAI-compatible server for Qwen3 models.")
    ap.add_argument(
        "--model", "-m", help="model directory, .gguf file or Hugging Face id (default: the shipped demo model)"
    )
    ap.add_argument(
        "--adapter-path", help="LoRA adapter directory (mlx-lm's or PEFT's), fused into the weights at load"
    )
    ap.add_argument(
        "--served-model-name",
        nargs="+",
        metavar="NAME",
        help="the ids clients may name; responses carry the first (default: --model as given, or fs-demo)",
    )
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--api-key", help="require Authorization: Bearer KEY on every route but /health")
    ap.add_argument("--allowed-origins", nargs="+", default=[], metavar="ORIGIN",
                    help="CORS: browser pages on these origins (or *) may call the API (default: none)")  # fmt: skip
    ap.add_argument("--no-ui", action="store_true", help="do not serve the chat page at /")
    ap.add_argument("--max-batch", type=positive_int, default=16, help="requests decoded together")
    ap.add_argument("--max-queue", type=int, default=64, help="requests waiting beyond --max-batch before 429")
    ap.add_argument("--max-step-tokens", type=positive_int, default=512, help="prompt tokens per engine step")
    ap.add_argument("--kv-budget-mb", type=positive_int, help="K/V block pool size (default: from free memory)")
    ap.add_argument("--kv-bits", type=int, choices=KV_BITS,
                    help="keep the K/V pool as N-bit affine codes from the first position (about 1.8x / 3.2x the "
                         "tokens of a bf16 pool at 8 / 4 bits)")  # fmt: skip
    ap.add_argument("--kv-group-size", type=int, choices=KV_GROUP_SIZES, default=64, help="with --kv-bits")
    ap.add_argument("--max-body-mb", type=positive_int, default=4, help="largest request body accepted")
    ap.add_argument("--backend", choices=["numpy", "mlx"], default="numpy")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16", "native"])
    ap.add_argument("--quantize", choices=["int8", "int4"], help="numpy: quantize weights at load")
    ap.add_argument("--threads", "-t", type=positive_int, help="cap the CPU kernels' threads (default: every core)")
    ap.add_argument(
        "--distributed",
        action="store_true",
        help="tensor-parallel over the mx.distributed group mlx.launch started (MLX backend; implied when mlx.launch "
        "set MLX_RANK): rank 0 serves HTTP, the other ranks follow",
    )
    ap.add_argument("--watchdog", type=float, default=30.0, help="distributed: seconds without a step before exit")
    ap.add_argument("--shutdown-timeout", type=float, default=30.0, help="seconds in-flight requests get on SIGTERM")
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_speculation_flags(ap)  # every request speculates (lossless); /metrics counts drafted and accepted tokens
    ap.add_argument("--version", action="version", version=f"fs-serve {__version__}")
    return ap


def generation_defaults(path: Path) -> dict[str, Any]:
    """The model's recommended sampling (generation_config.json), used for fields a request leaves unset."""
    try:
        cfg = json.loads((path / "generation_config.json").read_text())
    except (OSError, ValueError):
        return {}
    if not cfg.get("do_sample", True):  # the model asks for greedy decoding
        return {"temperature": 0.0}
    return {k: cfg[k] for k in SAMPLING_DEFAULTS if isinstance(cfg.get(k), int | float)}


def load_for(args: argparse.Namespace, path: Path, group: Any = None) -> tuple[Any, Any]:
    model_arg = None if args.model is None else str(path)
    return load(
        model_arg,
        backend=args.backend,
        dtype=args.dtype,
        quantize=args.quantize,
        tensor_group=group,
        adapter_path=args.adapter_path,
    )


def join_group(args: argparse.Namespace) -> Any:
    """The mx.distributed group mlx.launch (or MLX_RANK + MLX_HOSTFILE) set up."""
    if args.backend != "mlx":
        raise GenerateError("--distributed needs --backend mlx (tensor parallelism runs on mx.distributed)")
    try:
        import mlx.core as mx
    except ImportError:
        raise GenerateError("--distributed needs MLX: pip install 'fs-serve[mlx]'") from None
    try:
        group = mx.distributed.init(strict=True)
    except RuntimeError as e:
        raise GenerateError(f"--distributed: no mx.distributed group ({e}); start the ranks with mlx.launch") from None
    if group.size() < 2:
        raise GenerateError("--distributed: the group has one rank; start two or more with mlx.launch")
    return group


def follow(args: argparse.Namespace, path: Path, config: ServeConfig) -> int:
    """A rank other than 0: load its slice, then take the steps rank 0 broadcasts until it stops (no HTTP here).
    SIGINT / SIGTERM are rank 0's to act on: this rank ends when rank 0 says so, or by its watchdog."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    model, tok = load_for(args, path, config.group)
    engine = make_engine(model, tok, config)  # the same arguments as rank 0's: the same pool, the same schedule
    log.info("rank %d of %d: following rank 0", config.group.rank(), config.group.size())
    engine.follow()  # type: ignore[attr-defined]
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if args.max_queue < 0:
        print("fs-serve: error: --max-queue must be >= 0", file=sys.stderr)
        return 2
    try:
        check_speculation_flags(args)
        if args.adapter_path is not None:  # a bad adapter is refused before the port is bound, not after
            check_adapter(args.adapter_path)
        path = demo_model_path() if args.model is None else resolve_model_path(args.model)
    except GenerateError as e:
        print(f"fs-serve: error: {e}", file=sys.stderr)
        return 1
    group = None
    if args.distributed or (args.backend == "mlx" and "MLX_RANK" in os.environ):  # started by mlx.launch
        try:
            group = join_group(args)
        except GenerateError as e:
            print(f"fs-serve: error: {e}", file=sys.stderr)
            return 1
    try:  # a port in use is the user's error, said before any loading (rank 0's: only it listens)
        if group is None or group.rank() == 0:
            with socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((args.host, args.port))
    except OSError as e:
        print(f"fs-serve: error: cannot listen on {args.host}:{args.port}: {e.strerror}", file=sys.stderr)
        return 1
    if args.threads is not None:
        from fs_model.cpu import set_threads

        set_threads(args.threads)
    config = ServeConfig(
        model_id=(args.served_model_name or [args.model or "fs-demo"])[0],
        aliases=tuple((args.served_model_name or [])[1:]),
        max_batch=args.max_batch,
        max_queue=args.max_queue,
        max_step_tokens=args.max_step_tokens,
        kv_budget_bytes=args.kv_budget_mb << 20 if args.kv_budget_mb else None,
        kv_bits=args.kv_bits,
        kv_group_size=args.kv_group_size,
        api_key=args.api_key,
        max_body_bytes=args.max_body_mb << 20,
        defaults=generation_defaults(path),
        group=group,
        watchdog_s=args.watchdog,
        allowed_origins=args.allowed_origins,
        ui=not args.no_ui,
        speculation=lambda model, tok: speculation_from_args(args, model, tok),
    )
    if group is not None and group.rank() != 0:
        return follow(args, path, config)
    app = create_app(lambda: load_for(args, path, group), config)
    import uvicorn

    def cancel_in_flight() -> None:
        if app.state.fs.runner is not None:
            app.state.fs.runner.cancel_all()

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            """SIGTERM / Ctrl-C: uvicorn stops accepting at once; what is still running after --shutdown-timeout
            is cancelled, so each stream ends properly (finish_reason "length", then [DONE]) and the process exits 0."""
            first = not self.should_exit
            super().handle_exit(sig, frame)
            # uvicorn re-raises a captured signal once shut down (exit status -15); a graceful stop is a success here
            getattr(self, "_captured_signals", []).clear()
            if first:
                timer = threading.Timer(
                    args.shutdown_timeout, lambda: app.state.fs.runner and app.state.fs.runner.cancel_all()
                )
                timer.daemon = True
                timer.start()

    server = Server(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            timeout_graceful_shutdown=round(args.shutdown_timeout) + 5,  # after the cancel: time to send the ends
        )
    )
    failed = {"load": False}

    def watch_load() -> None:  # a model that fails to load ends the server (exit 1), it does not serve 503 forever
        import time

        state = app.state.fs
        while state.status == "loading" and not server.should_exit:
            time.sleep(0.1)
        if state.status == "error":
            print(f"fs-serve: error: {state.error}", file=sys.stderr)
            failed["load"] = True
            server.should_exit = True

    threading.Thread(target=watch_load, daemon=True).start()
    server.run()
    return 1 if failed["load"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
