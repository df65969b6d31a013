"""Every rewrite ends in a verdict a runtime backed: verified (exit 0), mismatch (exit 1,
nothing written unless --keep-failed), unverified (exit 3, nothing written unless
--allow-unverified), or bad input (exit 2, before any work); --no-verify writes and says
"not verified". The oracle is whatever runtime runs the original, not the target asked for.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rewriter.api import rewrite
from rewriter.cli import main
from rewriter.comparison.compare import compare
from rewriter.io.inputs import InputError
from rewriter.manager import load_plugins
from tests.conftest import WRONG_GELU_SOURCE, model_from_text, write_model

# A third-party plugin: com.acme::ErfGelu decomposed wrongly (0.8 x for x / sqrt 2) with a
# correct numpy kernel; com.acme::Boom decomposed correctly (Relu) with a kernel that crashes
# its process; com.acme::Lonely decomposed (Neg) with no kernel at all; com.microsoft::FastGelu
# overridden by a wrong decomposition (third-party plugins win over built-ins), so that
# onnxruntime's own contrib kernel is the oracle that catches it. The builders record that
# they ran in the file named by $ACME_BUILT (to prove a bad input stops before any work).
PLUGIN = textwrap.dedent('''
    import os

    from onnx import parser

    from rewriter import hookimpl
    from rewriter.plugin import kernel


    def _built(name):
        path = os.environ.get("ACME_BUILT")
        if path:
            with open(path, "a") as f:
                f.write(name + "\\n")

''') + WRONG_GELU_SOURCE + textwrap.dedent('''
    WRONG_FAST_GELU = parser.parse_function("""
    <domain: "com.microsoft", opset_import: ["": 18]>
    FastGelu (x) => (y) {
        y = Relu (x)
    }
    """)


    def erf_gelu_body(ctx):
        _built("ErfGelu")
        return WRONG_GELU


    def boom_body(ctx):
        _built("Boom")
        return parser.parse_function("""
        <domain: "com.acme", opset_import: ["": 18]>
        Boom (x) => (y) { y = Relu (x) }
        """)


    def lonely_body(ctx):
        return parser.parse_function("""
        <domain: "com.acme", opset_import: ["": 18]>
        Lonely (x) => (y) { y = Neg (x) }
        """)


    @kernel(signatures=["float -> float"])
    def boom(x):
        os.abort()


    @hookimpl
    def register_decompositions(registry):
        registry.add("com.acme", "ErfGelu", erf_gelu_body, description="acme:ErfGelu (wrong)")
        registry.add("com.acme", "Boom", boom_body, description="acme:Boom")
        registry.add("com.acme", "Lonely", lonely_body, description="acme:Lonely")
        registry.add("com.microsoft", "FastGelu", WRONG_FAST_GELU,
                     description="acme:FastGelu (wrong)")


    @hookimpl
    def register_kernels(registry):
        registry.add("com.acme", "ErfGelu", f"{__name__}:erf_gelu")
        registry.add("com.acme", "Boom", f"{__name__}:boom")
''')


def _verdict_line(stdout: str) -> str:
    """rewrite's verdict: its last line with the indented lines it wraps onto (80 columns)."""
    lines = stdout.rstrip().splitlines()
    start = max(i for i, line in enumerate(lines) if not line.startswith(" "))
    return " ".join(line.strip() for line in lines[start:])


def _model(body: str, extra_inputs: str = "") -> str:
    return f"""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1, "com.microsoft" : 1]>
        g (float[N, 4] x{extra_inputs}) => (float[N, 4] y) {{ {body} }}"""


WRONG = _model("y = com.acme.ErfGelu (x)")
WRONG_CONTRIB = _model("y = com.microsoft.FastGelu (x)")
CRASHING = _model("y = com.acme.Boom (x)")
LONELY = _model("y = com.acme.Lonely (x)")
RIGHT = _model("y = Relu (x)")
# --partial: ErfGelu is rewritten (wrongly); CDist stays (the reference evaluator lacks it,
# no plugin decomposes it); onnxruntime runs both the original (the kernel, the contrib op)
# and the partial result
PARTIAL = """
    <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1, "com.microsoft" : 1]>
    g (float[3, 4] x) => (float[3, 3] y) {
        g1 = com.acme.ErfGelu (x)
        y = com.microsoft.CDist <metric: string = "sqeuclidean"> (g1, g1)
    }"""


@pytest.fixture(scope="module")
def plugin_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plugins") / "acme_verdicts.py"
    path.write_text(PLUGIN)
    return path


@pytest.fixture(scope="module")
def acme(plugin_file):
    return load_plugins([str(plugin_file)], autoload=False)


def cli(args, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_a_wrong_decomposition_for_the_reference_target_is_caught_by_a_kernel(
        plugin_file, tmp_path, capsys):
    """The reference evaluator cannot run com.acme ops; onnxruntime with the plugin's kernel
    runs the original, and the wrong body is a mismatch: exit 1, nothing written."""
    source = write_model(tmp_path / "in.onnx", model_from_text(WRONG))
    out = tmp_path / "out.onnx"
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "-t",
                             "reference", "--json"], capsys)
    assert code == 1, err
    report = json.loads(stdout)
    assert report["verdict"] == "mismatch" and not report["written"] and not out.exists()
    assert report["compare"]["oracle"] == "onnxruntime with plugin kernels"
    (target,) = report["compare"]["targets"]
    assert target["target"] == "reference" and target["status"] == "mismatch"
    assert 0.01 < target["max_abs"] < 0.1
    assert target["localization"]["rule"] == "acme:ErfGelu (wrong)"
    assert files(tmp_path) == {"in.onnx"}
    # the text report ends with the verdict and says nothing was written
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "-t",
                             "reference"], capsys)
    last = _verdict_line(stdout)
    assert code == 1 and last.startswith("✗ mismatch: differs from the original run on "
                                         "onnxruntime with plugin kernels")
    assert last.endswith("nothing written (--keep-failed writes it)")
    assert "✓ verified" not in stdout and "equal within" not in stdout


def test_a_wrong_decomposition_of_a_contrib_op_is_caught_by_onnxruntimes_own_kernel(
        acme, tmp_path):
    result = rewrite(model_from_text(WRONG_CONTRIB), ["reference"], plugins=acme,
                     confirm=False)
    report = result.report
    assert report.verdict == "mismatch" and report.exit_code == 1 and result.model is None
    assert report.comparison.oracle == "onnxruntime"
    assert [a for (_, plugin, rule, _), a in report.applied.items()] == [1]
    assert ("decomposition", "acme_verdicts", "acme:FastGelu (wrong)",
            "com.microsoft::FastGelu(1)") in report.applied


def test_a_crashing_kernel_leaves_the_rewrite_unverified(plugin_file, tmp_path, capsys):
    """The only runtimes for com.acme::Boom run its kernel, which aborts: nothing can run
    the original, so the (correct) decomposition is unverified: exit 3, not written."""
    source = write_model(tmp_path / "in.onnx", model_from_text(CRASHING))
    out = tmp_path / "out.onnx"
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "--json"],
                            capsys)
    assert code == 3, err
    report = json.loads(stdout)
    assert report["verdict"] == "unverified" and not out.exists()
    attempts = {a["target"]: a for a in report["compare"]["oracle_attempts"]}
    assert attempts["onnxruntime with plugin kernels"]["status"] == "crash"
    assert "SIGABRT" in attempts["onnxruntime with plugin kernels"]["error"]
    assert attempts["reference with plugin kernels"]["status"] == "crash"
    assert "could not evaluate the original" in report["verdict_reason"]
    # allowed: written, and still exit 3
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out,
                             "--allow-unverified"], capsys)
    assert code == 3 and out.exists(), err
    assert _verdict_line(stdout).startswith("! unverified: could not compare")


def test_an_op_with_no_oracle_is_unverified_and_written_only_when_allowed(
        plugin_file, tmp_path, capsys):
    source = write_model(tmp_path / "in.onnx", model_from_text(LONELY))
    out = tmp_path / "out.onnx"
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out], capsys)
    assert code == 3 and not out.exists(), stdout + err
    assert "com.acme::Lonely" in stdout and "--allow-unverified writes it" in stdout
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "--json",
                             "--allow-unverified"], capsys)
    report = json.loads(stdout)
    assert code == 3 and report["verdict"] == "unverified" and report["written"]
    assert out.exists() and report["exit_code"] == 3


@pytest.mark.parametrize("given, words", [
    ({"z": np.zeros((2, 4), np.float32)}, "the model has no input 'z'"),
    ({"x": np.zeros((2, 4), np.float64)}, "'x': float64 values, the model declares float"),
    ({"x": np.zeros((8,), np.float32)}, "'x': rank 1, the model declares rank 2"),
])
def test_bad_inputs_stop_before_any_work(given, words, plugin_file, tmp_path, capsys,
                                         monkeypatch):
    source = write_model(tmp_path / "in.onnx", model_from_text(WRONG))
    npz = tmp_path / "inputs.npz"
    np.savez(npz, **given)
    built = tmp_path / "built.txt"
    monkeypatch.setenv("ACME_BUILT", str(built))
    out = tmp_path / "out.onnx"
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "--inputs",
                             npz], capsys)
    assert code == 2 and stdout == "", err
    assert err.startswith("error: inputs: ") and words in err and err.count("\n") == 1
    assert not built.exists() and not out.exists()  # no builder ran, nothing written
    # the library raises the same error before any work
    with pytest.raises(InputError, match=words.replace("(", r"\(")):
        rewrite(source, output=out, plugins=load_plugins([str(plugin_file)], autoload=False),
                compare_options={"inputs": given})
    assert not built.exists()


def test_partial_with_a_failing_remedy_writes_nothing(plugin_file, tmp_path, capsys):
    """What --partial changed is verified like a whole rewrite: the partial result runs on
    onnxruntime (the reference target cannot run its CDist yet) and mismatches."""
    source = write_model(tmp_path / "in.onnx", model_from_text(PARTIAL))
    out = tmp_path / "out.onnx"
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "-t",
                             "reference", "--partial", "--json"], capsys)
    assert code == 1, err
    report = json.loads(stdout)
    assert report["verdict"] == "mismatch" and not out.exists()
    assert [r["op_type"] for r in report["remaining"]] == ["CDist"]
    (target,) = report["compare"]["targets"]
    assert target["runtime"] == "onnxruntime" and target["status"] == "mismatch"
    assert report["compare"]["oracle"] == "onnxruntime with plugin kernels"
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "-t",
                             "reference", "--partial", "--keep-failed"], capsys)
    assert code == 1 and out.exists(), err
    last = _verdict_line(stdout)
    assert last.startswith("✗ 1 finding(s) left; what --partial changed: mismatch: differs")


def test_partial_whose_change_is_right_is_written_but_not_verified_for_the_target(
        tmp_path, capsys):
    """The built-in FastGelu decomposition is right: the partial result (CDist left for the
    reference target) equals the original on onnxruntime, and is written; the reference
    target's own verdict is not "verified" (its runtime cannot run the result: issue 27)."""
    model = PARTIAL.replace("com.acme.ErfGelu", "com.microsoft.FastGelu")
    source = write_model(tmp_path / "in.onnx", model_from_text(model))
    out = tmp_path / "out.onnx"
    code, stdout, err = cli(["rewrite", source, "-o", out, "-t", "reference", "--partial",
                             "--json"], capsys)
    report = json.loads(stdout)
    assert code == 3 and report["verdict"] == "unverified" and out.exists(), err
    assert report["compare"]["oracle"] == "onnxruntime"
    (target,) = report["compare"]["targets"]
    assert target["verdict"] == "unverified" and target["runtime"] == "reference"
    assert target["elsewhere"]["runtime"] == "onnxruntime"
    assert target["elsewhere"]["status"] == "equal"


def test_no_verify_writes_and_says_not_verified(plugin_file, tmp_path, capsys):
    source = write_model(tmp_path / "in.onnx", model_from_text(WRONG))
    out = tmp_path / "out.onnx"
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "--no-verify"],
                            capsys)
    assert code == 0 and out.exists(), err
    last = _verdict_line(stdout)
    assert last.startswith("! not verified (verification turned off (--no-verify))")
    assert "✓ verified" not in stdout and "equal within tolerance" not in stdout
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "--no-verify",
                             "--json"], capsys)
    report = json.loads(stdout)
    assert code == 0 and report["verdict"] == "unverified" and report["compare"] is None


def test_generated_inputs_are_saved_and_reproduce_the_verdict(plugin_file, tmp_path,
                                                               capsys):
    source = write_model(tmp_path / "in.onnx", model_from_text(WRONG))
    out = tmp_path / "out.onnx"
    saved = tmp_path / "inputs.npz"
    code, stdout, err = cli(["-p", plugin_file, "rewrite", source, "-o", out, "--json",
                             "--save-inputs", saved, "--keep-failed", "--seed", "5",
                             "--dim", "N=6", "--atol", "1e-6"], capsys)
    first = json.loads(stdout)["compare"]
    assert code == 1 and saved.exists(), err
    assert first["inputs"]["saved"] == str(saved) and first["inputs"]["seeds"] == [5]
    # compare, on the inputs saved, gives the same numbers
    code, stdout, err = cli(["-p", plugin_file, "compare", source, out, "--inputs", saved,
                             "--json", "--atol", "1e-6"], capsys)
    again = json.loads(stdout)
    assert code == 1 and again["verdict"] == "mismatch", err
    assert again["inputs"]["shapes"] == {"x": "float32[6, 4]"}
    assert again["targets"][0]["max_abs"] == first["targets"][0]["max_abs"]
    # the .npz holds the set that decided the verdict (several regimes ran)
    assert first["inputs"]["sets"] > 1 and len(first["inputs"]["saved_sets"]) == 1
    # several input sets go to a test-data folder, which --inputs reads back
    folder = tmp_path / "sets"
    code, stdout, err = cli(["-p", plugin_file, "compare", source, out, "--runs", "3",
                             "--quick", "--save-inputs", folder, "--json"], capsys)
    assert code == 1 and sorted(files(folder)) == [f"test_data_set_{i}" for i in range(3)]
    code, stdout, err = cli(["-p", plugin_file, "compare", source, out, "--inputs", folder,
                             "--json"], capsys)
    assert code == 1 and json.loads(stdout)["inputs"]["sets"] == 3, err
    # without --quick, every regime's sets are saved, and read back give the same worst error
    folder = tmp_path / "regimes"
    code, stdout, err = cli(["-p", plugin_file, "compare", source, out, "--save-inputs",
                             folder, "--json"], capsys)
    every = json.loads(stdout)
    assert code == 1 and len(files(folder)) == every["inputs"]["sets"] > 1, err
    code, stdout, err = cli(["-p", plugin_file, "compare", source, out, "--inputs", folder,
                             "--json"], capsys)
    again = json.loads(stdout)
    assert code == 1 and again["targets"][0]["max_abs"] == every["targets"][0]["max_abs"]


def test_the_original_target_can_be_forced(acme):
    original = model_from_text(RIGHT)
    report = compare(original, original, ["onnxruntime"], plugins=acme,
                     original_target="reference")
    assert report.oracle == "reference" and report.verdict == "verified"
    report = compare(original, original, ["onnxruntime"], plugins=acme)
    assert report.oracle == "onnxruntime"


def test_expected_outputs_stand_in_for_the_oracle_in_rewrite(acme, tmp_path):
    """Outputs of the original computed elsewhere (PyTorch, test data) are the oracle: the
    wrong ErfGelu body is caught without running the original."""
    import math

    x = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4)
    erf = np.vectorize(math.erf)
    want = (0.5 * x * (1 + erf(x / math.sqrt(2)))).astype(np.float32)
    result = rewrite(model_from_text(WRONG), ["reference"], plugins=acme, confirm=False,
                     compare_options={"inputs": {"x": x}, "expected": {"y": want}})
    assert result.report.verdict == "mismatch"
    assert result.report.comparison.oracle == "expected"
    with pytest.raises(InputError, match="the model has no output 'z'"):
        rewrite(model_from_text(WRONG), ["reference"], plugins=acme,
                compare_options={"inputs": {"x": x}, "expected": {"z": want}})


def test_a_node_onnxruntime_refuses_at_run_time_is_run_by_its_kernel_for_the_oracle(
        corpus, plugins, tmp_path):
    """GPT-2 (Megatron) holds an Attention whose 4-D mask onnxruntime's CPU kernel refuses
    only at run time: the oracle is onnxruntime with the plugin's numpy Attention kernel for
    that one node; the rewritten model runs on onnxruntime itself."""
    source = corpus / "ort_gpt2_megatron_skiplayernorm.onnx"
    result = rewrite(source, ["onnxruntime"], output=tmp_path / "out.onnx", plugins=plugins)
    report = result.report
    assert report.verdict == "verified", report.verdict_reason
    attempts = report.comparison.oracle_attempts
    assert attempts[0]["target"] == "onnxruntime" and "4D mask" in attempts[0]["error"]
    assert report.comparison.oracle == ("onnxruntime with plugin kernels (for the node it "
                                        "refused, 'GptAttention_0')")
    assert (tmp_path / "out.onnx").exists()
