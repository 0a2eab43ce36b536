"""The on-disk dataset format. arc_data owns it; every other package imports these constants
(one import name: `from arc_data import format as fmt`).

HRM layout (readable by HRM's own loader), per split `<out>/<split>/`:
    all__inputs.npy               uint8 [E, 900]  encoded inputs
    all__labels.npy               uint8 [E, 900]  encoded outputs (0 = PAD, unsupervised)
    all__puzzle_identifiers.npy   int32 [P]       global id of each puzzle
    all__puzzle_indices.npy       int32 [P+1]     CSR: puzzle p owns examples [pi[p], pi[p+1])
    all__group_indices.npy        int32 [G+1]     CSR: group g owns puzzles [gi[g], gi[g+1])
    dataset.json                  metadata (DatasetMeta fields)
Top level `<out>/`:
    identifiers.json              list: id -> puzzle name (0 = "<blank>"), HRM naming
    augmentations.npz             the augmentation table (below); nothing downstream parses names
    manifest.json                 sources' content hashes, options, package version, counts
Grid puzzles (build-puzzles) add `<split>/puzzle_augmentations.npz`, one row per puzzle (arc_data.puzzles.build).

Augmentation table (`augmentations.npz`, indexed by puzzle identifier, row 0 = blank):
    base_task   int32 [num_ids]      index into `task_names` (-1 for the blank row)
    dihedral    uint8 [num_ids]      dihedral transform id 0..7 applied after recolouring
    colour_map  uint8 [num_ids, 10]  original colour k -> colour_map[k]; colour_map[0] == 0
    task_names  <U  [num_tasks]      base task names (fixed-width unicode, no pickle)

Compact layout (`materialize=false`; `manifest.json` says `"layout": "compact"`): the same files
except `all__inputs.npy` / `all__labels.npy`, plus the plan they are encoded from:
    <out>/grids.npz               cells uint8 [C] (all grids, row-major, concatenated),
                                  grid_offset int64 [Ng], grid_shape int64 [Ng, 2],
                                  pair_grids int64 [Np, 2] (input grid, output grid) per pair
    <split>/plan__group_pairs.npy         int64 [sum]   pair ids of each group's examples, in order
    <split>/plan__group_pair_indices.npy  int64 [G+1]   CSR into plan__group_pairs
    <split>/plan__offsets.npy             uint8 [E, 2]  (row, col) translation of each example
Example e of puzzle p in group g is pair `group_pairs[gpi[g] + e - pi[p]]` under the augmentation of
puzzle identifier `puzzle_identifiers[p]`, drawn at `offsets[e]` (`arc_data.dataset` reads both).

Encoding (HRM spec 1.5): 30x30 canvas, row-major, PAD=0, EOS=1, colour c -> c+2 (vocab 12).
"""

from __future__ import annotations

import numpy as np

MAX_SIDE = 30
SEQ_LEN = MAX_SIDE * MAX_SIDE
PAD = 0
EOS = 1
COLOUR_OFFSET = 2
VOCAB_SIZE = 12
IGNORE_LABEL_ID = 0  # raw label value that the loader rewrites to -100
BLANK_ID = 0
BLANK_NAME = "<blank>"
SET_NAME = "all"
SPLITS = ("train", "test")
AUG_SEPARATOR = "_"

INPUTS_FILE = f"{SET_NAME}__inputs.npy"
LABELS_FILE = f"{SET_NAME}__labels.npy"
PUZZLE_IDS_FILE = f"{SET_NAME}__puzzle_identifiers.npy"
PUZZLE_INDICES_FILE = f"{SET_NAME}__puzzle_indices.npy"
GROUP_INDICES_FILE = f"{SET_NAME}__group_indices.npy"
META_FILE = "dataset.json"
IDENTIFIERS_FILE = "identifiers.json"
AUGMENTATIONS_FILE = "augmentations.npz"
MANIFEST_FILE = "manifest.json"
PUZZLE_AUGMENTATIONS_FILE = "puzzle_augmentations.npz"  # build-puzzles: per split (arc_data.puzzles.build)
GRIDS_FILE = "grids.npz"
# every name a build (build-arc, build-puzzles) puts at the top of its folder: overwrite=true replaces a
# folder holding its manifest and nothing else (arc_data.files.guard.check_replaceable)
BUILD_OUTPUTS = (IDENTIFIERS_FILE, AUGMENTATIONS_FILE, MANIFEST_FILE, GRIDS_FILE, *SPLITS)
PLAN_GROUP_PAIRS_FILE = "plan__group_pairs.npy"
PLAN_GROUP_PAIR_INDICES_FILE = "plan__group_pair_indices.npy"
PLAN_OFFSETS_FILE = "plan__offsets.npy"

# dihedral tid -> inverse tid (HRM dataset/common.py)
DIHEDRAL_INVERSE = np.array([0, 3, 2, 1, 4, 5, 6, 7], dtype=np.uint8)


def dihedral(grid: np.ndarray, tid: int) -> np.ndarray:
    """Reference dihedral transform (NumPy semantics, HRM spec 1.3). Returns a contiguous copy."""
    if tid == 0:
        out = grid
    elif tid == 1:
        out = np.rot90(grid, k=1)
    elif tid == 2:
        out = np.rot90(grid, k=2)
    elif tid == 3:
        out = np.rot90(grid, k=3)
    elif tid == 4:
        out = np.fliplr(grid)
    elif tid == 5:
        out = np.flipud(grid)
    elif tid == 6:
        out = grid.T
    elif tid == 7:
        out = np.fliplr(np.rot90(grid, k=1))
    else:
        raise ValueError(f"dihedral id must be 0..7, got {tid}")
    return np.ascontiguousarray(out)


def inverse_dihedral(grid: np.ndarray, tid: int) -> np.ndarray:
    return dihedral(grid, int(DIHEDRAL_INVERSE[tid]))


def augment_grid(grid: np.ndarray, tid: int, colour_map: np.ndarray) -> np.ndarray:
    """Recolour (new = map[old]) then apply dihedral tid."""
    return dihedral(colour_map[grid], tid)


def invert_augmentation(grid: np.ndarray, tid: int, colour_map: np.ndarray) -> np.ndarray:
    """Map a grid from an augmented frame back to the original: inverse dihedral, inverse colours."""
    inv = np.argsort(colour_map).astype(np.uint8)
    return inv[inverse_dihedral(grid, tid)]


def aug_name(base: str, tid: int, colour_map: np.ndarray) -> str:
    """HRM's augmented puzzle name `<task>_t<tid>_<10 digits>`."""
    return f"{base}{AUG_SEPARATOR}t{tid}{AUG_SEPARATOR}{''.join(str(int(c)) for c in colour_map)}"


def encode_grid(grid: np.ndarray, pad_r: int = 0, pad_c: int = 0) -> np.ndarray:
    """Reference encoder: one grid onto the 30x30 canvas at (pad_r, pad_c) -> uint8 [900]."""
    h, w = grid.shape
    canvas = np.zeros((MAX_SIDE, MAX_SIDE), dtype=np.uint8)
    canvas[pad_r : pad_r + h, pad_c : pad_c + w] = grid + COLOUR_OFFSET
    if pad_r + h < MAX_SIDE:
        canvas[pad_r + h, pad_c : pad_c + w] = EOS
    if pad_c + w < MAX_SIDE:
        canvas[pad_r : pad_r + h, pad_c + w] = EOS
    return canvas.reshape(-1)


def crop(tokens: np.ndarray) -> np.ndarray:
    """Reference crop (HRM spec 6.2): the largest top-left all-colour rectangle, as colours 0..9.

    Ties keep the earliest (smallest) row count. A 0x0 grid is possible.
    """
    g = np.asarray(tokens).reshape(MAX_SIDE, MAX_SIDE)
    best_area, best_r, best_w = 0, 0, 0
    w = MAX_SIDE
    for r in range(1, MAX_SIDE + 1):
        row = g[r - 1]
        for c in range(1, w + 1):
            t = row[c - 1]
            if t < COLOUR_OFFSET or t > COLOUR_OFFSET + 9:
                w = c - 1
                break
        area = r * w
        if area > best_area:
            best_area, best_r, best_w = area, r, w
    return (g[:best_r, :best_w] - COLOUR_OFFSET).astype(np.uint8)


def square_side(num_cells: int) -> int:
    """n when a board row of `num_cells` tokens is an n x n square (Sudoku, Maze), else 0."""
    n = int(round(num_cells ** 0.5))
    return n if n * n == num_cells else 0
