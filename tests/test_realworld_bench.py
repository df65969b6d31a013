"""The real-world benchmark's own code that needs no model building (``benchmarks/realworld``):
inputs at another batch size, the table's rows per batch, PROVENANCE.md kept for the test
models not written again."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from realworld.bench import Row, inputs_at, markdown  # noqa: E402
from realworld.feeds import feeds_for  # noqa: E402
from realworld.testdata import TEST_MODELS, file_stem, write_test_models  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "realworld"


def test_feeds_at_batch_1_are_a_decoding_step_of_one_sequence(tmp_path):
    model = DATA / "mistral-genai-int4.onnx"
    one = feeds_for(model, batch=1)
    two = feeds_for(model)
    with np.load(DATA / "mistral-genai-int4.inputs.npz") as committed:
        assert {k: v.shape for k, v in two.items()} == {k: committed[k].shape
                                                          for k in committed.files}
    for name, value in one.items():
        assert value.shape == (1, *two[name].shape[1:]), name
    # one new token after 3 cached ones: the mask covers all 4
    assert one["input_ids"].shape == (1, 1) and one["attention_mask"].shape == (1, 4)
    assert one["past_key_values.0.key"].shape == (1, 2, 3, 16)
    # the pair's inputs: the committed set at batch 2, a new file at batch 1
    (tmp_path / "m").mkdir()
    shutil.copy(model, tmp_path / "m" / "model.onnx")
    (tmp_path / "m" / "inputs.npz").write_bytes(b"")
    assert inputs_at(tmp_path / "m" / "model.onnx", 2, tmp_path) == tmp_path / "m" / "inputs.npz"
    path = inputs_at(tmp_path / "m" / "model.onnx", 1, tmp_path)
    with np.load(path) as written:
        assert {k: written[k].shape for k in written.files} == {k: v.shape
                                                               for k, v in one.items()}


def test_the_table_has_a_row_per_model_and_batch():
    rows = [Row("m/genai-int4", "openvino", "verified", batch=1),
            Row("m/genai-int4", "openvino", "run-fails", "fails at batch 2", batch=2)]
    text = markdown(rows, ["openvino"])
    assert "| m/genai-int4 (batch 1) | verified |" in text
    assert "| m/genai-int4 (batch 2) | run-fails |" in text
    assert "1 of 2 (model, target) pairs" in text
    assert "| m/genai-int4 (batch 2) | openvino | run-fails | - | fails at batch 2 |" in text
    # one batch: the model's name alone
    assert "| m/genai-int4 | verified |" in markdown(rows[:1], ["openvino"])


def test_models_not_written_again_keep_their_provenance(tmp_path):
    shutil.copy(DATA / "PROVENANCE.md", tmp_path / "PROVENANCE.md")
    assert write_test_models({}, dest=tmp_path) == []
    assert (tmp_path / "PROVENANCE.md").read_text() == (DATA / "PROVENANCE.md").read_text()
    for recipe in TEST_MODELS:
        assert f"## {file_stem(recipe)}.onnx\n" in (tmp_path / "PROVENANCE.md").read_text()
