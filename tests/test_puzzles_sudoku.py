"""Sudoku: the numba solver against brute force, the generator's uniqueness and knobs, the answer
check, and the augmentation group (forward then inverse = identity; augmented boards stay valid)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arc_data import sudoku
from arc_data.errors import DatasetError
from arc_data.sudoku.kernels import sudoku_search


def _all_4x4_grids() -> np.ndarray:
    """Every solved 4x4 board (288 of them), by brute force over row permutations."""
    rows = np.array(list(itertools.permutations(range(1, 5))), np.int64)  # (24, 4)
    idx = np.array(list(itertools.product(range(24), repeat=4)))  # (331776, 4)
    g = rows[idx]  # (M, 4 rows, 4 cols)
    want = np.arange(1, 5)
    cols_ok = (np.sort(g, axis=1) == want[None, :, None]).all(axis=(1, 2))
    boxes = g.reshape(-1, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4).reshape(-1, 4, 4)
    boxes_ok = (np.sort(boxes, axis=2) == want).all(axis=(1, 2))
    return g[cols_ok & boxes_ok].reshape(-1, 16)


GRIDS_4 = _all_4x4_grids()


def test_brute_force_finds_all_288_boards():
    assert GRIDS_4.shape == (288, 16)
    assert all(sudoku.is_solution_reference(g, 4) for g in GRIDS_4[:20])


@settings(max_examples=150, deadline=None)
@given(grid=st.integers(0, 287), mask=st.lists(st.booleans(), min_size=16, max_size=16),
       noise=st.lists(st.integers(0, 4), min_size=16, max_size=16), corrupt=st.booleans())
def test_solver_matches_brute_force_on_4x4(grid, mask, noise, corrupt):
    board = np.where(mask, GRIDS_4[grid], 0)
    if corrupt:  # arbitrary givens, often contradictory
        board = np.where(np.array(noise) > 0, noise, board)
    matches = GRIDS_4[((board == 0) | (GRIDS_4 == board)).all(axis=1)]
    count, _, first = sudoku.count_solutions(board, limit=2)
    assert count == min(len(matches), 2)
    if count:
        assert any(np.array_equal(first, m) for m in matches)
        assert ((board == 0) | (first == board)).all()
    ref_count, ref_first = sudoku.count_solutions_reference(board, limit=2)
    assert ref_count == count
    if count == 1:
        assert np.array_equal(ref_first, first)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), extra_blanks=st.integers(0, 6))
def test_solver_matches_python_reference_on_6x6(seed, extra_blanks):
    rng = np.random.default_rng(seed)
    puzzle, solution, _, _ = sudoku.generate(rng, 6)
    board = puzzle.astype(np.int64)
    givens = np.flatnonzero(board)
    board[rng.choice(givens, size=min(extra_blanks, givens.size), replace=False)] = 0  # often several solutions
    count, _, first = sudoku.count_solutions(board, limit=2)
    ref_count, ref_first = sudoku.count_solutions_reference(board, limit=2)
    assert count == ref_count >= 1
    assert sudoku.is_solution_reference(first, 6) and ((board == 0) | (first == board)).all()
    if extra_blanks == 0:
        assert count == 1 and np.array_equal(first, solution) and np.array_equal(ref_first, solution)


@pytest.mark.parametrize("n", [4, 6, 9])
def test_generated_puzzles_have_unique_solutions(n):
    rng = np.random.default_rng(n)
    for _ in range(6 if n == 9 else 12):
        puzzle, solution, k, rating = sudoku.generate(rng, n)
        assert sudoku.is_solution_reference(solution, n)
        assert ((puzzle == 0) | (puzzle == solution)).all() and k == int((puzzle > 0).sum())
        count, bt, first = sudoku.count_solutions(puzzle, limit=2)
        assert count == 1 and np.array_equal(first, solution) and bt == rating
        if n == 4:
            assert ((GRIDS_4 == puzzle) | (puzzle == 0)).all(axis=1).sum() == 1  # brute force agrees
        for c in np.flatnonzero(puzzle):  # givens=0 digs to a minimal puzzle: every given is needed
            weaker = puzzle.copy()
            weaker[c] = 0
            assert sudoku.count_solutions(weaker, limit=2)[0] == 2


def test_givens_knob_is_exact_and_rating_is_digit_order_independent():
    rng = np.random.default_rng(0)
    puzzle, solution, k, rating = sudoku.generate(rng, 9, givens=32)
    assert k == 32 == int((puzzle > 0).sum())
    # the exhaustive search visits the same tree whatever the digit order
    n = 9
    for order_seed in range(3):
        order = np.argsort(np.random.default_rng(order_seed).random((81, n)), axis=1).astype(np.int64) + 1
        sol = np.zeros(81, np.int64)
        cnt, bt = sudoku_search(puzzle.astype(np.int64), n, sudoku.box_index(n), order, 2, sol, sudoku._POPCOUNT)
        assert (cnt, bt) == (1, rating) and np.array_equal(sol, solution)


def test_generator_is_seeded():
    a = sudoku.generate(np.random.default_rng(5), 9)
    b = sudoku.generate(np.random.default_rng(5), 9)
    c = sudoku.generate(np.random.default_rng(6), 9)
    assert np.array_equal(a[0], b[0]) and a[2:] == b[2:]
    assert not np.array_equal(a[0], c[0])


def test_first_invalid_solution_matches_reference():
    rng = np.random.default_rng(1)
    boards = np.stack([sudoku.generate(rng, 6)[1] for _ in range(8)])
    assert sudoku.first_invalid_solution(boards, 6) == -1
    for row, (c1, c2) in ((3, (0, 1)), (5, (0, 6)), (6, (0, 7))):  # swap in a row, a column, a box
        bad = boards.copy()
        bad[row, c1], bad[row, c2] = bad[row, c2], bad[row, c1]
        assert not sudoku.is_solution_reference(bad[row], 6)
        assert sudoku.first_invalid_solution(bad, 6) == row
    bad = boards.copy()
    bad[2, 5] = 0
    assert sudoku.first_invalid_solution(bad, 6) == 2


def test_size_checks():
    assert sudoku.size_of(81) == 9 and sudoku.size_of(36) == 6
    for bad in (80, 25, 100):
        with pytest.raises(DatasetError, match="sudoku row"):
            sudoku.size_of(bad)


@settings(max_examples=30, deadline=None)
@given(n=st.sampled_from([4, 6, 8, 9]), seed=st.integers(0, 2**32 - 1), count=st.integers(1, 12))
def test_augment_then_invert_is_identity_and_keeps_boards_valid(n, seed, count):
    rng = np.random.default_rng(seed)
    solution = sudoku.generate(np.random.default_rng(n), n)[1] if n != 8 else _solved_8x8()
    puzzle = np.where(rng.random(n * n) < 0.5, solution, 0).astype(np.uint8)
    augs = sudoku.random_augs(rng, n, count)
    sols = sudoku.apply_augs(np.tile(solution, (count, 1)), augs)
    puzs = sudoku.apply_augs(np.tile(puzzle, (count, 1)), augs)
    assert all(sudoku.is_solution_reference(s, n) for s in sols)
    assert ((puzs == 0) | (puzs == sols)).all() and ((puzs == 0).sum(1) == (puzzle == 0).sum()).all()
    assert np.array_equal(sudoku.invert_augs(sols, augs), np.tile(solution, (count, 1)))
    assert np.array_equal(sudoku.invert_augs(puzs, augs), np.tile(puzzle, (count, 1)))
    # tokens (offset 1): PAD 0 and out-of-range predictions are left alone, both ways
    tokens = np.tile(puzzle, (count, 1)).astype(np.uint8) + 1
    tokens[:, 0] = 0
    back = sudoku.invert_augs(sudoku.apply_augs(tokens, augs, offset=1), augs, offset=1)
    assert np.array_equal(back, tokens)
    if sudoku.box_shape(n)[0] != sudoku.box_shape(n)[1]:
        assert not augs.transpose.any()  # a 2x3 box transposed is 3x2: not a symmetry


def _solved_8x8() -> np.ndarray:
    """A solved 8x8 board (boxes 2 rows x 4 columns) from the classic shifted pattern."""
    r, c = np.divmod(np.arange(64), 8)
    return ((4 * (r % 2) + r // 2 + c) % 8 + 1).astype(np.uint8)


def test_augmentation_uses_the_whole_group():
    augs = sudoku.random_augs(np.random.default_rng(0), 9, 4000)
    assert 0.4 < augs.transpose.mean() < 0.6
    assert len({tuple(p) for p in augs.row_perm}) > 1000  # up to 3!^4 = 1296 row permutations
    bands = augs.row_perm.reshape(-1, 3, 3) // 3
    assert (bands == bands[:, :, :1]).all()  # rows move within their band
    assert (augs.digit_map[:, 0] == 0).all() and (np.sort(augs.digit_map[:, 1:], 1) == np.arange(1, 10)).all()


def test_chunked_draws_equal_one_draw():
    u = np.random.default_rng(3).random((10, sudoku.uniforms_per_aug(9)))
    whole = sudoku.augs_from_uniforms(u, 9)
    parts = [sudoku.augs_from_uniforms(u[a:b], 9) for a, b in ((0, 4), (4, 10))]
    assert np.array_equal(np.concatenate([p.cell_perm() for p in parts]), whole.cell_perm())
