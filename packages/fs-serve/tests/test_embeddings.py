"""``POST /v1/embeddings`` (embeddings.py) on an embedding checkpoint laid out as Qwen3-Embedding ships
(sentence-transformers' modules.json with last-token pooling, Qwen3Model's tensor names): the openai client's
vectors (base64, its default) and floats are fs_generate.embedding's, ``dimensions`` truncates and renormalizes,
and a generation model answers 400 naming ``model``."""

import json
import shutil

import httpx
import numpy as np
import pytest

from serving import start


@pytest.fixture(scope="module")
def embedder(tmp_path_factory, qwen3_tokenizer_dir):
    from safetensors.numpy import load_file, save_file

    from fs_generate import load
    from fs_weights import preset, write_random_checkpoint

    src = write_random_checkpoint(tmp_path_factory.mktemp("emb") / "gen", preset("tiny"), dtype="float32",
                                  tokenizer=qwen3_tokenizer_dir)  # fmt: skip
    d = src.parent / "Qwen3-Embedding-tiny"
    shutil.copytree(src, d)
    for f in d.glob("*.safetensors"):  # Qwen3Model's names: no "model." prefix, no lm_head
        save_file({k.removeprefix("model."): v for k, v in load_file(f).items() if k != "lm_head.weight"}, f)
    modules = [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")]
    st = "sentence_transformers.models."
    (d / "modules.json").write_text(json.dumps([{"idx": i, "name": str(i), "path": p, "type": st + t}
                                                for i, (p, t) in enumerate(modules)]))  # fmt: skip
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_lasttoken": True}))
    model, tok = load(str(d))
    s = start(model, tok)
    yield s, model, tok
    s.stop()


def test_the_openai_client_gets_fs_generates_vectors(embedder):
    from fs_generate.embedding import embed, ids

    s, model, tok = embedder
    texts = ["a cat", "A kitten sat on the warm windowsill.", "你好"]
    want = embed(model, [ids(tok, t) for t in texts])
    r = s.client().embeddings.create(model="tiny", input=texts)  # the client asks for base64 and decodes it
    assert [d.index for d in r.data] == [0, 1, 2]
    assert np.array_equal(np.asarray([d.embedding for d in r.data], np.float32), want)
    assert r.usage.prompt_tokens == sum(len(ids(tok, t)) for t in texts) == r.usage.total_tokens
    floats = httpx.post(f"{s.url}/v1/embeddings", json={"input": texts[1], "encoding_format": "float"}).json()
    alone = embed(model, [ids(tok, texts[1])])[0]  # float32 weights run on BLAS: compare like with like (one row)
    assert np.array_equal(np.asarray(floats["data"][0]["embedding"], np.float32), alone)
    short = s.client().embeddings.create(model="tiny", input=texts[1], dimensions=8).data[0].embedding
    h = model.last_hidden(model.tokens_array([ids(tok, texts[1])])).astype(np.float64)[0, :8]
    np.testing.assert_allclose(short, h / np.linalg.norm(h), rtol=1e-5, atol=1e-6)
    by_ids = httpx.post(f"{s.url}/v1/embeddings", json={"input": [ids(tok, "a cat")], "encoding_format": "float"})
    assert np.array_equal(np.asarray(by_ids.json()["data"][0]["embedding"], np.float32),
                          embed(model, [ids(tok, "a cat")])[0])  # fmt: skip


@pytest.mark.parametrize(
    "body,param",
    [
        ({"input": []}, "input"),
        ({"input": ""}, "input"),
        ({"input": "x", "dimensions": 10**6}, "dimensions"),
        ({"input": [[1, 10**9]]}, "input"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "truncate": True}, "truncate"),
    ],
)
def test_bad_embedding_requests_name_the_field(embedder, body, param):
    s, _, _ = embedder
    r = httpx.post(f"{s.url}/v1/embeddings", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_a_generation_model_refuses_embeddings_by_name(server):
    r = httpx.post(f"{server.url}/v1/embeddings", json={"input": "a cat"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    assert r.json()["error"]["code"] == "model_not_embedding"
