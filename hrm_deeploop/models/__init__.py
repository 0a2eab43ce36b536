"""Architecture only: the looped-block core, residual scaling, HRM, TRM, the looped GPT, losses, kernels."""
