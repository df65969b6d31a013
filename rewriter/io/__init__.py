"""Stage 1, load and I/O: safe loading, external data, atomic output, model inputs."""
