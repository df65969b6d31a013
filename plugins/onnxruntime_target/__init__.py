"""Target ``onnxruntime``."""

from .target import *  # noqa: F403
from .target import register_targets  # noqa: F401
