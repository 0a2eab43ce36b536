"""docs/reproduce.md: every command it lists composes, and the paper experiments hold the papers'
settings (looped GPT tables 1-2 and figure 6; HRM's ARC-2 run; the puzzle datasets)."""
import re
from pathlib import Path

import pytest

from hrm_deeploop.cli import compose
from hrm_deeploop.training.lm import grad_accum_steps

DOC = Path(__file__).resolve().parents[1] / "docs" / "reproduce.md"
COMPOSABLE = {"train", "train-gpt", "sweep", "build-arc", "build-puzzles", "prepare-text", "scales"}


def doc_commands() -> list[tuple[str, list[str]]]:
    """(subcommand, overrides) for every `hrm-deeploop SUB ...` / `-m hrm_deeploop.cli SUB ...` in the
    page, with continuation lines joined and the R / SCHEME placeholders filled in."""
    text = re.sub(r"\\\n\s*", " ", DOC.read_text())
    found = []
    for m in re.finditer(r"(?:hrm-deeploop|-m hrm_deeploop\.cli) ([a-z-]+)([^`\n#|]*)", text):
        sub, rest = m.group(1), m.group(2).replace("SCHEME", "deeploop").replace("_RR", "_R3")
        args = [a.strip("'") for a in rest.split() if "=" in a]
        args = [a.replace("model.num_rounds=R", "model.num_rounds=3") for a in args]
        if sub in COMPOSABLE and not any("..." in a for a in args):
            found.append((sub, args))
    return found


def test_doc_lists_the_paper_experiments():
    subs = {(s, next((a for a in args if a.startswith("experiment=")), "")) for s, args in doc_commands()}
    for name in ("gpt2_small_fineweb", "gpt2_medium_fineweb"):
        assert ("train-gpt", f"experiment={name}") in subs and ("sweep", f"experiment={name}") in subs
    for name in ("arc1_hrm_baseline", "arc1_hrm_deeploop", "arc2_hrm_baseline", "sudoku_hrm_baseline",
                 "maze_hrm_baseline", "trm_arc1_baseline", "trm_arc2_baseline", "trm_sudoku_mlp_baseline",
                 "trm_maze_baseline", "urm_arc1_baseline", "urm_arc2_baseline", "urm_sudoku_baseline"):
        assert ("train", f"experiment={name}") in subs, name


@pytest.mark.parametrize("sub,args", doc_commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v)[:60])
def test_doc_command_composes(sub, args):
    compose(sub, args)


@pytest.mark.parametrize("name,hidden,blocks,micro", [("gpt2_small_fineweb", 768, 12, 12), ("gpt2_medium_fineweb", 1024, 24, 6)])
def test_gpt_paper_experiments(name, hidden, blocks, micro):
    for r in (1, 3, 5, 7):
        for scheme in ("baseline", "deeploop"):
            t = compose("train-gpt", [f"experiment={name}", f"model.num_rounds={r}", f"scaling={scheme}"])
            m = t.model
            assert (m.hidden_size, m.num_blocks, m.num_rounds, m.seq_len) == (hidden, blocks, r, 1024)
            assert t.scaling.scheme == scheme and t.train.compile
            # 100K steps x 480 x 1024 tokens: 49.15B tokens, from the 50B-token recipe's shards
            assert (t.train.max_steps, t.train.global_batch_tokens, t.train.micro_batch_size) == (100000, 480 * 1024, micro)
            assert t.data.train == "data/fineweb_edu_50B/train_*.bin" and t.data.val == "data/fineweb_edu_50B/val_*.bin"
            assert (t.optim.lr, t.optim.warmup_steps) == (6e-4, 2000)
            for world in (1, 2, 4, 8):  # the documented commands need no batch override on 1-8 GPUs
                grad_accum_steps(t.train.global_batch_tokens, t.train.micro_batch_size, m.seq_len, world)
    with pytest.raises(Exception, match="whole multiple"):
        grad_accum_steps(480 * 1024, micro, 1024, 3)  # the check itself can fail


def test_sweep_defaults_are_the_papers():
    t = compose("sweep", ["experiment=gpt2_small_fineweb"])
    assert (t.kind, t.methods, t.rounds, t.model.hidden_size) == ("rounds", ["baseline", "deeploop"], [1, 3, 5, 7], 768)
    p = compose("sweep", ["experiment=gpt2_small_fineweb", "kind=p", "train.stop_after=2000"])
    assert p.p_values == [0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60] and p.p_rounds == 3 and p.p_seeds == [0, 1, 2, 3, 4]
    assert p.train.max_steps == 100000 and p.train.stop_after == 2000  # step 2000 of the full cosine schedule


def test_puzzle_and_arc2_experiments():
    cases = {"sudoku_hrm_baseline": "data/sudoku-extreme-1k-aug-1000", "maze_hrm_baseline": "data/maze-30x30-hard-1k",
             "arc2_hrm_baseline": "data/arc-2-aug-1000", "trm_arc1_baseline": "data/arc1concept-aug-1000"}
    for name, data_dir in cases.items():
        assert compose("train", [f"experiment={name}"]).data_dir == data_dir
    b = compose("build-puzzles", ["task=maze", "source=sapientinc/maze-30x30-hard-1k", "output_dir=data/maze-30x30-hard-1k"])
    assert b.num_aug == 0  # HRM's and TRM's maze builder: no augmentation


@pytest.mark.parametrize("data_dir", ["arc1concept", "arc2concept", "sudoku"])
def test_urm_paper_experiments(data_dir):
    """URM's scripts/URM_*.sh: loops 16, H_cycles 2, L_cycles 6, 4 layers, ema; ARC: 200000 epochs,
    eval every 2000, puzzle lr 1e-2, wd 0.1, batch 768; Sudoku: 50000 epochs, lr and puzzle lr 1e-4,
    wd 1.0 for both, batch 128. The DeepLoop twins differ in the scheme only."""
    name = {"arc1concept": "urm_arc1", "arc2concept": "urm_arc2", "sudoku": "urm_sudoku"}[data_dir]
    base = compose("train", [f"experiment={name}_baseline"])
    m = base.model
    assert (m.name, m.halt_max_steps, m.num_h_cycles, m.num_l_cycles, m.num_layers) == ("urm", 16, 2, 6, 4)
    assert (m.hidden_size, m.num_heads, m.expansion, m.mlp, m.conv_kernel) == (512, 8, 4.0, "convswiglu", 2)
    assert base.train.ema and base.train.ema_rate == 0.999 and base.train.compile
    assert (base.optim.lr, base.optim.warmup_steps, base.optim.min_lr_ratio) == (1e-4, 2000, 1.0)
    assert base.eval.interval_epochs == 2000 and base.scaling.scheme == "baseline"
    assert base.optim.name == ("muon" if name == "urm_arc2" else "adam_atan2")  # URM_arcagi2.sh: use_muon=True
    if name == "urm_sudoku":
        assert base.data_dir == "data/sudoku-extreme-1k-aug-1000"
        assert (base.train.epochs, base.train.global_batch_size) == (50000, 128)
        assert (base.optim.puzzle_emb_lr, base.optim.weight_decay, base.optim.puzzle_emb_weight_decay) == (1e-4, 1.0, 1.0)
    else:
        assert base.data_dir == f"data/{data_dir}-aug-1000"
        assert (base.train.epochs, base.train.global_batch_size) == (200000, 768)
        assert (base.optim.puzzle_emb_lr, base.optim.weight_decay, base.optim.puzzle_emb_weight_decay) == (1e-2, 0.1, 0.1)
    twin = compose("train", [f"experiment={name}_deeploop"])
    assert twin.scaling.scheme == "deeploop" and twin.model == base.model and twin.optim == base.optim
    assert twin.run_name == f"{name}_deeploop" and twin.data_dir == base.data_dir
