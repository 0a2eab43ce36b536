"""ARC-AGI data: sources, validation, augmentation, dataset build, pictures. numpy + numba only (no torch)."""
