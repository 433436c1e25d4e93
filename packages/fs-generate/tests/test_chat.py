"""fs-chat: the conversation keeps its K/V across turns (each turn prefills only its own tokens), /commands,
and Ctrl-C stops an answer, not the session - driven through a real pseudo-terminal, as a user types."""

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from fs_generate import generate, load
from fs_generate.chat_prompt import next_turn, whole_turn
from fs_generate.chat_session import ChatSession


def test_the_second_turn_prefills_only_its_own_tokens_and_equals_a_cold_run(tiny_dir):
    model, tok = load(str(tiny_dir))
    chat = ChatSession(model, tok, system="be brief", max_new_tokens=10, eos_token_ids=[])
    first = list(chat.ask("Hello"))
    assert chat.reused == 0 and chat.prefilled == len(whole_turn(tok, "Hello", "be brief"))
    history = list(chat.tokens)
    turn = next_turn(tok, "And then?")
    list(chat.ask("And then?"))
    assert chat.reused == len(history) - 1  # the answer's last token was sampled, never fed
    assert chat.prefilled == len(turn) + 1
    cold = generate(model, tok, history + turn, max_new_tokens=10, eos_token_ids=[])
    # float32 on BLAS: a prefill split differently rounds differently (bitwise on the kernels: test_fast_kernel_...)
    assert chat.last.token_ids == cold.token_ids
    assert chat.last.logprobs == pytest.approx(cold.logprobs, rel=1e-5, abs=1e-5)
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert chat.messages[2]["content"] == "".join(s.text for s in first)


def test_an_answer_ended_by_eos_is_closed_by_the_template_not_twice(tiny_dir):
    model, tok = load(str(tiny_dir))
    im_end = tok.token_to_id("<|im_end|>")
    chat = ChatSession(model, tok, max_new_tokens=10)
    list(chat.ask("Hello"))
    chat.ended_by = im_end  # as if the answer had ended with <|im_end|>
    chat.tokens.append(im_end)
    list(chat.ask("Again"))
    text = tok.decode(chat.tokens)
    assert "<|im_end|><|im_end|>" not in text and "<|im_end|>\n<|im_start|>user\nAgain<|im_end|>" in text


def test_a_conversation_past_the_context_limit_is_an_error_not_a_crash(tiny_dir):
    model, tok = load(str(tiny_dir))
    chat = ChatSession(model, tok, max_new_tokens=4, context_limit=40)
    list(chat.ask("Hello"))
    with pytest.raises(Exception, match="longer than the context limit"):
        list(chat.ask("word " * 50))
    chat.reset()
    list(chat.ask("Hello"))  # usable again


class Terminal:
    """fs-chat on a pseudo-terminal: ``send`` a line, ``expect`` a pattern in what it printed."""

    def __init__(self, argv: list[str]):
        self.master, slave = pty.openpty()
        env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.seen = ""

    def expect(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (m := re.search(pattern, self.seen)) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in {self.seen[-2000:]!r}"
            if select.select([self.master], [], [], min(left, 1.0))[0]:
                try:
                    self.seen += os.read(self.master, 65536).decode("utf-8", "replace")
                except OSError:  # the child closed the terminal
                    assert re.search(pattern, self.seen), f"no {pattern!r} in {self.seen[-2000:]!r}"
        self.seen = self.seen[m.end() :]
        return m

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")


def test_fs_chat_in_a_terminal(tiny_dir, tmp_path):
    exe = [sys.executable, "-m", "fs_generate.chat_cli"]
    t = Terminal([*exe, "--model", str(tiny_dir), "--verbose", "-m", "8", "--system-prompt", "be brief"])
    try:
        t.expect(r">> ")
        t.send("Hello")
        first = t.expect(r"\[(\d+) tokens reused, (\d+) prefilled, (\d+) generated")
        assert first.group(1) == "0"
        t.expect(r">> ")
        t.send("Tell me more")
        second = t.expect(r"\[(\d+) tokens reused, (\d+) prefilled, (\d+) generated")
        reused, prefilled = int(second.group(1)), int(second.group(2))
        assert reused == int(first.group(2)) + int(first.group(3)) - 1  # the whole first turn but its last token
        assert 0 < prefilled < reused
        t.expect(r">> ")
        t.send(f"/save {tmp_path / 'chat.json'}")
        t.expect(r"saved 5 messages")
        t.expect(r">> ")
        t.send("/reset")
        t.expect(r"conversation reset")
        t.expect(r">> ")
        os.write(t.master, b"caf\xe9\r")  # Latin-1 pasted into a UTF-8 terminal: said, and the session goes on
        t.expect(r"not valid UTF-8 \(byte 3\); nothing was sent")
        t.expect(r">> ")
        t.send("/quit")
        assert t.proc.wait(timeout=30) == 0
    finally:
        t.proc.kill()
    saved = json.loads((tmp_path / "chat.json").read_text())["messages"]
    assert [m["role"] for m in saved] == ["system", "user", "assistant", "user", "assistant"]


def test_ctrl_c_stops_the_answer_and_keeps_the_session(tiny_dir):
    t = Terminal([sys.executable, "-m", "fs_generate.chat_cli", "--model", str(tiny_dir), "--verbose", "-m", "3000"])
    try:
        t.expect(r">> ")
        t.send("Write a long story")
        t.expect(r"Write a long story\r?\n(?s:.){40}")  # the answer is streaming (a fixed sleep raced a fast host)
        t.proc.send_signal(signal.SIGINT)
        t.expect(r"\[stopped\]")
        t.expect(r"\[\d+ tokens reused, \d+ prefilled, \d+ generated")
        t.expect(r">> ")
        t.send("Shorter please")
        t.expect(r"Shorter please\r?\n(?s:.){40}")
        t.proc.send_signal(signal.SIGINT)  # stopped again: the second turn still reused the first's K/V
        t.expect(r"\[stopped\]")
        assert int(t.expect(r"\[(\d+) tokens reused").group(1)) > 0
        t.expect(r">> ")
        t.proc.send_signal(signal.SIGINT)  # at the prompt: a hint, not an exit
        t.expect(r"/quit to leave")
        os.write(t.master, b"\x04")  # Ctrl-D leaves
        assert t.proc.wait(timeout=30) == 0
    finally:
        t.proc.kill()


def test_fs_chat_version_and_a_bad_value_before_loading(capsys):
    import fs_generate
    from fs_generate.chat_cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"fs-chat {fs_generate.__version__}"
    with pytest.raises(SystemExit) as e:
        main(["--model", "/nonexistent", "--max-tokens", "0"])
    assert e.value.code == 2 and "--max-tokens" in capsys.readouterr().err


def test_fs_chat_through_a_pipe_survives_a_bad_line_and_a_bad_save_target(tiny_dir, tmp_path, monkeypatch, capsys):
    import io

    from fs_generate.chat_cli import main as fs_chat

    os.mkfifo(tmp_path / "fifo")
    lines = [b"caf\xe9", b"Hello", f"/save {tmp_path / 'fifo'}".encode(), f"/save {tmp_path / 'ok.json'}".encode()]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n".join(lines) + b"\n")))  # a pipe, not a tty
    assert fs_chat(["--model", str(tiny_dir), "-m", "3"]) == 0
    out = capsys.readouterr().out
    assert "not valid UTF-8 (byte 3)" in out and "fifo: exists and is a device, FIFO or socket" in out
    assert json.loads((tmp_path / "ok.json").read_text())["messages"][0] == {"role": "user", "content": "Hello"}
