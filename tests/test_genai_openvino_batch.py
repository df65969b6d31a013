"""The onnxruntime-genai builder's models on OpenVINO at batch 1 and 2 (issue 29, item 4).

OpenVINO's own translation of ``com.microsoft::GroupQueryAttention`` runs a batch of one
and fails at batch 2 in its CPU plugin ("the shape of input data (2) conflicts with the
reshape pattern (1)"). Its one-node probe compiles, the check's confirming run failed on
generated inputs that do not fit these models (their head size is a symbolic
``kv_cache_dim``), which proves nothing, and ``rewrite -t openvino`` said "nothing to do".
The OpenVINO target now reports the op (``KNOWN_INEXACT``), and the com-microsoft
decomposition runs instead: the rewritten models below (Llama, Mistral with a sliding
window, Qwen3 with q/k norms; committed under ``tests/data/realworld``, ``PROVENANCE.md``)
run on OpenVINO at batch 1 and 2, in one compiled model, with onnxruntime's numbers for the
original.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from rewriter import check
from rewriter.api import rewrite

ov = pytest.importorskip("openvino")
ort = pytest.importorskip("onnxruntime")

DATA = Path(__file__).resolve().parent / "data" / "realworld"
MODELS = ("llama-genai-int4", "mistral-genai-int4", "qwen3-genai-int4")
ATOL = 1e-4  # the logits are of order 1; the decomposition agrees to ~1e-7


def _batches(stem: str) -> dict[int, dict[str, np.ndarray]]:
    """The committed inputs (batch 2: one new token after 3 cached ones) and their first
    sequence alone (batch 1)."""
    with np.load(DATA / f"{stem}.inputs.npz") as data:
        two = {k: data[k] for k in data.files}
    assert all(v.shape[0] == 2 for v in two.values())
    return {1: {k: np.ascontiguousarray(v[:1]) for k, v in two.items()}, 2: two}


@pytest.mark.parametrize("stem", MODELS)
def test_check_reports_openvinos_group_query_attention(stem):
    """OpenVINO loads and runs the original at batch 1: the finding comes from the target's
    known failure, one per attention layer."""
    report = check(str(DATA / f"{stem}.onnx"), ["openvino"])
    gqa = [f for f in report.findings if f.op_type == "GroupQueryAttention"]
    assert len(gqa) == 2
    assert all("batch of one" in f.detail for f in gqa)


@pytest.mark.parametrize("stem", MODELS)
def test_rewritten_for_openvino_runs_at_batch_1_and_2(stem, tmp_path):
    batches = _batches(stem)
    sets = []
    for batch, feeds in batches.items():
        sets.append(tmp_path / f"batch{batch}.npz")
        np.savez(sets[-1], **feeds)
    out = tmp_path / "openvino.onnx"
    report = rewrite(str(DATA / f"{stem}.onnx"), ["openvino"], output=str(out),
                     compare_options={"inputs": [str(p) for p in sets]}).report
    assert report.verdict == "verified", report.verdict_reason
    assert "GroupQueryAttention" not in {n.op_type for n in onnx.load(str(out)).graph.node}

    original = ort.InferenceSession(str(DATA / f"{stem}.onnx"),
                                    providers=["CPUExecutionProvider"])
    compiled = ov.Core().compile_model(str(out), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    # one compiled model, the batches one after the other (OpenVINO's own translation also
    # failed on a second shape), then batch 1 again
    for batch in (1, 2, 1):
        feeds = batches[batch]
        expected = dict(zip([o.name for o in original.get_outputs()],
                            original.run(None, feeds)))
        result = compiled(feeds)
        got = {name: result[name] for name in expected}  # by the ONNX output's name
        for name, want in expected.items():
            assert got[name].shape == want.shape, (batch, name)
            assert want.shape[0] == batch
            np.testing.assert_allclose(got[name], want, atol=ATOL, rtol=0,
                                       err_msg=f"{stem} batch {batch} {name}")


@pytest.mark.parametrize("stem", MODELS)
def test_generated_inputs_fit_the_symbolic_head_size(stem):
    """The head size these models name ``kv_cache_dim`` is read from the attention node (the
    packed query's width over its heads), so generated inputs run the original: before, it
    got the default 3 and onnxruntime refused every generated set."""
    from rewriter.io.inputs import cache_dims, generate_inputs

    model = onnx.load(str(DATA / f"{stem}.onnx"))
    with np.load(DATA / f"{stem}.inputs.npz") as data:
        committed = data["past_key_values.0.key"].shape[-1]
    assert cache_dims(model)["kv_cache_dim"] == committed
    feeds = generate_inputs(model, seed=1)
    session = ort.InferenceSession(str(DATA / f"{stem}.onnx"),
                                   providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)
    assert all(np.isfinite(o).all() for o in outputs if o.dtype.kind == "f")
