"""``rewrite --target onnxruntime`` over every ONNX backend node case shipped inside the onnx
package: the cases onnxruntime refuses for lack of a kernel or schema that the rewrite makes
run and match their expected outputs must not become fewer, no case onnxruntime already
runs may be changed by it, and every rewritten model passes ``compare`` against the original
on the reference evaluator. (The whole suite takes ~10 s on 2 cores, so it runs in full.)"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import conformance  # noqa: E402

# Raise it when a plugin rescues more; never lower it to make a change pass. Reached with:
# spec function bodies (SwiGLU), kernels (ImageDecoder), the onnx-preview plugin
# (FlexAttention, Adam, Adagrad, Momentum), and down-conversion to the newest opset at which
# onnxruntime has the op (RoiAlign-22, Optional*-28, QuantizeLinear/DequantizeLinear-28),
# onnx-standard (BitCast of bool; bfloat16, int16 and uint32 ops computed in a wider type),
# and the harness reading float8, 4- and 2-bit feeds and outputs.
MIN_RESCUED = 90
# Some rescued cases of each kind, named, so that losing one is reported by name.
MUST_RESCUE = {
    "test_swiglu", "test_swiglu_alpha", "test_swiglu_alpha_expanded", "test_swiglu_expanded",
    "test_swiglu_float16", "test_swiglu_float16_expanded",
    "test_image_decoder_decode_jpeg_rgb", "test_flexattention_score_mod",
    "test_flexattention_gqa", "test_adagrad", "test_adam_multiple", "test_nesterov_momentum",
    "test_roialign_aligned_false", "test_optional_get_element_tensor",
    "test_quantizelinear_axis", "test_dequantizelinear_blocked", "test_bitcast_bool_to_uint8",
    "test_attention_4d_causal_bf16", "test_celu_bfloat16_expanded", "test_max_uint16",
    "test_pow_types_float32_uint32", "test_onehot_with_bfloat16_values",
    "test_quantizelinear_int4", "test_dequantizelinear_e4m3fn",
}


# cases of random-number ops: converted to an older opset they run, but no two runtimes draw
# the same numbers, so neither the case's outputs nor the reference evaluator's can match
RANDOM_CASES = ("test_bernoulli", "test_random")


def _listing(table: dict[str, list[str]], limit: int = 15) -> str:
    rows = sorted(table.items(), key=lambda kv: -len(kv[1]))[:limit]
    return "\n".join(f"{len(names)} × {reason}: {', '.join(names[:5])}" for reason, names in rows)


def test_rewrite_rescues_refused_cases_and_leaves_running_ones_alone():
    result = conformance.measure_rescue()
    assert result.total > 1500, "the onnx package should ship ~1,900 node cases"
    # the yardstick is meaningful: onnxruntime does refuse a good number of cases
    assert len(result.refused) > 50
    assert len(result.running) > 1500

    # no case that runs is touched: no remedy, the same nodes, the same outputs
    assert not result.changed, "rewrite changed cases onnxruntime runs:\n" + _listing(
        result.changed)
    assert result.unchanged == len(result.running)

    assert MUST_RESCUE <= set(result.rescued), (
        f"no longer rescued: {sorted(MUST_RESCUE - set(result.rescued))}\n"
        + _listing(result.failed))
    assert len(result.rescued) >= MIN_RESCUED, (
        f"rescued {len(result.rescued)} of {len(result.refused)} (was {MIN_RESCUED})\n"
        + _listing(result.failed))
    # every attempted case is accounted for, and every failure has a reason
    failing = sum(len(v) for v in result.failed.values())
    assert len(result.rescued) + failing == len(result.refused)
    assert all(reason.strip() for reason in result.failed)

    # no model the rewrite produced computes something else than the original on the
    # reference evaluator (some cannot run at all: float4 casts onnxruntime lacks); every
    # rescued one computes the same on the case's own inputs and on generated ones wherever
    # the evaluator can run the original (random bytes are no image to decode)
    assert set(result.rescued) <= set(result.compared)
    cannot = "error: could not evaluate the original"
    # random bytes are no image to decode; random batch indices point past RoiAlign's batch;
    # a random OneHot depth is negative
    cannot_take_random = ("test_image_decoder", "test_roialign", "test_onehot")
    for name, verdicts in result.compared.items():
        if name.startswith(RANDOM_CASES):  # random numbers differ between any two runtimes
            continue
        for which in ("case inputs", "generated inputs"):
            assert not verdicts[which].startswith("mismatch"), (name, which, verdicts)
            if which == "generated inputs" and name.startswith(cannot_take_random):
                continue
            if name in result.rescued:
                assert verdicts[which] == "equal" or (
                    which == "generated inputs" and verdicts[which].startswith(cannot)), (
                    name, which, verdicts)
    for name in result.rescued:
        if not name.startswith(cannot_take_random):
            assert result.compared[name]["generated inputs"] == "equal", name
