"""Per-example exact and token accuracy of `evaluate`'s predictions.npz against the split's labels
(runs/hrm_eval_{scheme} = test split, runs/hrm_evaltrain_{scheme} = train split; label 0 = padding)."""

import numpy as np

for split, prefix in (("train", "hrm_evaltrain"), ("test", "hrm_eval")):
    labels = np.load(f"runs/arc_aug/{split}/all__labels.npy").astype(int)
    inputs = np.load(f"runs/arc_aug/{split}/all__inputs.npy")
    for scheme in ("baseline", "deeploop"):
        d = np.load(f"runs/{prefix}_{scheme}/predictions.npz")
        assert (d["inputs"] == inputs).all(), "predictions are not in the split's order"
        pred = d["predictions"].astype(int)
        mask = labels != 0
        exact = [(pred[i][mask[i]] == labels[i][mask[i]]).all() for i in range(len(labels))]
        print(f"{split} {scheme}: exact {sum(exact)}/{len(labels)} = {np.mean(exact):.4f}; "
              f"token accuracy (non-pad) {(pred[mask] == labels[mask]).mean():.4f}")
