"""Target ``tract``."""

from .target import *  # noqa: F403
from .target import register_decompositions, register_targets  # noqa: F401
