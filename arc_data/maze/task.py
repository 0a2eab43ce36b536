"""Maze as a grid-puzzle task of the build-puzzles / generate-puzzles pipeline: the hooks that
arc_data.puzzles.registry lists (board size, tokens, answer check, augmentation, generator,
options, pictures). The rules themselves live in arc_data.maze; this file only plugs them in.

Tokens (HRM): PAD 0, '#' 1, ' ' 2, 'S' 3, 'G' 4, 'o' 5 (vocab 6). Augmentation: copy c of a maze
is dihedral transform c (so num_aug is 0 or 7, all eight transforms: the reference's aug=True).
"""

from __future__ import annotations

import numpy as np

from arc_data import format as fmt
from arc_data import maze
from arc_data.errors import MazeError

PATH = 1 + maze.CHARSET.index("o")  # the token of a path cell (5)
NUM_AUG = (0, 7)  # 7: all eight dihedral transforms per maze (the reference's aug=True)


class Maze:
    name = "maze"
    error = MazeError
    default_size = 30
    render_cell = 10  # pixels per cell in pictures

    # ---- build-puzzles

    def size_of(self, num_cells: int) -> int:
        n = fmt.square_side(num_cells)
        if n < 2:
            raise MazeError(f"a maze row has {num_cells} cells; expected a square board (n*n)")
        return n

    def vocab_size(self, n: int) -> int:
        return len(maze.CHARSET) + 1

    def charset(self, n: int) -> str:
        return maze.CHARSET

    def lut(self, n: int) -> np.ndarray:
        """CSV byte -> token (255: not allowed)."""
        lut = np.full(256, 255, np.uint8)
        for i, ch in enumerate(maze.CHARSET):
            lut[ord(ch)] = i + 1
        return lut

    def first_bad_answer(self, n: int, q_bytes, a_bytes, inputs, labels) -> tuple[int, str]:
        """(row, problem) of the first row whose answer is not its question's shortest path, or (-1, "")."""
        return maze.first_bad_maze(q_bytes, a_bytes, n)

    encode_large = None  # no one-pass kernel: the numpy path handles Maze-Hard's sizes

    def identity_table(self, n: int, count: int) -> dict[str, np.ndarray]:
        return {"dihedral": np.zeros(count, np.uint8)}

    def augment(self, n: int, inputs: np.ndarray, labels: np.ndarray, src: np.ndarray, copy: np.ndarray,
                rng: np.random.Generator, large: bool) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Rows `src` of (inputs, labels), copy c under dihedral transform c (no randomness)."""
        tids = copy.astype(np.uint8)
        return (maze.apply_dihedral_rows(inputs[src], tids, n), maze.apply_dihedral_rows(labels[src], tids, n),
                {"dihedral": tids})

    def board_info(self, n: int) -> dict:
        """What the manifest's `board` records beyond n, seq_len and vocab_size."""
        return {"box": None}

    def check_build(self, cfg) -> None:
        if cfg.num_aug not in NUM_AUG:
            raise MazeError(f"num_aug: maze takes 0 or 7 (all eight dihedral transforms), got {cfg.num_aug}")

    # ---- generate-puzzles

    def check_generate(self, cfg) -> None:
        """Range checks of the Maze knobs (cfg.size is filled in already); raises MazeError."""
        if not 3 <= cfg.size <= 255:
            raise MazeError(f"size: maze side must be in 3..255, got {cfg.size}")
        if cfg.min_path < 0 or cfg.min_path >= cfg.size ** 2:
            raise MazeError(f"min_path: must be in 0..{cfg.size ** 2 - 1}, got {cfg.min_path}")
        if not 0.0 <= cfg.openings <= 1.0:
            raise MazeError(f"openings: must be in [0, 1], got {cfg.openings}")
        for name in ("givens", "min_rating"):
            if getattr(cfg, name):
                raise MazeError(f"{name}: a sudoku option (task=maze)")

    def most_distinct(self, cfg) -> tuple[int, str] | None:
        return None  # mazes of the allowed sides are plentiful

    def generator(self, cfg, rng: np.random.Generator) -> MazeDraws:
        return MazeDraws(cfg, rng)

    # ---- evaluate (eval/puzzles): the cells to solve, the test-time augmentation group, pictures

    solve_cells = "the cells of the true path ('o')"  # metrics.json's `cells_to_solve`
    solve_short = "path cells"  # in a picture's caption

    def solve_mask(self, inputs: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """bool [E, L]: the cells to solve, before the supervised mask."""
        return labels == PATH

    def num_transforms(self, n: int) -> int:
        return 8

    def describe_transforms(self, n: int) -> str:
        return f"maze {n}x{n}: the 8 dihedral transforms"

    def draw_transforms(self, n: int, rng: np.random.Generator, num_examples: int, copies: int) -> dict[str, np.ndarray]:
        """Distinct non-identity transforms per example in a seeded order, example-major (copies <= 7)."""
        if copies > 7:
            raise MazeError(f"tta={copies}: a maze has 7 non-identity dihedral transforms; use tta <= 7")
        order = np.argsort(rng.random((num_examples, 7)), axis=1)[:, :copies] + 1  # a seeded permutation of 1..7
        return {"dihedral": order.reshape(num_examples * copies).astype(np.uint8)}

    def apply_transforms(self, n: int, tokens: np.ndarray, table: dict[str, np.ndarray]) -> np.ndarray:
        """Row p of tokens [P, n*n] under dihedral transform p of the table."""
        return maze.apply_dihedral_rows(tokens, table["dihedral"], n)

    def invert_transforms(self, n: int, tokens: np.ndarray, table: dict[str, np.ndarray]) -> np.ndarray:
        return maze.invert_dihedral_rows(tokens, table["dihedral"], n)

    def picture_cell(self, n: int) -> int:
        return min(24, max(10, 240 // n))  # pixels per cell: boards of 240-300 px

    # ---- pictures

    @property
    def legend(self) -> str:
        from arc_data.maze.viz import LEGEND  # lazy: `build-puzzles --help` skips it

        return LEGEND

    def render(self, inputs: np.ndarray, labels: np.ndarray, prediction: np.ndarray | None = None,
               cell: int | None = None):
        from arc_data.maze.viz import render_maze  # lazy: `build-puzzles --help` skips it

        return render_maze(inputs, labels, prediction, cell or self.render_cell)


class MazeDraws:
    """Draws of generate-puzzles: `draw()` is (question bytes, answer bytes, path length) or None
    when this draw has no goal far enough away; `knobs()` says the knobs when too few pass."""

    def __init__(self, cfg, rng: np.random.Generator):
        self.cfg, self.rng = cfg, rng

    def draw(self) -> tuple[np.ndarray, np.ndarray, int] | None:
        return maze.generate(self.rng, self.cfg.size, max(self.cfg.min_path, 1), self.cfg.openings)

    def knobs(self) -> str:
        return f"min_path={self.cfg.min_path}, openings={self.cfg.openings}"


MAZE = Maze()
