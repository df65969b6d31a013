"""Stage 2, detect: targets (what a runtime can run) and the walk that finds what it cannot."""
