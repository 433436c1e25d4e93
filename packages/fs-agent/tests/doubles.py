"""The deterministic test doubles of the agent contract (§12), rebuilt."""

import json
from types import SimpleNamespace

import numpy as np

from fs_agent import ModelCheckpoint, PrefixReuse


def responses(*items):
    it = iter(items)

    def generate(messages):
        return next(it)

    return generate


def tool(name, **args):
    return json.dumps({"tool": name, **args}, separators=(",", ":"))


def final(text):
    return json.dumps({"final": text})


class FakeWorkspace:
    def __init__(self, root):
        self.policy = SimpleNamespace(root=root, allow_writes=False, allowed_commands=())
        self.available_tools = {"read_file"}
        self.modified_files = set()
        self.executed = []

    def execute(self, action):
        self.executed.append(action)
        return "README contents"


class FakeCheckpointModel:
    """A fake token per message: len(content). Asserts, once after restore, that the next call sees exactly the
    saved prefix (``steering=True``: only the first conversation_position messages)."""

    def __init__(self, responses, steering=False):
        self.responses = list(responses)
        self.response_index = 0
        self.expect = None
        self.steering = steering
        self.calls = []

    def __call__(self, messages):
        self.calls.append(json.loads(json.dumps(messages)))
        if self.expect is not None:
            n, tokens = self.expect
            seen = messages[:n] if self.steering else messages
            assert len(seen) == n and tuple(len(m["content"]) for m in seen) == tokens
            self.expect = None
        out = self.responses[self.response_index]
        self.response_index += 1
        return out

    def save_checkpoint(self, messages):
        tokens = tuple(len(m["content"]) for m in messages)
        return ModelCheckpoint(len(messages), self.response_index, tokens, (len(tokens), len(tokens)))

    def restore_checkpoint(self, cp):
        self.response_index = cp.response_index
        self.expect = (cp.conversation_position, cp.cached_token_ids)


class ScriptedCheckpointModel(FakeCheckpointModel):
    def __init__(self, responses):
        super().__init__(responses, steering=True)
        self.reuse = None

    def restore_checkpoint(self, cp):
        super().restore_checkpoint(cp)
        self.reuse = PrefixReuse(len(cp.cached_token_ids), cp.layer_offsets, len(cp.cached_token_ids))


class CharacterTokenizer:
    eos_token_id = 0

    def apply_chat_template(self, messages, *, tokenize, add_generation_prompt, enable_thinking):
        assert tokenize is False and enable_thinking is False
        text = "".join(f"<{m['role']}>{m['content']}\n" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")

    def encode(self, text, *, add_special_tokens):
        assert add_special_tokens is False
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


class DenseEosModel:
    num_hidden_layers = 2

    def __init__(self):
        self.calls = []

    def __call__(self, tokens, offset, caches, logits_to_keep=None):
        assert logits_to_keep == 1
        tokens = np.asarray(tokens)
        S = tokens.shape[1]
        before = [id(c.key_values[0]) if c.key_values else None for c in caches]
        for i, c in enumerate(caches):
            kv = tokens.astype(np.float32).reshape(1, 1, S, 1) + i
            c.update_and_fetch(kv, kv.copy())
        self.calls.append((offset, S, caches, before, [id(c.key_values[0]) for c in caches]))
        logits = np.zeros((1, S, 128), np.float32)
        logits[..., 0] = 1.0
        return logits
