"""Stage 4, apply: kernels retargeted, decompositions spliced, leftovers cleaned."""
