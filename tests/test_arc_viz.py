"""viz-arc: PNGs and one self-contained HTML page, from sources and from a built dataset."""

import numpy as np
import pytest
from PIL import Image

from arc_data import format as fmt
from arc_data.arc.build import BuildConfig, build
from arc_data.arc.viz import PALETTE, VizConfig, decode, grid_image, visualize
from arc_data.errors import DatasetError
from tests.arc_synth import synthetic_tasks, write_kaggle, write_layout


def test_grid_image_uses_palette():
    g = np.array([[0, 1], [2, 9]], np.uint8)
    img = grid_image(g, 5)
    assert img.shape == (11, 11, 3)
    assert tuple(img[2, 2]) == tuple(PALETTE[0]) and tuple(img[7, 7]) == tuple(PALETTE[9])


def test_decode_translated_row():
    g = np.random.default_rng(0).integers(0, 10, size=(4, 6)).astype(np.uint8)
    assert np.array_equal(decode(fmt.encode_grid(g, 7, 11)), g)


def test_viz_from_sources_and_dataset(tmp_path):
    tasks = synthetic_tasks()
    src = write_layout(tmp_path / "data", {"evaluation": tasks["evaluation"]})
    out = tmp_path / "viz"
    page = visualize(VizConfig(sources=[str(src)], tasks=["ev00"], num_aug=2, output_dir=str(out), cell=4))
    text = page.read_text()
    assert text.count("data:image/png;base64,") == 3 and "ev00" in text
    pngs = sorted(out.glob("*.png"))
    with Image.open(pngs[0]) as im:
        assert len(pngs) == 3 and im.size[0] > 10

    ds = tmp_path / "ds"
    build(BuildConfig(sources=[str(src)], output_dir=str(ds), num_aug=2, progress=False, materialize=False))
    page = visualize(VizConfig(data_dir=str(ds), max_tasks=2, num_aug=1, output_dir=str(tmp_path / "v2"), cell=4))
    assert page.read_text().count("<img") == 4

    # Kaggle challenges without solutions still render (test outputs shown as unknown)
    chal = write_kaggle(tmp_path / "k", "x_evaluation", {"t1": tasks["training"]["tr00"]}, solutions=False)
    visualize(VizConfig(sources=[str(chal)], output_dir=str(tmp_path / "v3"), cell=4))
    assert (tmp_path / "v3" / "t1.png").is_file()


def test_viz_errors(tmp_path):
    with pytest.raises(DatasetError, match="exactly one of sources"):
        VizConfig(output_dir=str(tmp_path))
    src = write_layout(tmp_path / "data", {"training": synthetic_tasks()["training"]})
    with pytest.raises(DatasetError, match="task nope: not found"):
        visualize(VizConfig(sources=[str(src)], tasks=["nope"], output_dir=str(tmp_path / "v")))


def test_viz_of_a_puzzle_build_says_it_draws_arc_builds(tmp_path, capsys):
    """viz-arc data_dir=<a build-puzzles Sudoku dataset>: `augmentations.npz: missing (not a built dataset, or a
    half-written one?)` of a complete build (new-user audit); the line now says what the dataset is."""
    from hrm_deeploop.cli import main

    raw = tmp_path / "raw"
    assert main(["generate-puzzles", "task=sudoku", "size=4", "count_train=4", "count_test=2", "progress=false",
                 f"output_dir={raw}"]) == 0
    assert main(["build-puzzles", "task=sudoku", f"source={raw}", "progress=false", f"output_dir={tmp_path / 's'}"]) == 0
    capsys.readouterr()
    assert main(["viz-arc", f"data_dir={tmp_path / 's'}", f"output_dir={tmp_path / 'v'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a sudoku dataset, not an ARC one" in err and "missing" not in err, err
    assert not (tmp_path / "v").exists()
