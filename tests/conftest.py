"""Shared fixtures: a fresh plugin manager (third-party autoload off), model builders."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def plugins():
    from rewriter.manager import load_plugins

    return load_plugins(autoload=False)


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus folder {CORPUS} is absent")
    return CORPUS


def model_from_text(text: str) -> onnx.ModelProto:
    """Parse ONNX text format, asserting it is well formed."""
    return onnx.parser.parse_model(text)


def write_model(path: Path, model: onnx.ModelProto) -> Path:
    path.write_bytes(model.SerializeToString())
    return path
