"""One trainer skeleton and its per-model steps; optimisers, run logging, sweeps."""
