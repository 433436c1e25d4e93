import numpy as np

from fs_model.cli import main, top_candidates
from model_helpers import GOLDEN


def test_top_candidates_order_ties_and_probabilities():
    z = np.array([1.0, 3.0, 3.0, -1.0], np.float32)
    top = top_candidates(z, 3)
    assert [i for i, _, _ in top] == [1, 2, 0]  # tie at 3.0 goes to the lower id
    p = np.exp(z.astype(np.float64) - 3.0) / np.exp(z.astype(np.float64) - 3.0).sum()
    assert abs(top[0][2] - p[1]) < 1e-12


def test_logits_from_ids(capsys):
    assert main(["logits", "--model", str(GOLDEN / "tiny-qwen3"), "--ids", "1", "2", "3", "--top", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("prompt: 3 tokens [1, 2, 3]") and "logits [512] at position 3" in out[1]
    assert len(out) == 2 + 1 + 3 + 1 and not out[2].endswith("token")  # no empty token column
    assert out[-1] == "(no token column: the model directory has no tokenizer fs-tokenizer can read)"


def test_errors(capsys):
    assert main(["logits", "--model", str(GOLDEN / "tiny-qwen3"), "--ids", "9999"]) == 2
    assert "token id 9999 at position 0" in capsys.readouterr().err
    assert main(["logits", "--model", "/nonexistent", "--ids", "1"]) == 2
    assert "not a model directory" in capsys.readouterr().err


def test_version_is_the_package_version(capsys):
    import pytest

    import fs_model
    from fs_model.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"fs-model {fs_model.__version__}"
