"""The kernels shipped in custom_ops/ (rewriter_custom_ops), each signature against an
independent reference on random and edge inputs (NaN, inf, empty tensors, broadcasting),
through both adapters: onnxruntime (onnxruntime-extensions Python ops, real sessions) and
the ONNX reference evaluator. Where onnxruntime-extensions runs the op natively, the Python
kernel must agree with the native op (it is the oracle used for the original model)."""

from __future__ import annotations

import io
import math
import struct
import zlib

import numpy as np
import onnx
import onnxruntime as ort
import onnxruntime_extensions
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rewriter.comparison.runtime import KernelSession
from rewriter.plan.kernels import (
    CONTRIB_DOMAIN,
    KernelUse,
    Signature,
    load_kernel,
    op_name,
    reference_ops,
    register_onnxruntime,
    retarget_node,
)
from tests.conftest import make_model

ELEM = {"float": TensorProto.FLOAT, "double": TensorProto.DOUBLE, "uint8": TensorProto.UINT8,
        "string": TensorProto.STRING, "bool": TensorProto.BOOL, "int64": TensorProto.INT64}
RNG = np.random.default_rng(7)


# -- independent references ----------------------------------------------------------------


def ref_fast_gelu(x, bias=None):
    z = np.asarray(x, dtype=np.float64)
    if bias is not None:
        z = z + np.asarray(bias, np.float64)
    out = np.empty(z.shape, dtype=np.float64)
    for i, v in np.ndenumerate(z):
        if math.isnan(v):
            out[i] = math.nan
        elif math.isinf(v):
            out[i] = v if v > 0 else -0.0
        else:
            out[i] = 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    return out.astype(np.asarray(x).dtype)


def ref_neg_pos(x):
    neg = np.array([v if not v > 0 else 0.0 for v in x.reshape(-1)], dtype=x.dtype)
    pos = np.array([v if v > 0 else 0.0 for v in x.reshape(-1)], dtype=x.dtype)
    return neg.reshape(x.shape), pos.reshape(x.shape)


def ref_masked_fill(value, mask):
    return np.array([v for v, m in zip(value.reshape(-1), mask.reshape(-1)) if m], dtype=object)


def ref_string_lower(x):
    def low(s):
        out = []
        for c in s:
            o = ord(c)
            hit = (0x41 <= o <= 0x5A or 0xC0 <= o <= 0xDE and o != 0xD7
                   or 0x399 <= o <= 0x3A0 and o != 0x39E or 0x410 <= o <= 0x42F
                   or 0x1F08 <= o <= 0x1F68)
            out.append(chr(o + 32) if hit else c)
        return "".join(out)
    return np.vectorize(low, otypes=[object])(x) if x.size else x.astype(object)


def ref_string_split(text, delimiter, skip_empty):
    delim, skip = str(delimiter.reshape(-1)[0]), bool(skip_empty.reshape(-1)[0])
    rows = []
    for s in text:
        if not s:
            tokens = []
        elif not delim:
            tokens = list(s)
        else:
            tokens, cur = [], ""
            for c in s:
                if c in delim:
                    tokens.append(cur)
                    cur = ""
                else:
                    cur += c
            tokens.append(cur)
            if skip:
                tokens = [t for t in tokens if t]
        rows.append(tokens)
    indices = [(r, c) for r, toks in enumerate(rows) for c in range(len(toks))]
    values = [t for toks in rows for t in toks]
    return (np.array(indices, dtype=np.int64).reshape(-1, 2), np.array(values, dtype=object),
            np.array([len(rows), max([len(t) for t in rows], default=0)], dtype=np.int64))


def png_bytes(pixels_rgb: np.ndarray) -> np.ndarray:
    """A PNG written with zlib alone (independent of Pillow)."""
    h, w, _ = pixels_rgb.shape
    raw = b"".join(b"\x00" + pixels_rgb[r].astype(np.uint8).tobytes() for r in range(h))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return np.frombuffer(data, dtype=np.uint8).copy()


def png_pixels(data: np.ndarray) -> np.ndarray:
    """Decode an 8-bit RGB, non-interlaced PNG with zlib alone (filters 0-4)."""
    raw = data.tobytes()
    pos, idat, w, h, channels = 8, b"", 0, 0, 3
    while pos < len(raw):
        (length,) = struct.unpack(">I", raw[pos:pos + 4])
        kind, body = raw[pos + 4:pos + 8], raw[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    flat = zlib.decompress(idat)
    stride = w * channels
    out = np.zeros((h, stride), dtype=np.int32)
    for r in range(h):
        f, line = flat[r * (stride + 1)], np.frombuffer(
            flat[r * (stride + 1) + 1:(r + 1) * (stride + 1)], dtype=np.uint8).astype(np.int32)
        prev = out[r - 1] if r else np.zeros(stride, dtype=np.int32)
        cur = np.zeros(stride, dtype=np.int32)
        for i in range(stride):
            a = cur[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 0:
                pred = 0
            elif f == 1:
                pred = a
            elif f == 2:
                pred = b
            elif f == 3:
                pred = (a + b) // 2
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            cur[i] = (line[i] + pred) & 0xFF
        out[r] = cur
    return out.reshape(h, w, channels)[..., :3].astype(np.uint8)


# -- cases: (domain, op, signature, inputs, attributes, reference outputs) ------------------

FLOATS = {
    "float": np.float32, "double": np.float64,
}


def _edge(dtype):
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e30, 3.5], dtype=dtype)


def cases():
    out = []
    for t, dt in FLOATS.items():
        x = RNG.standard_normal((3, 4)).astype(dt)
        b = RNG.standard_normal((4,)).astype(dt)  # broadcast over the last axis
        out += [
            ("ai.onnx.contrib", "FastGelu", f"{t} -> {t}", [x], {}, [ref_fast_gelu(x)], "random"),
            ("ai.onnx.contrib", "FastGelu", f"{t} -> {t}", [_edge(dt)], {},
             [ref_fast_gelu(_edge(dt))], "nan-inf"),
            ("ai.onnx.contrib", "FastGelu", f"{t}, {t} -> {t}", [x, b], {},
             [ref_fast_gelu(x, b)], "broadcast"),
            ("ai.onnx.contrib", "FastGelu", f"{t} -> {t}", [np.zeros((0, 3), dt)], {},
             [np.zeros((0, 3), dt)], "empty"),
        ]
    for x, label in ((RNG.standard_normal((2, 3)).astype(np.float32), "random"),
                     (_edge(np.float32), "nan-inf"), (np.zeros((0, 2), np.float32), "empty")):
        out.append(("ai.onnx.contrib", "NegPos", "float -> float, float", [x], {},
                    list(ref_neg_pos(x)), label))
    words = np.array(["Hello", "WORLD", "ÄÖÜ ẞ", "İI", "ΣΑΣ Ω", "Я", "", "mixed Case"],
                     dtype=object)
    out += [
        ("ai.onnx.contrib", "StringLower", "string -> string", [words.reshape(2, 4)], {},
         [ref_string_lower(words.reshape(2, 4))], "random"),
        ("ai.onnx.contrib", "StringLower", "string -> string", [np.array([], dtype=object)], {},
         [np.array([], dtype=object)], "empty"),
    ]
    mask = np.array([True, False, True, True, False, False, True, False])
    out += [
        ("ai.onnx.contrib", "MaskedFill", "string, bool -> string", [words, mask], {},
         [ref_masked_fill(words, mask)], "random"),
        ("ai.onnx.contrib", "MaskedFill", "string, bool -> string",
         [np.array([], dtype=object), np.array([], dtype=bool)], {},
         [np.array([], dtype=object)], "empty"),
    ]
    text = np.array(["a,,b", "", "c, d", ",x,", "no-delims"], dtype=object)
    for delim in (",", ", ", "", "zz"):
        for skip in (True, False):
            args = [text, np.array([delim], dtype=object), np.array([skip])]
            out.append(("ai.onnx.contrib", "StringSplit",
                        "string, string, bool -> int64, string, int64", args, {},
                        list(ref_string_split(*args)), f"delim={delim!r}-skip={skip}"))
    empty = [np.array([], dtype=object), np.array([","], dtype=object), np.array([True])]
    out.append(("ai.onnx.contrib", "StringSplit", "string, string, bool -> int64, string, int64",
                empty, {}, list(ref_string_split(*empty)), "empty"))
    pixels = RNG.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    png = png_bytes(pixels)
    for fmt, expect in (("RGB", pixels), ("BGR", pixels[..., ::-1])):
        out.append(("", "ImageDecoder", "uint8 -> uint8", [png], {"pixel_format": fmt},
                    [expect], f"png-{fmt}"))
    # ITU-R 601 luma in 16-bit fixed point, rounded
    p32 = pixels.astype(np.int64)
    gray = ((p32[..., 0] * 19595 + p32[..., 1] * 38470 + p32[..., 2] * 7471 + 32768) >> 16)
    gray = gray.astype(np.uint8)[..., None]
    out.append(("", "ImageDecoder", "uint8 -> uint8", [png], {"pixel_format": "Grayscale"},
                [gray], "png-gray"))
    out += [
        ("com.microsoft.extensions", "DecodeImage", "uint8 -> uint8", [png], {},
         [pixels[..., ::-1]], "png-bgr"),
        ("com.microsoft.extensions", "DecodeImage", "uint8 -> uint8", [png],
         {"color_space": "rgb"}, [pixels], "png-rgb"),
    ]
    return out


CASES = cases()


def _id(case):
    return f"{case[1]}[{case[2]}]-{case[6]}"


def _compare(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, (a.shape, e.shape)
        if e.dtype == object:
            assert a.tolist() == e.tolist()
        elif e.dtype.kind == "f":
            np.testing.assert_allclose(a.astype(e.dtype), e, rtol=1e-5, atol=1e-6)
            assert np.array_equal(np.signbit(a[a == 0]), np.signbit(e[e == 0])) or e.size == 0
        else:
            assert a.dtype == e.dtype and np.array_equal(a, e)


@pytest.fixture(scope="module")
def registry(plugins):
    return plugins.registry


def _kernel(registry, domain, op):
    return load_kernel(registry.kernels[(domain, op)], registry)


def _one_node(domain, op, signature: Signature, attrs, n_in, opset_domain=None):
    ins = [helper.make_tensor_value_info(f"i{k}", ELEM[t], None)
           for k, t in enumerate(signature.inputs[:n_in])]
    outs = [helper.make_tensor_value_info(f"o{k}", ELEM[t], None)
            for k, t in enumerate(signature.outputs)]
    node = helper.make_node(op, [i.name for i in ins], [o.name for o in outs], domain=domain,
                            **attrs)
    imports = [helper.make_opsetid("", 20)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(helper.make_graph([node], "k", ins, outs), opset_imports=imports)
    model.ir_version = 9
    return model


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_kernel_direct(registry, case):
    domain, op, sig, inputs, attrs, expected, _ = case
    k = _kernel(registry, domain, op)
    signature = Signature.parse(sig)
    assert signature in k.signatures
    result = k(*inputs, **k.with_defaults(attrs))
    _compare(result if isinstance(result, tuple) else (result,), expected)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_kernel_under_onnxruntime(registry, case):
    """The onnxruntime adapter: a Python op registered with onnxruntime-extensions."""
    domain, op, sig, inputs, attrs, expected, _ = case
    k = _kernel(registry, domain, op)
    signature = Signature.parse(sig)
    entry = registry.kernels[(domain, op)]
    use = KernelUse(op_name(domain, op, signature, entry.reference), domain, op, entry.reference,
                    entry.plugin, signature)
    register_onnxruntime([use], {use.op_name: k})
    model = _one_node(domain, op, signature, attrs, len(inputs))
    retarget_node(model.graph.node[0], use, k)  # as the rewrite does
    model.opset_import.append(helper.make_opsetid(CONTRIB_DOMAIN, 1))
    so = ort.SessionOptions()
    so.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    sess = KernelSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    _compare(sess.run(None, {f"i{i}": v for i, v in enumerate(inputs)}), expected)


# standard-domain cases are left out: the reference evaluator implements those ops itself
@pytest.mark.parametrize("case", [c for c in CASES if c[0] != ""], ids=_id)
def test_kernel_under_reference_evaluator(registry, case):
    """The reference adapter: OpRun classes for the op in its own domain."""
    domain, op, sig, inputs, attrs, expected, _ = case
    signature = Signature.parse(sig)
    model = _one_node(domain, op, signature, attrs, len(inputs))
    ops = reference_ops(model, registry)
    assert [(c.op_domain, c.__name__) for c in ops] == [(domain, op)]
    result = ReferenceEvaluator(model, new_ops=ops).run(
        None, {f"i{i}": v for i, v in enumerate(inputs)})
    _compare(result, expected)


NATIVE = [c for c in CASES if c[0] != "" and c[1] != "FastGelu"]


@pytest.mark.parametrize("case", NATIVE, ids=_id)
def test_python_kernel_agrees_with_native_op(case):
    """The oracle is only as good as its agreement with onnxruntime-extensions' own op."""
    domain, op, sig, inputs, attrs, expected, _ = case
    signature = Signature.parse(sig)
    model = _one_node(domain, op, signature, attrs, len(inputs))
    so = ort.SessionOptions()
    so.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    _compare(sess.run(None, {f"i{i}": v for i, v in enumerate(inputs)}), expected)


def test_fast_gelu_agrees_with_onnxruntime_contrib_fastgelu(registry):
    """ai.onnx.contrib::FastGelu has the semantics of onnxruntime's own com.microsoft
    FastGelu (which runs on CPU natively): an independent implementation to agree with."""
    k = _kernel(registry, "ai.onnx.contrib", "FastGelu")
    x = RNG.standard_normal((4, 8)).astype(np.float32) * 4
    b = RNG.standard_normal((8,)).astype(np.float32)
    node = helper.make_node("FastGelu", ["x", "b"], ["y"], domain="com.microsoft")
    model = make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
                      helper.make_tensor_value_info("b", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    (native,) = ort.InferenceSession(model.SerializeToString(),
                                     providers=["CPUExecutionProvider"]).run(None, {"x": x, "b": b})
    np.testing.assert_allclose(k(x, b), native, rtol=1e-5, atol=1e-6)


def test_image_decoder_matches_the_spec_test_data(registry, corpus):
    from onnx import numpy_helper

    data = corpus / "testdata" / "onnx_op20_image_decoder_jpeg_rgb" / "test_data_set_0"
    x = numpy_helper.to_array(onnx.load_tensor(str(data / "input_0.pb")))
    y = numpy_helper.to_array(onnx.load_tensor(str(data / "output_0.pb")))
    k = _kernel(registry, "", "ImageDecoder")
    assert np.array_equal(k(x, pixel_format="RGB"), y)
    assert np.array_equal(k(x, pixel_format="BGR"), y[..., ::-1])


def test_image_decoder_rejects_garbage_and_unknown_formats(registry):
    k = _kernel(registry, "", "ImageDecoder")
    with pytest.raises(Exception, match="cannot identify"):
        k(np.arange(10, dtype=np.uint8), pixel_format="RGB")
    with pytest.raises(ValueError, match="pixel_format"):
        k(png_bytes(np.zeros((2, 2, 3), np.uint8)), pixel_format="CMYK")


def test_encode_image_png_round_trips_through_an_independent_decoder(registry):
    k = _kernel(registry, "com.microsoft.extensions", "EncodeImage")
    bgr = RNG.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
    data = k(bgr, **k.with_defaults({}))
    assert data.dtype == np.uint8 and data.ndim == 1
    assert np.array_equal(png_pixels(data), bgr[..., ::-1])
    jpg = k(bgr, **k.with_defaults({"format": "jpg"}))
    assert jpg[:2].tolist() == [0xFF, 0xD8]


def test_native_encode_image_round_trips_with_the_python_decoder(registry):
    """ortx's native EncodeImage output decodes (by the Python DecodeImage) to its input."""
    model = _one_node("com.microsoft.extensions", "EncodeImage",
                      Signature.parse("uint8 -> uint8"), {"format": "png"}, 1)
    so = ort.SessionOptions()
    so.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    bgr = RNG.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
    (data,) = ort.InferenceSession(model.SerializeToString(), so).run(None, {"i0": bgr})
    decode = _kernel(registry, "com.microsoft.extensions", "DecodeImage")
    assert np.array_equal(decode(data, color_space="bgr"), bgr)


def test_super_resolution_round_trip(registry):
    """Pre then post processing with Y unchanged gives back (nearly) the image."""
    from PIL import Image

    pre = _kernel(registry, "ai.onnx.contrib", "SuperResolutionPreProcess")
    post = _kernel(registry, "ai.onnx.contrib", "SuperResolutionPostProcess")
    yy, xx = np.mgrid[0:16, 0:12]  # smooth: JPEG's chroma subsampling keeps it
    rgb = np.stack([40 + 10 * yy, 200 - 8 * xx, 100 + 4 * (xx + yy)], -1).astype(np.uint8)
    y, cr, cb = pre(png_bytes(rgb))
    assert y.shape == cr.shape == cb.shape == (1, 1, 16, 12) and y.dtype == np.float32
    # independent YCrCb (OpenCV's float formulas, delta 0.5)
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    luma = 0.299 * r + 0.587 * g + 0.114 * b
    np.testing.assert_allclose(y[0, 0], luma / 255, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cr[0, 0], (r - luma) * 0.713 + 0.5, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(cb[0, 0], (b - luma) * 0.564 + 0.5, rtol=1e-5, atol=1e-3)
    jpeg = post(y, cr, cb)
    assert jpeg.shape[0] == 1 and jpeg.dtype == np.uint8
    back = np.asarray(Image.open(io.BytesIO(jpeg.tobytes())).convert("RGB")).astype(int)
    assert back.shape == rgb.shape
    assert np.abs(back - rgb).mean() < 3  # JPEG at quality 95


def test_bicubic_resize_follows_opencv_inter_cubic():
    """cv::resize INTER_CUBIC: Keys' kernel with a = -0.75, half-pixel centres, replicated
    borders. A constant stays constant; a mirrored input gives a mirrored output; one value
    worked by hand: upscaling the ramp 0..7 by 2, output 3 sits at 1.25 (t = 0.25), with
    weights (-0.10546875, 0.87890625, 0.26171875, -0.03515625) on inputs 0..3."""
    from rewriter_custom_ops._color import resize_bicubic

    assert np.allclose(resize_bicubic(np.full((3, 4), 7.0), 6, 8), 7.0)
    ramp = np.tile(np.arange(8, dtype=np.float32), (4, 1))
    up = resize_bicubic(ramp, 8, 16)
    assert up[0, 3] == pytest.approx(0.87890625 + 2 * 0.26171875 - 3 * 0.03515625)
    img = RNG.standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_allclose(resize_bicubic(img[:, ::-1], 9, 13),
                               resize_bicubic(img, 9, 13)[:, ::-1], atol=1e-5)


def test_every_shipped_kernel_is_tested(registry):
    tested = {(c[0], c[1]) for c in CASES} | {
        ("com.microsoft.extensions", "EncodeImage"),  # round trips above
        ("ai.onnx.contrib", "SuperResolutionPreProcess"),
        ("ai.onnx.contrib", "SuperResolutionPostProcess"),
    }
    shipped = {key for key, e in registry.kernels.items() if e.plugin == "custom-ops"}
    assert shipped == tested
    for key in shipped:  # every signature of every kernel
        k = _kernel(registry, *key)
        covered = {Signature.parse(c[2]) for c in CASES if (c[0], c[1]) == key}
        if key in {(c[0], c[1]) for c in CASES}:
            assert set(k.signatures) == covered, key


def test_fused_swish_example(registry):
    from rewriter_custom_ops.fused_swish import kernel as swish

    for dt in (np.float32, np.float64):
        x = np.concatenate([RNG.standard_normal(20), _edge(np.float64)]).astype(dt)
        with np.errstate(all="ignore"):
            expected = np.array([v / (1 + math.exp(-2.0 * v)) if abs(v) < 300 and v == v
                                 else (v if v > 0 else (0.0 if v < 0 else v)) for v in x], dt)
        got = swish(x, alpha=2.0)
        assert got.dtype == dt
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-12)
