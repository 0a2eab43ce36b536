"""Small synthetic test splits in the arc_data on-disk format, for the vote tests and benchmark.

Independent of the dataset builder: writes `test/all__*.npy`, `test/dataset.json`,
`identifiers.json` and `augmentations.npz` directly from hand-made tasks with arc_data.format's
reference functions. Every task gets its un-augmented copy first, then the given augmentations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data import format as fmt

Grid = np.ndarray  # uint8 [rows, cols], colours 0..9


def random_colour_map(rng: np.random.Generator) -> np.ndarray:
    """HRM's colour map: 0 stays 0, 1..9 permuted."""
    return np.concatenate([[0], rng.permutation(9) + 1]).astype(np.uint8)


def encode_augmented(grid: Grid, tids: np.ndarray, colour_maps: np.ndarray) -> np.ndarray:
    """Encode `grid` under A augmentations at once -> uint8 [A, 900].

    Recolouring is pointwise, so it is applied to the encoded tokens of the 8 dihedral variants.
    """
    variants = np.stack([fmt.encode_grid(fmt.dihedral(grid, t)) for t in range(8)]).astype(np.int64)  # (8, 900)
    a = len(tids)
    lut = np.concatenate(  # (A, 12): PAD, EOS, then colour c -> map[c] + 2
        [np.zeros((a, 1), np.int64), np.ones((a, 1), np.int64), colour_maps.astype(np.int64) + fmt.COLOUR_OFFSET],
        axis=1,
    )
    return np.take_along_axis(lut, variants[np.asarray(tids, dtype=np.int64)], axis=1).astype(np.uint8)


@dataclass
class SyntheticSplit:
    """What was written; row e of the split belongs to puzzle `example_puzzle[e]`."""

    root: Path
    task_names: list[str]
    puzzle_ids: np.ndarray  # int32 [P] global id of each puzzle
    example_puzzle_id: np.ndarray  # int32 [E]
    example_task: np.ndarray  # int64 [E] index into task_names
    example_test: np.ndarray  # int64 [E] test input index within its task
    inputs: np.ndarray  # uint8 [E, 900]
    labels: np.ndarray  # uint8 [E, 900]
    dihedral: np.ndarray  # uint8 [num_ids] (table)
    colour_map: np.ndarray  # uint8 [num_ids, 10] (table)


def write_split(
    root: str | Path,
    tasks: dict[str, list[tuple[Grid, Grid]]],
    augmentations: dict[str, list[tuple[int, np.ndarray]]],
    split: str = "test",
) -> SyntheticSplit:
    """Write `tasks` (name -> test pairs in the original frame) and their augmentations
    (name -> [(dihedral id, colour map)], not including the identity copy) under `root`."""
    root = Path(root)
    names = [fmt.BLANK_NAME]
    base = [-1]
    dih = [0]
    cmaps = [np.arange(10, dtype=np.uint8)]
    ins, outs, ex_pid, ex_task, ex_test, pindex, pids = [], [], [], [], [], [0], []
    for ti, (task, pairs) in enumerate(tasks.items()):
        augs = [(0, np.arange(10, dtype=np.uint8))] + [(int(t), np.asarray(c, np.uint8)) for t, c in augmentations.get(task, [])]
        tids = np.array([t for t, _ in augs])
        maps = np.stack([c for _, c in augs])
        first_id = len(names)
        for k, (t, c) in enumerate(augs):
            names.append(task if k == 0 else fmt.aug_name(task, t, c))
            base.append(ti)
            dih.append(t)
            cmaps.append(c)
        enc_in = [encode_augmented(i, tids, maps) for i, _ in pairs]  # per pair: (A, 900)
        enc_out = [encode_augmented(o, tids, maps) for _, o in pairs]
        npairs = len(pairs)
        for k in range(len(augs)):  # puzzle k holds every test pair under augmentation k
            for j in range(npairs):
                ins.append(enc_in[j][k])
                outs.append(enc_out[j][k])
            ex_pid += [first_id + k] * npairs
            ex_task += [ti] * npairs
            ex_test += list(range(npairs))
            pindex.append(pindex[-1] + npairs)
            pids.append(first_id + k)
    d = root / split
    d.mkdir(parents=True, exist_ok=True)
    inputs = np.stack(ins).astype(np.uint8)
    labels = np.stack(outs).astype(np.uint8)
    np.save(d / fmt.INPUTS_FILE, inputs)
    np.save(d / fmt.LABELS_FILE, labels)
    np.save(d / fmt.PUZZLE_IDS_FILE, np.array(pids, dtype=np.int32))
    np.save(d / fmt.PUZZLE_INDICES_FILE, np.array(pindex, dtype=np.int32))
    group_sizes = [1 + len(augmentations.get(t, [])) for t in tasks]
    np.save(d / fmt.GROUP_INDICES_FILE, np.concatenate([[0], np.cumsum(group_sizes)]).astype(np.int32))
    meta = {
        "pad_id": fmt.PAD,
        "ignore_label_id": fmt.IGNORE_LABEL_ID,
        "blank_identifier_id": fmt.BLANK_ID,
        "vocab_size": fmt.VOCAB_SIZE,
        "seq_len": fmt.SEQ_LEN,
        "num_puzzle_identifiers": len(names),
        "total_groups": len(tasks),
        "mean_puzzle_examples": len(ins) / max(len(pids), 1),
        "sets": [fmt.SET_NAME],
    }
    (d / fmt.META_FILE).write_text(json.dumps(meta))
    (root / fmt.IDENTIFIERS_FILE).write_text(json.dumps(names))
    dihedral = np.array(dih, dtype=np.uint8)
    colour_map = np.stack(cmaps).astype(np.uint8)
    np.savez(
        root / fmt.AUGMENTATIONS_FILE,
        base_task=np.array(base, dtype=np.int32),
        dihedral=dihedral,
        colour_map=colour_map,
        task_names=np.array(list(tasks), dtype=str),
    )
    return SyntheticSplit(
        root, list(tasks), np.array(pids, np.int32), np.array(ex_pid, np.int32), np.array(ex_task, np.int64),
        np.array(ex_test, np.int64), inputs, labels, dihedral, colour_map,
    )
