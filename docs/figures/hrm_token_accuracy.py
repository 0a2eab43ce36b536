"""Per-example exact and token accuracy of evaluate's predictions.npz against the split's labels."""
import numpy as np
for split, pre in (("train", "hrm_evaltrain"), ("test", "hrm_eval")):
    L = np.load(f'runs/arc_aug/{split}/all__labels.npy').astype(int)
    I = np.load(f'runs/arc_aug/{split}/all__inputs.npy')
    for s in ['baseline', 'deeploop']:
        d = np.load(f'runs/{pre}_{s}/predictions.npz')
        assert (d['inputs'] == I).all()
        P = d['predictions'].astype(int)
        mask = L != 0
        ex = [(P[i][mask[i]] == L[i][mask[i]]).all() for i in range(len(L))]
        print(f"{split} {s}: exact {sum(ex)}/{len(L)} = {np.mean(ex):.4f}; token accuracy (non-pad) {(P[mask] == L[mask]).mean():.4f}")
