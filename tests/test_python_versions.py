"""tools/python_versions.py: the lower bounds it pins are pyproject's, and the Pythons it finds
include the one running the tests (where it is a pyenv one)."""

from __future__ import annotations

import importlib.metadata as metadata
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import python_versions  # noqa: E402


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".")[:3] if p.isdigit())


def test_lower_bounds_are_pyprojects_and_installed_versions_meet_them():
    bounds = python_versions.lower_bounds()
    assert {"onnx", "onnxruntime"} <= set(bounds)
    for name in ("onnx", "onnxruntime", "numpy"):
        assert _version(metadata.version(name)) >= _version(bounds[name]), name


def test_the_running_python_is_found_when_it_is_a_pyenv_one():
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not str(Path(sys.base_prefix)).startswith(str(python_versions.PYENV)):
        pytest.skip("not a pyenv Python")
    found = dict(python_versions.found_pythons([]))
    assert minor in found
    assert found[minor].is_file()


def test_failed_tests_are_read_from_pytests_summary():
    output = """x
FAILED tests/test_a.py::test_one[float-13] - AssertionError: no
ERROR tests/test_b.py::test_two
SKIPPED [1] tests/test_c.py:3: why
1 failed, 1 error, 3 passed in 1.00s
"""
    assert python_versions.failed_tests(output) == [
        "tests/test_a.py::test_one[float-13]", "tests/test_b.py::test_two"]
