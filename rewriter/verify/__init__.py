"""Stage 5, verify: structural checks of the result, and the verdicts."""
