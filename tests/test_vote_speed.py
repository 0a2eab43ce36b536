"""What made `vote` fast (issue 61) changes no output: each new path against the code it replaced.

- `decode.decode_grids` (one kernel for the top candidates' grids) against `grid_of_shape`;
- the report's labels (`eval.arc.labels`, every label in two kernel calls) against the per-glyph
  numpy composition they replaced, and a whole picture (`report.task_png`: painted and deflated by
  `eval.arc.paint.paint_png`, tests/test_vote_deflate.py) against the Pillow pastes, rectangles and
  encoder it replaced, pixel for pixel (the PNG bytes are the report's own deflate's);
- the kernels' ahead-of-time exports (`arc_data.native`) against numba's JIT;
- the plain call's config without Hydra (`cli_fast`, `ks=[...]`) against Hydra's, and a vote that
  starts without Hydra, OmegaConf or numba;
- `arcprize._is_grid`'s fast path, `publish.remove_tree`, `vote.without_cycle_collector`.
"""

from __future__ import annotations

import gc
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

import eval.arc.label_text as LT
import eval.arc.report as R
from arc_data import format as fmt
from arc_data import native
from arc_data.files.publish import remove_tree
from arc_data.originals import inverse_colour_table
from eval.arc import glyphs, labels
from eval.arc.arcprize import _is_grid
from eval.arc.decode import _decode_grids, _decode_keys, decode_grids, decode_keys, grid_of_shape
from eval.arc.vote import vote, without_cycle_collector
from hrm_deeploop.cli import COMMANDS, DEPRECATED, compose, config_dir
from hrm_deeploop.cli_fast import plain_config
from hrm_deeploop.errors import ConfigError, UserError
from tests.vote_helpers import make_split, predict, random_grid
from tests.vote_synthetic import random_colour_map

REPO = Path(__file__).resolve().parent.parent


def _rows(seed: int, n: int = 40):
    """n token rows of random grids, each under a random dihedral and colour map (some empty)."""
    rng = np.random.default_rng(seed)
    tids = rng.integers(0, 8, size=n).astype(np.uint8)
    maps = np.stack([random_colour_map(rng) for _ in range(n)])
    tokens = np.zeros((n, fmt.SEQ_LEN), np.uint8)
    for i in range(n):
        if i % 7 == 3:
            continue  # all PAD: a 0x0 grid
        tokens[i] = fmt.encode_grid(fmt.augment_grid(random_grid(rng, 1, 31), int(tids[i]), maps[i]))
    return tokens, tids, inverse_colour_table(maps)


def test_decode_grids_is_grid_of_shape():
    tokens, tids, inv = _rows(0)
    rows = np.arange(len(tokens))[::-1].copy()  # any order, any subset
    _, shapes = decode_keys(tokens, rows, tids, inv, rows=rows)
    grids = decode_grids(tokens, rows, rows, tids, inv, shapes)
    for r, g, shape in zip(rows, grids, shapes):
        want = grid_of_shape(tokens[r], tids[r], inv[r], tuple(shape))
        assert g.dtype == want.dtype == np.uint8 and g.shape == want.shape and np.array_equal(g, want)
    assert (shapes == 0).all(axis=1).any()  # the empty grids were among them


# ---------------------------------------------------------------- labels


def _text_reference(text: str, strips: dict[str, np.ndarray], advance: dict[str, float], line_h: int) -> np.ndarray:
    """The per-glyph numpy composition `label_text.label_of` used before the kernels (palette indices)."""
    lines = text.split("\n")
    widths = [sum(advance[ch] for ch in line) for line in lines]
    glyph_w = max((strips[ch].shape[1] for line in lines for ch in line), default=1)
    canvas = np.zeros((line_h * len(lines), int(np.ceil(max(widths, default=0))) + glyph_w + 1), np.uint8)
    for i, line in enumerate(lines):
        x = 0.0
        for ch in line:
            g = strips[ch]
            left = int(round(x))
            region = canvas[i * line_h:i * line_h + g.shape[0], left:left + g.shape[1]]
            np.maximum(region, g[:region.shape[0], :region.shape[1]], out=region)
            x += advance[ch]
    rows, cols = np.nonzero(canvas)
    canvas = canvas[:max(rows.max(initial=0) + 1, 1), :max(cols.max(initial=0) + 1, 1)]
    level = (canvas.astype(np.uint16) * (LT.TEXT_LEVELS - 1) + 127) // 255
    return (LT.TEXT + level).astype(np.uint8)


LABELS = ["test 0: input", "truth", "truth\n(not given)", "#1: 301 votes\nright, mean q 0.523",
          "#12: 1 vote\nwrong, mean q 0.000", "", "\n", "no predictions", "0a1b2c3d: failed at pass@2; the truth's "
          "rank among the candidates: none, #3", "ŝtrange ünïcode_[]{}|~", "a\n\nb"]


@pytest.mark.parametrize("size", [R.LABEL_SIZE, R.TITLE_SIZE])
def test_labels_are_the_per_glyph_composition(size):
    LT._LABELS.clear()
    LT.draw_labels(LABELS, size)
    font = glyphs.font(size)
    ascent, descent = font.getmetrics()
    chars = {ch for t in LABELS for ch in t} - {"\n"}
    strips = {ch: LT._glyph(ch, size)[0] for ch in chars}
    advance = {ch: LT._glyph(ch, size)[1] for ch in chars}
    for text in LABELS:
        want = _text_reference(text, strips, advance, ascent + descent + 3)
        assert np.array_equal(LT.label_of(text, size), want), repr(text)


def test_label_kernels_round_the_pen_half_to_even():
    """Fractional advances (other fonts, other FreeType versions): the pen is rounded as Python
    rounds, and glyphs overlapping their neighbours keep the brighter pixel."""
    rng = np.random.default_rng(3)
    chars = "abcdefg"
    strips = {ch: rng.integers(0, 256, size=(9, int(rng.integers(2, 9)))).astype(np.uint8) for ch in chars}
    advance = {ch: float(v) for ch, v in zip(chars, [0.5, 1.5, 2.25, 2.5, 3.75, 0.0, 4.5])}
    texts = ["abcdefg", "gfedcba\naaaa", "dddddddd", "a", "eeee\nbbbb\ncc"]
    order = list(chars)
    atlas = np.zeros((len(order), 9, 8), np.uint8)
    for i, ch in enumerate(order):
        atlas[i, :, :strips[ch].shape[1]] = strips[ch]
    index = {ch: i for i, ch in enumerate(order)} | {"\n": -1}
    codes = np.array([index[ch] for t in texts for ch in t], np.int64)
    ends = np.cumsum([len(t) for t in texts]).astype(np.int64)
    widths = np.array([strips[ch].shape[1] for ch in order], np.int64)
    advances = np.array([advance[ch] for ch in order], np.float64)
    line_h = 12
    dims = np.empty((len(texts), 2), np.int64)
    labels.measure_labels(widths, advances, codes, ends, line_h, dims)
    offsets = np.concatenate([[0], np.cumsum(dims[:, 0] * dims[:, 1])]).astype(np.int64)
    flat = np.zeros(int(offsets[-1]), np.uint8)
    extents = np.empty((len(texts), 2), np.int64)
    labels.paint_labels(atlas, widths, advances, codes, ends, dims, offsets[:-1].copy(), line_h, LT.TEXT,
                        LT.TEXT_LEVELS, flat, extents)
    for i, text in enumerate(texts):
        (h, w), (rows, cols) = dims[i], extents[i]
        got = flat[offsets[i]:offsets[i] + h * w].reshape(h, w)[:rows, :cols]
        assert np.array_equal(got, _text_reference(text, strips, advance, line_h)), text


# ---------------------------------------------------------------- a whole picture


def _task_png_reference(task, num_candidates: int) -> bytes:
    """`report.task_png` as it was drawn before: Pillow pastes and rectangles into a palette image."""
    from arc_data.arc.viz import grid_indices

    def text(label: str, size: int) -> Image.Image:
        a = LT.label_of(label, size)
        return Image.frombytes("P", (a.shape[1], a.shape[0]), a.tobytes())

    rows = R._panels(task, num_candidates)
    cell = R.cell_size(task, num_candidates)
    grids = [[None if g is None or not g.size else grid_indices(g, cell, R._LINE) for _, g, _ in r] for r in rows]
    labs = [[text(lab, R.LABEL_SIZE) for lab, _, _ in r] for r in rows]
    pad, frame = 14, 3
    num_cols = max(len(r) for r in rows)
    col_w = [max([60] + [g.shape[1] for r in grids if c < len(r) and (g := r[c]) is not None]
                 + [lab[c].width for lab in labs if c < len(lab)]) for c in range(num_cols)]
    label_h = max(lab.height for r in labs for lab in r) + 6
    row_h = [label_h + max([g.shape[0] for g in r if g is not None] + [0]) + 2 * frame + pad for r in grids]
    title = text(R._title(task), R.TITLE_SIZE)
    top = title.height + 2 * pad
    width = max(sum(col_w) + pad * (num_cols + 1) + 2 * frame, title.width + 2 * pad)
    img = Image.new("P", (width, top + sum(row_h)), R._WHITE)
    img.putpalette(R.PALETTE.tobytes())
    img.paste(title, (pad, pad))
    draw = ImageDraw.Draw(img)
    y = top
    for r, (row, grid_row, label_row) in enumerate(zip(rows, grids, labs)):
        x = pad + frame
        for c, ((_, _, border), g, lab) in enumerate(zip(row, grid_row, label_row)):
            img.paste(lab, (x, y))
            if g is not None:
                gy = y + label_h + frame
                img.paste(Image.frombytes("P", (g.shape[1], g.shape[0]), g.tobytes()), (x, gy))
                if border is not None:
                    draw.rectangle([x - frame, gy - frame, x + g.shape[1] + frame - 1, gy + g.shape[0] + frame - 1],
                                   outline=border, width=frame)
            x += col_w[c] + pad
        y += row_h[r]
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


@pytest.fixture(scope="module")
def voted(tmp_path_factory):
    """A vote over 4 tasks: right, wrong at pass@1, a 30x30 truth (small cells) and one without
    predictions for its second test input."""
    rng = np.random.default_rng(5)
    tasks = {"right": [(random_grid(rng), random_grid(rng))],
             "wrong": [(random_grid(rng), random_grid(rng))],
             "big30": [(random_grid(rng), rng.integers(0, 10, size=(30, 30)).astype(np.uint8))],
             "twotest": [(random_grid(rng), random_grid(rng)), (random_grid(rng), random_grid(rng))]}
    root = tmp_path_factory.mktemp("speed")
    split = make_split(root / "data", tasks, num_aug=5)
    names = list(tasks)
    rows, grids = [], []
    for e in range(len(split.example_task)):
        name, j = names[split.example_task[e]], int(split.example_test[e])
        if name == "twotest" and j == 1:
            continue
        truth = tasks[name][j][1]
        grids.append(np.full((2, 2), e % 3, np.uint8) if name == "wrong" and e % 2 else truth)
        rows.append(e)
    preds = predict(split, np.array(rows), grids, rng.normal(size=len(rows)).tolist())
    return vote(preds, root / "data")


def _pixels(png: bytes) -> tuple[np.ndarray, list]:
    img = Image.open(io.BytesIO(png))
    assert img.mode == "P"
    return np.asarray(img), img.getpalette()


def test_a_picture_is_the_pillow_drawing_pixel_for_pixel(voted):
    """The report's own deflate (`eval.arc.deflate`) writes other bytes than Pillow's zlib: the same
    pixels and palette."""
    assert any(not t.candidates for task in voted.tasks for t in task.tests)  # "no predictions" drawn
    for task in voted.tasks:
        for n in (1, 3):
            (ours, palette), (theirs, their_palette) = _pixels(R.task_png(task, n)), _pixels(_task_png_reference(task, n))
            assert np.array_equal(ours, theirs) and palette == their_palette, task.name
            assert np.array_equal(ours, R.task_scanlines(task, n)[:, 1:]), task.name


# ---------------------------------------------------------------- ahead of time = JIT


def _both(kernel):
    """The kernel's ahead-of-time export and its numba dispatcher (skipped where there is no module)."""
    export = native.function(kernel.py_func) if os.environ.get(native.ENV, "1") != "0" else None
    if export is None:
        pytest.skip("no ahead-of-time module here (no C compiler, or HRM_DEEPLOOP_NATIVE=0)")
    return export, kernel.dispatcher if hasattr(kernel, "dispatcher") else kernel


def test_the_vote_kernels_are_listed_with_their_sources():
    import ast

    outer = {q.rpartition(".")[0] for q in native.KERNELS if not q.startswith("arc_data.")}
    assert {m.replace(".", "/") + ".py" for m in outer} == set(native.VOTE_SOURCES)
    for rel in native.VOTE_SOURCES:  # what they compile in from arc_data is a source too
        for node in ast.walk(ast.parse((REPO / rel).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("arc_data."):
                assert node.module.removeprefix("arc_data.").replace(".", "/") + ".py" in native.SOURCES, rel
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eval."):
                assert node.module.replace(".", "/") + ".py" in native.VOTE_SOURCES, rel


def _ro(a):
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def test_decode_exports_are_the_jit():
    tokens, tids, inv = _rows(1, 60)
    rows = _ro(np.arange(len(tokens), dtype=np.int64))
    args = (_ro(tokens), rows, rows, _ro(tids), _ro(inv))
    out = []
    for fn in _both(_decode_keys):
        keys, shapes, top = np.empty((60, 2), np.uint64), np.empty((60, 2), np.uint8), np.zeros(1, np.uint8)
        assert fn is not None and (not isinstance(fn, native.Native) or fn.accepts(args + (keys, shapes, top)))
        fn(*args, keys, shapes, top)
        out.append((keys, shapes, top))
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])
    assert out[0][2][0] == out[1][2][0] == tokens.max()
    shapes = _ro(out[0][1])
    offsets = np.concatenate([[0], np.cumsum(shapes[:, 0].astype(np.int64) * shapes[:, 1])]).astype(np.int64)
    cells = []
    for fn in _both(_decode_grids):
        flat = np.empty(int(offsets[-1]), np.uint8)
        call = args + (shapes, _ro(offsets[:-1]), flat)
        assert not isinstance(fn, native.Native) or fn.accepts(call)
        fn(*call)
        cells.append(flat)
    assert np.array_equal(cells[0], cells[1])


def test_label_exports_are_the_jit():
    LT.draw_labels(LABELS, R.LABEL_SIZE)  # the glyphs of every character in LABELS
    g = LT._glyphs(R.LABEL_SIZE)
    chars = _ro(np.array([g.index[ch] for t in LABELS for ch in t], np.int64))
    ends = _ro(np.cumsum([len(t) for t in LABELS]).astype(np.int64))
    results = []
    for measure, paint in zip(_both(labels.measure_labels), _both(labels.paint_labels)):
        dims = np.empty((len(LABELS), 2), np.int64)
        measure(g.widths, g.advances, chars, ends, 18, dims)
        offsets = _ro(np.concatenate([[0], np.cumsum(dims[:, 0] * dims[:, 1])[:-1]]).astype(np.int64))
        flat = np.zeros(int((dims[:, 0] * dims[:, 1]).sum()), np.uint8)
        extents = np.empty((len(LABELS), 2), np.int64)
        call = (g.atlas, g.widths, g.advances, chars, ends, _ro(dims), offsets, 18, LT.TEXT, LT.TEXT_LEVELS, flat,
                extents)
        assert not isinstance(paint, native.Native) or paint.accepts(call)
        paint(*call)
        results.append((dims, flat, extents))
    for a, b in zip(*results):
        assert np.array_equal(a, b)


# ---------------------------------------------------------------- start-up


VOTE_BASE = ["predictions=p.npz", "data_dir=d", "output_dir=o"]


@pytest.mark.parametrize("extra", [[], ["ks=[1,2]"], ["ks=[1,2,10,100,1000]", "report=false", "overwrite=true"],
                                   ["ks=[]"], ["ks=[0]"], ["ks=[2,2]"], ["max_candidates=3", "split=train"],
                                   ["log_probs=lp.npy", "poe_candidates=4", "challenges=c.json"]])
def test_a_plain_vote_call_gets_what_hydra_composes(extra):
    def outcome(fn):
        try:
            return fn()
        except (ConfigError, UserError) as e:
            return type(e).__name__, str(e)

    fast = outcome(lambda: plain_config(COMMANDS["vote"], config_dir(), VOTE_BASE + extra, DEPRECATED.get("vote", {})))
    assert fast is not None
    assert fast == outcome(lambda: compose("vote", VOTE_BASE + extra))


@pytest.mark.parametrize("ks", ["ks=[1, 2]", "ks=[01]", "ks=[+1]", "ks=[1,]", "ks=1", "ks=[1e3]", "ks=[a]",
                                "ks=[1234567890123456789]"])
def test_other_ks_forms_are_left_to_hydra(ks):
    assert plain_config(COMMANDS["vote"], config_dir(), VOTE_BASE + [ks], DEPRECATED.get("vote", {})) is None


def test_vote_starts_without_hydra_omegaconf_or_numba(tmp_path):
    """A plain `vote` imports neither (Hydra and OmegaConf: 0.2 s; numba: 0.3-0.9 s) where the
    ahead-of-time module is there; its mistakes still go through Hydra."""
    if os.environ.get(native.ENV, "1") == "0" or native._load() is None:
        pytest.skip("no ahead-of-time module here")
    rng = np.random.default_rng(1)
    tasks = {"t1": [(random_grid(rng), random_grid(rng))], "t2": [(random_grid(rng), random_grid(rng))]}
    split = make_split(tmp_path / "data", tasks, num_aug=3)
    grids = [tasks[list(tasks)[t]][0][1] for t in split.example_task]
    preds = predict(split, np.arange(len(grids)), grids, [0.5] * len(grids))
    from eval.predictions import save_predictions

    path = save_predictions(tmp_path / "p.npz", preds.puzzle_identifiers, preds.inputs, preds.predictions, preds.q_halt)
    code = ("import sys; from hrm_deeploop.cli import main; "
            f"code = main(['vote', 'predictions={path}', 'data_dir={tmp_path / 'data'}', 'output_dir={tmp_path / 'o'}', "
            "'ks=[1,2]'] + sys.argv[1:]); "
            "print(code, sorted(m for m in ('hydra', 'omegaconf', 'numba') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "0 []", p.stdout + p.stderr
    assert (tmp_path / "o" / "report.html").is_file()
    p = subprocess.run([sys.executable, "-c", code, "ks=[1e3]"], capture_output=True, text=True, cwd=REPO)
    assert p.stdout.strip().splitlines()[-1].startswith("2 ['hydra', 'omegaconf'"), p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "ks" in p.stderr, p.stderr


def test_vote_as_the_process_starts_no_blas_threads(tmp_path):
    """`vote` does no linear algebra: as the process's entry it asks OpenBLAS for one thread (numpy is
    imported after the CLI reads the command), unless the user set it; in-process calls leave it."""
    code = ("import os, sys, atexit; sys.argv = ['hrm-deeploop', 'vote', 'predictions=missing.npz', 'data_dir=d', "
            f"'output_dir={tmp_path / 'o'}']; import hrm_deeploop.cli as c; before = 'numpy' in sys.modules; "
            "atexit.register(lambda: print(before, os.environ.get('OPENBLAS_NUM_THREADS'))); c.main()")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert p.returncode == 2 and p.stdout.split() == ["False", "1"], p.stdout + p.stderr  # missing.npz: exit 2
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env=env | {"OPENBLAS_NUM_THREADS": "2"})
    assert p.stdout.split() == ["False", "2"], p.stdout + p.stderr


# ---------------------------------------------------------------- the rest


class Int(int):
    pass


@pytest.mark.parametrize("grid, ok", [([[1, 2], [3, 4]], True), ([[1, True]], False), ([[Int(3), 1]], True),
                                      ([[1, 2.0]], True), ([[1, 2.5]], False), ([[1], []], False), ([[np.int64(1)]], False),
                                      ([], False), ([[None]], False), ([[1, "2"]], False), ([[False]], False)])
def test_a_grid_is_rows_of_ints_not_bools(grid, ok):
    """2.0 is 2, as the official scorer reads it (test_arc_submission.py); 2.5 is no cell."""
    assert _is_grid(grid) is ok


def test_remove_tree_removes_many_files_and_follows_no_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    root = tmp_path / "stage"
    (root / "report").mkdir(parents=True)
    for i in range(40):
        (root / "report" / f"{i}.png").write_bytes(b"png")
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "report" / "file_link").symlink_to(outside / "keep.txt")
    remove_tree(root)
    assert not root.exists() and (outside / "keep.txt").read_text() == "x"
    remove_tree(tmp_path / "not-there")  # quietly nothing


def test_without_cycle_collector_restores_the_collector():
    assert gc.isenabled()
    with without_cycle_collector():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with without_cycle_collector():
            pass
        assert not gc.isenabled()  # it was off before: stays off
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), without_cycle_collector():
        raise RuntimeError("boom")
    assert gc.isenabled()


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64])
def test_inverse_colour_table_is_the_stable_argsort(dtype):
    """The vote's inverse colour maps scattered, not argsorted (issue 61): the same table, rows that
    are not permutations (repeated colours, all 0) and colours outside 0..9 included."""
    from arc_data.originals import inverse_colour_table

    rng = np.random.default_rng(int(np.dtype(dtype).itemsize))
    cm = np.array([rng.permutation(10) for _ in range(500)], dtype)
    cm[::7] = rng.integers(0, 10, (len(cm[::7]), 10))
    cm[3] = 0
    for table in (cm, cm[:0], np.where(cm == 4, 12, cm).astype(dtype)):
        ours = inverse_colour_table(table)
        assert ours.dtype == np.uint8 and np.array_equal(ours, np.argsort(table, axis=1, kind="stable").astype(np.uint8))
