"""How many test puzzles of a Sudoku CSV folder are equivalent to a training puzzle under the
augmentation group of `build-puzzles` (digit relabelling, band/stack permutations, row/column
permutations within a band/stack, and transposition when the boxes are square)? Brute force over
the geometric transforms, digits canonicalised by order of first appearance. Used for
docs/results.md section 4.1:

    PYTHONPATH=. python docs/figures/sudoku_equivalence.py runs/study/data/raw/sudoku6 6
    PYTHONPATH=. python docs/figures/sudoku_equivalence.py runs/study/data/raw/sudoku4 4
"""
import itertools
import sys

import numpy as np

from arc_data.puzzles.csvfile import read_puzzle_csv
from arc_data.sudoku import box_shape

n = int(sys.argv[2])
br, bc = box_shape(n)


def read(p):
    """Questions as digits 0..n (0 = blank), one row per puzzle, via the builder's CSV reader."""
    q = read_puzzle_csv(p).questions.astype(np.int64) - ord("0")
    return np.where((q >= 1) & (q <= n), q, 0)


def within(nb, bs):
    res = []
    for bands in itertools.permutations(range(nb)):
        for inner in itertools.product(*[list(itertools.permutations(range(bs)))] * nb):
            res.append([b * bs + inner[i][k] for i, b in enumerate(bands) for k in range(bs)])
    return res


idx = np.arange(n * n).reshape(n, n)
G = np.array([(idx.T if t else idx)[np.ix_(r, c)].ravel() for t in ([False, True] if br == bc else [False])
              for r in within(n // br, br) for c in within(n // bc, bc)])


def canon(a):
    A = a[G]  # (|G|, n*n)
    first = np.where((A[:, :, None] == np.arange(1, n + 1)).any(1),
                     (A[:, :, None] == np.arange(1, n + 1)).argmax(1), 10**6)  # (|G|, n) first position of digit
    rank = np.argsort(np.argsort(first, 1), 1) + 1  # digit d -> order of first appearance
    lut = np.concatenate([np.zeros((len(G), 1), int), rank], 1)
    B = np.take_along_axis(lut, A, 1)
    return min(map(bytes, B.astype(np.uint8)))


root = sys.argv[1]
tr = {canon(q) for q in read(f"{root}/train.csv")}
te = [canon(q) for q in read(f"{root}/test.csv")]
print(f"{root}: {len(G)} geometric transforms x digit relabelling; train puzzles fall into {len(tr)} classes; "
      f"{sum(c in tr for c in te)} of {len(te)} test puzzles are equivalent to a training puzzle "
      f"({len(set(te))} distinct test classes)")
