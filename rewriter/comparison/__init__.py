"""Stage 6, compare: the numeric comparison with the original on real runtimes."""
