"""The verdict on a rewritten model, and the exit code each verdict maps to.

- ``verified``: every target ran the result and it matched the original, run by an oracle
  (a runtime that runs the original, or outputs given with ``--expected``);
- ``mismatch``: compared and found different, or the result fails validation or fails on a
  target where the original runs;
- ``unverified``: no comparison could decide (no runtime runs the original, a run crashed,
  timed out or ran out of memory, ...), or verification was turned off (``--no-verify``);
- ``unchanged``: nothing needed rewriting; the output is the input model.

Only ``verified`` and ``unchanged`` exit 0, and ``unverified`` when the user turned
verification off.
"""

from __future__ import annotations

from rewriter.errors import EXIT_FINDINGS, EXIT_OK, EXIT_UNVERIFIED
from rewriter.graph.textenum import TextEnum


class Verdict(TextEnum):
    """A string enum: ``Verdict.VERIFIED == "verified"``, and JSON holds the value."""

    VERIFIED = "verified"
    MISMATCH = "mismatch"
    UNVERIFIED = "unverified"
    UNCHANGED = "unchanged"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self]


VERIFIED, MISMATCH, UNVERIFIED, UNCHANGED = Verdict


class Status(TextEnum):
    """How one target's run of the rewritten model compared with the original's."""

    EQUAL = "equal"  # every output within tolerance
    MISMATCH = "mismatch"  # some output differs
    ERROR = "error"  # it could not be run or compared (the report says why)

VERDICTS = tuple(Verdict)
NOT_VERIFIED = "verification turned off (--no-verify)"

EXIT_CODES = {VERIFIED: EXIT_OK, UNCHANGED: EXIT_OK, MISMATCH: EXIT_FINDINGS,
              UNVERIFIED: EXIT_UNVERIFIED}
