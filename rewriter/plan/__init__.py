"""Stage 3, plan: remedies offered per finding (decompositions, kernels, passes), chosen."""
