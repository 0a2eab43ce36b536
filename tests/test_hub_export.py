"""`export` to a Hub-style folder and `checkpoint=` from it, from a local folder and from the
Hugging Face cache (offline, in the layout huggingface_hub reads: refs/, snapshots/ linking blobs/):
bit-identical outputs for the looped GPT, HRM, TRM and URM (those two with their weight average); bad
input is one line."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.cli import compose, main, run_subcommand
from hrm_deeploop.training.loop import run_config_dict
from tests.gpt_helpers import write_gpt2_shards

pytest.importorskip("safetensors")
hf_constants = pytest.importorskip("huggingface_hub.constants")

GPT = ["model=gpt_tiny", "model.hidden_size=32", "model.seq_len=32", "model.mlp_multiple=16", "device=cpu",
       "logger=none", "train.progress=false", "train.micro_batch_size=2", "train.global_batch_tokens=64",
       "optim.warmup_steps=1", "data.unigram_tokens=100000", "train.max_steps=3"]
REASONER = {"hrm": ["experiment=hrm_tiny_cpu", "model.hidden_size=32", "model.num_h_layers=1", "model.num_l_layers=1"],
            "trm": ["experiment=trm_tiny_cpu", "model.hidden_size=32", "train.ema=true", "train.ema_rate=0.5"],
            "urm": ["experiment=urm_tiny_cpu", "model.hidden_size=32", "train.ema=true", "train.ema_rate=0.5"]}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny looped-GPT run, a tiny HRM, TRM and URM run on 4x4 Sudoku, and their exports."""
    root = tmp_path_factory.mktemp("hub")
    write_gpt2_shards(root / "shards")
    data = {"train": f"data.train={root}/shards/train_*.bin", "val": f"data.val={root}/shards/val_000000.bin"}
    assert main(["train-gpt", *GPT, data["train"], data["val"], f"output_dir={root / 'gpt'}"]) == 0
    assert run_subcommand("generate-puzzles", ["task=sudoku", "size=4", "count_train=24", "count_test=8",
                                               f"output_dir={root / 'raw'}", "progress=false"]) == 0
    assert run_subcommand("build-puzzles", ["task=sudoku", f"source={root / 'raw'}", "num_aug=0",
                                            f"output_dir={root / 'sudoku'}", "progress=false"]) == 0
    for name, over in REASONER.items():
        assert run_subcommand("train", [*over, f"data_dir={root / 'sudoku'}", f"output_dir={root / name}",
                                        "train.max_steps=3", "train.global_batch_size=8", "checkpoint.every=3",
                                        "eval.every=3", "train.progress=false", "optim.warmup_steps=1"]) == 0
    for name in ("gpt", *REASONER):
        assert main(["export", f"checkpoint={root / name}", f"output_dir={root / (name + '_export')}",
                     f"repo_id=me/tiny-{name}"]) == 0
    return root, data


def _gpt_logits(checkpoint: Path) -> torch.Tensor:
    from hrm_deeploop.loading import load_model

    model = load_model(ckpt.resolve(checkpoint)).model
    x = torch.arange(32).remainder(50257).view(1, 32) * 7
    with torch.no_grad():
        return model(x)[0]


def _reasoner_outputs(checkpoint: Path, data_dir: Path) -> dict[str, torch.Tensor]:
    from hrm_deeploop.data.batches import open_dataset, sequential_batches
    from hrm_deeploop.loading import load_model

    loaded = load_model(checkpoint)
    batch = next(iter(sequential_batches(open_dataset(str(data_dir), "test"), 8, 0, 1)))
    with torch.no_grad():
        _, out = loaded.model.predict(dict(batch.tensors))
    return {"logits": out["logits"], "q_halt": out["q_halt_logits"], "weights": loaded.weights}


def test_export_folder_layout_and_card(world):
    root, _ = world
    out = root / "gpt_export"
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                     "tokenizer_config.json"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["format"] == "hrm-deeploop/export/1" and meta["model"]["name"] == "gpt" and meta["step"] == 3
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_id"] == "gpt2"
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: hrm-deeploop") and "hf://me/tiny-gpt" in card
    assert '"final_train_loss"' in card  # the run's summary figures
    hrm = root / "hrm_export"
    assert {"dataset.json", "identifiers.json"} <= {p.name for p in hrm.iterdir()}
    for name in ("trm", "urm"):  # the weight average is what they export
        meta = json.loads((root / f"{name}_export" / "config.json").read_text())
        assert meta["model"]["name"] == name and meta["weights"] == "ema"


def test_reproduce_command_composes_to_the_run_config(world):
    root, _ = world
    for name, trainer in (("gpt", "train-gpt"), ("trm", "train")):
        card = (root / f"{name}_export" / "README.md").read_text()
        command = card.split("<details>")[1].split("```bash\n")[1].split("\n```")[0]
        argv = shlex.split(command.replace("\\\n", " "))
        assert argv[:2] == ["hrm-deeploop", trainer]
        saved = ckpt.load(ckpt.resolve(root / name))["config"]
        again = run_config_dict(compose(trainer, argv[2:]))
        assert {k: v for k, v in again.items() if k != "resume"} == {k: v for k, v in saved.items() if k != "resume"}


def test_export_loads_back_bit_identical(world):
    root, _ = world
    assert torch.equal(_gpt_logits(root / "gpt"), _gpt_logits(root / "gpt_export"))
    for name in REASONER:
        a = _reasoner_outputs(root / name, root / "sudoku")
        b = _reasoner_outputs(root / f"{name}_export", root / "sudoku")
        assert a["weights"] == b["weights"] == ("raw" if name == "hrm" else "ema")  # the export holds the average
        assert torch.equal(a["logits"], b["logits"]) and torch.equal(a["q_halt"], b["q_halt"])


def _hub_cache(cache: Path, repo_id: str, folder: Path, subdir: str = "", tag: str | None = None) -> None:
    """The layout huggingface_hub writes: blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/<sha256>,
    refs/main (and refs/<tag>, as huggingface_hub names a revision's ref) holding the commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        data = f.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / sha).write_bytes(data)
        link = repo / "snapshots" / COMMIT / subdir / f.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / sha, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    if tag:
        (repo / "refs" / tag).write_text(COMMIT)


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    return cache


def test_hub_checkpoint_read_offline_from_the_cache(world, offline_cache):
    root, _ = world
    _hub_cache(offline_cache, "me/tiny-gpt", root / "gpt_export")
    _hub_cache(offline_cache, "me/tiny-hrm", root / "hrm_export", subdir="sudoku4", tag="v1")
    resolved = ckpt.resolve("hf://me/tiny-gpt")
    assert resolved.name == "model.safetensors" and str(offline_cache) in str(resolved)
    assert torch.equal(_gpt_logits(root / "gpt"), _gpt_logits("hf://me/tiny-gpt"))
    for spec in ("hf://me/tiny-hrm/sudoku4", "hf://me/tiny-hrm@v1/sudoku4", f"hf://me/tiny-hrm@{COMMIT}/sudoku4"):
        a = _reasoner_outputs(root / "hrm", root / "sudoku")
        b = _reasoner_outputs(spec, root / "sudoku")
        assert torch.equal(a["logits"], b["logits"]), spec


def test_hub_errors_are_one_line(world, offline_cache, monkeypatch):
    from hrm_deeploop.errors import UserError

    root, _ = world
    _hub_cache(offline_cache, "me/tiny-gpt", root / "gpt_export")
    cases = {"hf://me/absent": "not in the Hugging Face cache and the Hub cannot be reached",
             "hf://me/tiny-gpt/no_such_file": "no file or folder 'no_such_file'",
             "hf://me": "hf://OWNER/NAME[@REVISION][/PATH]", "hf://me/tiny-gpt@": "hf://OWNER/NAME[@REVISION][/PATH]",
             "hf://me/tiny-gpt/../x": "hf://OWNER/NAME[@REVISION][/PATH]"}
    for spec, text in cases.items():
        with pytest.raises(UserError, match=None) as e:
            ckpt.resolve(spec)
        assert text in str(e.value) and "\n" not in str(e.value), spec
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # the extra not installed
    with pytest.raises(UserError) as e:
        ckpt.resolve("hf://me/tiny-gpt")
    assert "pip install 'hrm-deeploop[hub]'" in str(e.value)


@pytest.mark.slow  # the default suite under 10 minutes: run by .ci/run after it
def test_eval_gpt_from_the_hub_offline_through_the_cli(world, tmp_path):
    """A real process with HF_HUB_OFFLINE=1 and HF_HUB_CACHE set, as a user runs it: same val loss as the run."""
    root, data = world
    cache = tmp_path / "hub"
    _hub_cache(cache, "me/tiny-gpt", root / "gpt_export")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    losses = []
    for checkpoint, out in ((str(root / "gpt"), tmp_path / "a"), ("hf://me/tiny-gpt", tmp_path / "b")):
        done = subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", "eval-gpt", f"checkpoint={checkpoint}",
                               f"data={root}/shards/val_000000.bin", "device=cpu", f"output_dir={out}"],
                              env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        losses.append(json.loads((out / "eval.json").read_text())["val_loss"])
    assert losses[0] == losses[1]


def test_export_bad_input_writes_nothing(world, tmp_path, capsys):
    root, _ = world
    out = tmp_path / "x"
    cases = [([f"checkpoint={tmp_path / 'none'}"], "does not exist"),
             ([f"checkpoint={root / 'gpt'}", f"output_dir={root / 'gpt_export'}"], "already exists"),
             ([f"checkpoint={root / 'gpt'}", f"output_dir={root / 'gpt' / 'checkpoints'}"], "input"),
             (["output_dir=" + str(out)], "checkpoint= is required")]
    for args, text in cases:
        args = args if any(a.startswith("output_dir=") for a in args) else [*args, f"output_dir={out}"]
        assert main(["export", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and text in err[0], (args, err)
        assert not out.exists()


def test_two_exports_are_byte_identical_and_shareable(world, tmp_path, monkeypatch):
    """No path of the exporting shell and no time in any file; modes as the umask says (0644), not 0600."""
    root, _ = world
    old = os.umask(0o022)
    try:
        monkeypatch.chdir(tmp_path)
        assert main(["export", f"checkpoint={root / 'hrm'}", "output_dir=a", "repo_id=me/tiny-hrm"]) == 0
        (tmp_path / "elsewhere").mkdir()
        monkeypatch.chdir(tmp_path / "elsewhere")
        assert main(["export", f"checkpoint={root / 'hrm' / 'checkpoints' / 'step_3.pt'}",
                     f"output_dir={tmp_path / 'b'}", "repo_id=me/tiny-hrm"]) == 0
    finally:
        os.umask(old)
    a, b = tmp_path / "a", tmp_path / "b"
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    for f in a.iterdir():
        assert f.read_bytes() == (b / f.name).read_bytes(), f.name
        assert f.stat().st_mode & 0o777 == 0o644, (f.name, oct(f.stat().st_mode))
    assert a.stat().st_mode & 0o777 == 0o755
    assert str(tmp_path) not in "".join(f.read_text() for f in a.iterdir() if f.suffix in (".json", ".md"))
    assert {"dataset.json", "identifiers.json"} <= {p.name for p in a.iterdir()}


def test_card_leads_with_the_model_its_data_figures_and_use(world):
    root, _ = world
    card = (root / "hrm_export" / "README.md").read_text()
    head, details = card.split("<details>")
    assert head.index("# HRM") < head.index("A HRM reasoner") < head.index("## Data") < head.index("## Measured") \
        < head.index("## Use") < head.index("## Upload")
    assert "seq_len: 16" in head and '"final_train_loss"' in head and "hf://me/tiny-hrm" in head
    assert "hidden_size: 32" in details and "data_dir:" in details and "hrm-deeploop train" in details


def test_export_finds_the_runs_relative_data_or_says_so(world, tmp_path, monkeypatch):
    """A run trained with a relative data_dir: export from elsewhere finds it beside the run (checked
    against the run's data_identity.json), or fails in one line naming data_dir=; data_dir= names it."""
    import shutil

    root, _ = world
    project = tmp_path / "project"
    shutil.copytree(root / "sudoku", project / "data" / "sudoku4")
    monkeypatch.chdir(project)
    assert run_subcommand("train", [*REASONER["hrm"], "data_dir=data/sudoku4", "output_dir=runs/r", "train.max_steps=1",
                                    "train.global_batch_size=8", "train.progress=false", "optim.warmup_steps=1"]) == 0
    (tmp_path / "shell").mkdir()
    monkeypatch.chdir(tmp_path / "shell")
    assert main(["export", f"checkpoint={project / 'runs' / 'r'}", "output_dir=e1"]) == 0
    assert (tmp_path / "shell" / "e1" / "dataset.json").read_bytes() == \
        (project / "data" / "sudoku4" / "train" / "dataset.json").read_bytes()
    shutil.move(project / "data", tmp_path / "moved")
    assert main(["export", f"checkpoint={project / 'runs' / 'r'}", "output_dir=e2"]) == 2
    assert not (tmp_path / "shell" / "e2").exists()
    assert main(["export", f"checkpoint={project / 'runs' / 'r'}", "output_dir=e3",
                 f"data_dir={tmp_path / 'moved' / 'sudoku4'}"]) == 0


def test_hf_reference_reads_a_local_hub_folder(world, tmp_path, monkeypatch):
    """HRM_DEEPLOOP_HUB_DIR=DIR: hf://OWNER/NAME[@REV][/PATH] is DIR/OWNER/NAME[@REV][/PATH], no download."""
    import shutil

    from hrm_deeploop.errors import UserError

    root, _ = world
    shutil.copytree(root / "hrm_export", tmp_path / "hub" / "me" / "tiny-hrm")
    shutil.copytree(root / "gpt_export", tmp_path / "hub" / "me" / "tiny-gpt@v1" / "sub")
    monkeypatch.setenv("HRM_DEEPLOOP_HUB_DIR", str(tmp_path / "hub"))
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # never used
    assert ckpt.resolve("hf://me/tiny-hrm") == tmp_path / "hub" / "me" / "tiny-hrm" / "model.safetensors"
    a, b = _reasoner_outputs(root / "hrm", root / "sudoku"), _reasoner_outputs("hf://me/tiny-hrm", root / "sudoku")
    assert torch.equal(a["logits"], b["logits"])
    assert torch.equal(_gpt_logits(root / "gpt"), _gpt_logits("hf://me/tiny-gpt@v1/sub"))
    for spec, text in (("hf://me/absent", "has no folder"), ("hf://me/tiny-hrm/nope", "no file or folder 'nope'")):
        with pytest.raises(UserError) as e:
            ckpt.resolve(spec)
        assert text in str(e.value) and "\n" not in str(e.value)


def test_a_file_reference_downloads_what_is_read_beside_it():
    """hf://O/N/PATH fetches the file and what the loaders and the strict protocol read beside it:
    an official config, an export's config, the run record; above checkpoints/, the run's config."""
    from hrm_deeploop.hub import _patterns

    assert _patterns("") is None
    assert set(_patterns("step_5")) == {"step_5", "step_5/*", "all_config.yaml", "config.json", "trained_tasks.json"}
    got = set(_patterns("run/checkpoints/step_5.pt"))
    assert {"run/checkpoints/trained_tasks.json", "run/config.yaml", "run/trained_tasks.json"} <= got
    assert "run/checkpoints/step_5.pt" in got and "config.yaml" not in got
