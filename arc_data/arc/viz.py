"""`hrm-deeploop viz-arc`: ARC tasks (and some augmentations) to PNG and one self-contained HTML page.

    hrm-deeploop viz-arc sources=[arc1] tasks=[007bbfcc] num_aug=3 output_dir=outputs/arc-viz
    hrm-deeploop viz-arc data_dir=data/arc-aug-1000 max_tasks=8 num_aug=2

From sources, augmentations are drawn at random (seeded) with the builder's transforms; from a built
dataset, the first `num_aug` augmented puzzles of each task's group are decoded from the examples.
Writes `<output_dir>/<puzzle name>.png` and `<output_dir>/index.html` (images embedded as base64).
"""

from __future__ import annotations

import base64
import html
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arc_data import format as fmt
from arc_data.arc.palette import BACKGROUND, LINE, PALETTE, UNKNOWN
from arc_data.arc.plan import MAX_DISTINCT_AUG
from arc_data.arc.sources import SOURCE_NAMES, load_sources
from arc_data.budget import check_count, check_fits
from arc_data.errors import ArcError, raised_as
from arc_data.files.names import file_stem

LABEL_SIZE, LABEL_H = 13, 18  # px: labels in Pillow's bundled FreeType font, and the line they take


@dataclass
class VizConfig:
    """`hrm-deeploop viz-arc`: render ARC tasks (and augmentations) to PNG + one HTML gallery.
    Give sources=[...] (as build-arc) or data_dir=<built dataset>."""

    sources: list[str] = field(default_factory=list)  # source specs, as for build-arc
    data_dir: str = ""  # or a built dataset (either layout)
    tasks: list[str] = field(default_factory=list)  # task names; empty: the first max_tasks
    max_tasks: int = 12
    num_aug: int = 0  # also render this many augmentations of each task
    seed: int = 42
    cell: int = 12  # pixels per cell
    output_dir: str = "outputs/arc-viz"
    eval_name: str = "evaluation"

    def __post_init__(self) -> None:
        for key, lo in (("max_tasks", 1), ("num_aug", 0), ("seed", 0), ("cell", 2)):
            v = getattr(self, key)
            if not isinstance(v, int) or v < lo:
                raise ArcError(f"{key}={v!r}: must be >= {lo}")
        if bool(self.sources) == bool(self.data_dir):
            raise ArcError("give exactly one of sources=[...] or data_dir=<built dataset>")


@dataclass
class Picture:
    task: str
    name: str  # puzzle name (HRM naming)
    caption: str
    pairs: list[tuple[str, np.ndarray, np.ndarray | None]]  # (label, input, output or None)


def grid_indices(grid: np.ndarray, cell: int, line: int) -> np.ndarray:
    """(h*cell+1, w*cell+1) uint8 palette indices: each cell its colour 0..9 in a cell x cell square,
    1-pixel lines of index `line` between the cells and around the grid."""
    g = np.asarray(grid, dtype=np.uint8)
    h, w = g.shape
    idx = np.full((h * cell + 1, w * cell + 1), line, np.uint8)
    idx[: h * cell, : w * cell] = g.repeat(cell, axis=0).repeat(cell, axis=1)
    idx[::cell, :] = line
    idx[:, ::cell] = line
    return idx


def grid_image(grid: np.ndarray | None, cell: int) -> np.ndarray:
    """RGB uint8 image of one grid, 1-pixel grid lines; None -> a grey placeholder."""
    if grid is None:
        img = np.full((3 * cell + 1, 3 * cell + 1, 3), UNKNOWN, np.uint8)
        img[[0, -1], :] = LINE
        img[:, [0, -1]] = LINE
        return img
    return np.concatenate([PALETTE, [LINE]]).astype(np.uint8)[grid_indices(grid, cell, len(PALETTE))]


def render(pic: Picture, cell: int):
    """One PNG-able PIL image: a row per pair, input -> output, with labels."""
    from PIL import Image, ImageDraw, ImageFont  # lazy: PIL only where pictures are drawn

    font = ImageFont.load_default(size=LABEL_SIZE)
    gap, label_h, arrow_w = cell, LABEL_H, 3 * cell
    rows = [(lab, grid_image(a, cell), grid_image(b, cell)) for lab, a, b in pic.pairs]
    width = max(a.shape[1] + arrow_w + b.shape[1] for _, a, b in rows) + 2 * gap
    height = label_h + sum(label_h + max(a.shape[0], b.shape[0]) + gap for _, a, b in rows) + gap
    text_w = ImageDraw.Draw(Image.new("RGB", (1, 1))).textlength(pic.caption, font=font)
    width = max(width, int(text_w) + 2 * gap)
    canvas = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    draw.text((gap, 2), pic.caption, fill=(0, 0, 0), font=font)
    y = label_h + gap // 2
    for lab, a, b in rows:
        draw.text((gap, y), lab, fill=(60, 60, 60), font=font)
        y += label_h
        canvas.paste(Image.fromarray(a), (gap, y))
        xb = gap + a.shape[1] + arrow_w
        mid = y + a.shape[0] // 2
        draw.line([(gap + a.shape[1] + cell // 2, mid), (xb - cell // 2, mid)], fill=LINE, width=2)
        draw.polygon([(xb - cell // 2, mid), (xb - cell, mid - cell // 3), (xb - cell, mid + cell // 3)], fill=LINE)
        canvas.paste(Image.fromarray(b), (xb, y))
        y += max(a.shape[0], b.shape[0]) + gap
    return canvas


def decode(tokens: np.ndarray) -> np.ndarray:
    """An encoded (possibly translated) row -> grid: the bounding box of the colour tokens."""
    g = np.asarray(tokens).reshape(fmt.MAX_SIDE, fmt.MAX_SIDE)
    colour = g >= fmt.COLOUR_OFFSET
    rows, cols = np.nonzero(colour.any(1))[0], np.nonzero(colour.any(0))[0]
    if len(rows) == 0:
        return np.zeros((0, 0), np.uint8)
    return (g[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1] - fmt.COLOUR_OFFSET).astype(np.uint8)


def _select(names: list[str], wanted: list[str], max_tasks: int, where: str) -> list[str]:
    if wanted:
        missing = [t for t in wanted if t not in set(names)]
        if missing:
            raise ArcError(f"{where}: task {missing[0]}: not found")
        return list(wanted)
    return names[: max(0, max_tasks)]


def picture_bytes(shapes: list[tuple[tuple[int, int], tuple[int, int]]], cell: int) -> int:
    """Peak memory of rendering one picture whose pairs have these (input, output) grid shapes:
    the canvas plus each grid's upscaled block and mask (`render`, `grid_image`), transposes included."""
    side = [(max(a) * cell + 1, max(b) * cell + 1) for a, b in shapes] or [(3 * cell + 1, 3 * cell + 1)]
    width = max(a + 3 * cell + b for a, b in side) + 2 * cell
    height = LABEL_H + sum(LABEL_H + max(a, b) + cell for a, b in side) + cell
    return 3 * width * height + 7 * max(max(a, b) ** 2 for a, b in side)


def check_request(cfg: VizConfig, num_pictures: int, largest: int, first: Picture) -> None:
    """Refuse, before rendering, what cannot exist or what this machine cannot hold: the largest
    picture's canvas (cell=100000), and every picture's PNG twice (files + the gallery's base64),
    estimated from the first picture's PNG."""
    check_count("num_aug", cfg.num_aug, MAX_DISTINCT_AUG,
                "8 dihedral transforms x 9! colour permutations per task", "lower num_aug")
    check_fits(f"cell={cfg.cell}", memory=largest, fix="lower cell")
    if num_pictures > 1:
        buf = io.BytesIO()
        render(first, cfg.cell).save(buf, format="PNG")
        png = len(buf.getvalue())
        check_fits(f"{num_pictures:,} pictures (num_aug={cfg.num_aug})", memory=num_pictures * png * 4 / 3,
                   disk=num_pictures * png * 7 / 3, at=Path(cfg.output_dir), fix="lower num_aug or max_tasks")


def pictures_from_sources(cfg: VizConfig) -> list[Picture]:
    from arc_data.arc.generated import GeneratedSourceConfig, loader  # lazy: viz-arc --help imports viz

    tasks, infos = load_sources(list(cfg.sources), cfg.eval_name, require_outputs=False,
                                load=loader(GeneratedSourceConfig(), cfg.seed))  # rearc:/arcgen:/barc: too
    for note in (n for info in infos for n in info.skipped):
        print(f"viz-arc: skipped {note}", file=sys.stderr)
    by_name = {t.name: t for t in tasks}
    chosen = _select([t.name for t in tasks], list(cfg.tasks), cfg.max_tasks, ",".join(cfg.sources))
    if chosen:
        shapes = {n: [(a.shape, b.shape if b is not None else (3, 3)) for a, b in by_name[n].train + by_name[n].test]
                  for n in chosen}
        t0 = by_name[chosen[0]]
        first = Picture(t0.name, t0.name, t0.name, [(f"pair {i}", a, b) for i, (a, b) in enumerate(t0.train + t0.test)])
        check_request(cfg, len(chosen) * (cfg.num_aug + 1), max(picture_bytes(s, cfg.cell) for s in shapes.values()),
                      first)
    rng = np.random.Generator(np.random.PCG64(cfg.seed))
    pics = []
    for name in chosen:
        t = by_name[name]
        variants = [(0, np.arange(10, dtype=np.uint8))]
        for _ in range(cfg.num_aug):
            variants.append((int(rng.integers(0, 8)), np.concatenate([[0], rng.permutation(9) + 1]).astype(np.uint8)))
        for k, (tid, cmap) in enumerate(variants):
            pairs = []
            for kind, lst in (("train", t.train), ("test", t.test)):
                for i, (a, b) in enumerate(lst):
                    pairs.append((f"{kind} {i}", fmt.augment_grid(a, tid, cmap),
                                  None if b is None else fmt.augment_grid(b, tid, cmap)))
            pname = name if k == 0 else fmt.aug_name(name, tid, cmap)
            split = "evaluation" if t.is_eval else t.subset
            caption = f"{name} ({split})" if k == 0 else f"{pname}  (dihedral {tid}, colours {''.join(map(str, cmap))})"
            pics.append(Picture(name, pname, caption, pairs))
    return pics


def pictures_from_dataset(cfg: VizConfig) -> list[Picture]:
    from arc_data.dataset import (  # lazy: viz-arc --help imports viz
        load_augmentations,
        load_identifiers,
        open_split,
        task_kind,
    )

    root = Path(cfg.data_dir)
    kind = task_kind(root)
    if kind != "arc":  # a Sudoku or Maze build has no augmentation table; its rows are no ARC grids
        raise ArcError(f"data_dir={root}: a {kind} dataset, not an ARC one; viz-arc draws ARC builds (Sudoku and "
                       "Maze boards are drawn from Python: arc_data/puzzles/viz.render_puzzle, docs/puzzles.md#pictures)")
    aug = load_augmentations(root)
    ids = load_identifiers(root)
    names = [str(n) for n in aug.task_names]
    chosen = _select(names, list(cfg.tasks), cfg.max_tasks, str(root))
    side = (fmt.MAX_SIDE, fmt.MAX_SIDE)  # the grids are decoded later: one pair of the largest grids, a lower bound
    check_fits(f"cell={cfg.cell}", memory=picture_bytes([(side, side)], cfg.cell), fix="lower cell")
    splits = {s: open_split(root, s) for s in fmt.SPLITS}
    where = {s: {int(pid): p for p, pid in enumerate(sp.puzzle_identifiers)} for s, sp in splits.items()}
    pics = []
    for name in chosen:
        t = names.index(name)
        pids = np.nonzero(aug.base_task == t)[0][: 1 + max(0, cfg.num_aug)]
        for k, pid in enumerate(pids):
            pairs = []
            for s, sp in splits.items():
                p = where[s].get(int(pid))
                if p is None:
                    continue
                idx = np.arange(sp.puzzle_indices[p], sp.puzzle_indices[p + 1])
                inputs, labels = sp.examples(idx)
                pairs += [(f"{s} split, example {i}", decode(a), decode(b))
                          for i, (a, b) in enumerate(zip(inputs, labels))]
            tid, cmap = int(aug.dihedral[pid]), aug.colour_map[pid]
            caption = ids[pid] if k == 0 else f"{ids[pid]}  (dihedral {tid}, colours {''.join(map(str, cmap))})"
            pics.append(Picture(name, ids[pid], caption, pairs))
    return pics


def visualize(cfg: VizConfig) -> Path:
    """Write the gallery; every error is an ArcError."""
    with raised_as(ArcError):
        return _visualize(cfg)


def _visualize(cfg: VizConfig) -> Path:
    from arc_data.arc.generated import source_path  # lazy: viz-arc --help imports viz
    from arc_data.files.guard import check_output_dir  # lazy: viz-arc --help imports viz
    from arc_data.files.publish import staged_outputs  # lazy: viz-arc --help imports viz

    out = check_output_dir(cfg.output_dir, [source_path(s) for s in cfg.sources if s not in SOURCE_NAMES] + [cfg.data_dir])
    pics = pictures_from_sources(cfg) if cfg.sources else pictures_from_dataset(cfg)
    names = [f"{file_stem(pic.name)}.png" for pic in pics]
    with staged_outputs(out, [*names, "index.html"], True, "viz-arc") as stage:  # all pictures, or none
        num_tasks = _write_gallery(cfg, pics, names, stage)
    print(f"viz-arc: {len(pics)} pictures of {num_tasks} tasks -> {out}/index.html")
    return out / "index.html"


def _write_gallery(cfg: VizConfig, pics: list[Picture], names: list[str], folder: Path) -> int:
    """Every picture's PNG and index.html (each PNG inline) into `folder`; returns the number of tasks."""
    blocks: dict[str, list[str]] = {}
    for pic, name in zip(pics, names):
        buf = io.BytesIO()
        render(pic, cfg.cell).save(buf, format="PNG")
        (folder / name).write_bytes(buf.getvalue())
        b64 = base64.b64encode(buf.getvalue()).decode()
        blocks.setdefault(pic.task, []).append(
            f'<figure><img src="data:image/png;base64,{b64}" alt="{html.escape(pic.name)}">'
            f"<figcaption>{html.escape(pic.caption)}</figcaption></figure>"
        )
    title = "ARC tasks: " + html.escape(", ".join(cfg.sources) if cfg.sources else cfg.data_dir)
    body = "\n".join(f'<section><h2>{html.escape(t)}</h2><div class="row">{"".join(b)}</div></section>'
                     for t, b in blocks.items())
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>"
        "body{font-family:sans-serif;margin:1em}h2{font-size:1.1em;margin:.8em 0 .3em}"
        ".row{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}"
        "figure{margin:0;border:1px solid #ddd;padding:.3em}figcaption{font-size:.8em;color:#444}"
        f"</style></head><body><h1>{title}</h1>\n{body}\n</body></html>\n"
    )
    (folder / "index.html").write_text(page)
    return len(blocks)


def run(cfg: VizConfig) -> int:
    """CLI entry (`hrm-deeploop viz-arc`)."""
    visualize(cfg)
    return 0
