"""`hrm-deeploop bundle`: what a notebook without network needs to run `ttt` into a submission.

`output_dir/`:
- `wheels/`: our wheel (built from the checkout, or `source=` a checkout or a built .whl) and the
  wheels of every dependency the notebook image lacks, for the notebook's Python and platform
  (`python_version`, `platform`; Kaggle's image by default). `image_has` names what is not bundled
  (IMAGE_PACKAGES: torch, triton, numpy, numba, llvmlite, matplotlib, pillow, tqdm, wandb; read from
  Kaggle/docker-python: its image is Colab's runtime, Python 3.12, plus kaggle_requirements.txt,
  and its tests import numba, wandb, matplotlib and PIL). The rest is resolved here by pip (`pip
  install --dry-run --report`, this interpreter's resolver) and fetched pinned: wheels for the
  target with `pip download --platform`, the sdist-only ones (antlr4) built here with `pip wheel`
  and kept only when pure Python;
- `checkpoint/`: the run folder's own files (config.yaml, summary.json, ..., not the metrics log)
  and one `checkpoints/step_N.pt` (the latest, or `step=`), or an exported folder as it is;
- `run.py` (`kaggle_run.py`): installs offline and runs `ttt` over the GPUs into
  /kaggle/working/submission.json; `README.md`; `bundle.json` (what was bundled, for whom; the
  marker that lets a later bundle replace this one).

Written in a folder beside `output_dir` and renamed into place (`publish.atomic_dir`): a refusal or
a failed download leaves nothing behind. An `output_dir` that exists is replaced only if it is an
earlier bundle (or empty).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from hrm_deeploop import hub
from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.typed_config import at_least, one_of

MANIFEST = "bundle.json"
FORMAT = "hrm-deeploop/bundle/1"
RUN_SCRIPT = Path(__file__).with_name("kaggle_run.py")
# What a Kaggle notebook image already has (Kaggle/docker-python, 2026-08: Colab's runtime image plus
# kaggle_requirements.txt; its tests import numba, wandb, matplotlib, PIL). torch brings triton.
IMAGE_PACKAGES = ["torch", "triton", "numpy", "numba", "llvmlite", "matplotlib", "pillow", "tqdm", "wandb"]
# The checkout's parts that make our wheel (pyproject.toml's packages and package-dir; a test checks it)
SOURCE_PARTS = ("pyproject.toml", "README.md", "hrm_deeploop", "arc_data", "eval", "configs")
LEFT_OUT = ("run.lock", "metrics.jsonl", "metrics.csv")  # run-folder files a notebook does not need
RESERVED = ("checkpoint", "challenges", "output_dir", "time_budget", "protocol", "workers")  # kaggle_run's own


@dataclass
class BundleConfig:
    """`hrm-deeploop bundle`: wheels, checkpoint and run.py for an offline notebook (the ARC Prize's
    Kaggle setting): `python run.py` there installs with `pip --no-index` and runs `ttt` over the GPUs
    into /kaggle/working/submission.json (docs/unseen-tasks.md#an-offline-bundle)."""

    checkpoint: str | None = None  # required: a run folder (its latest step), a checkpoints/step_N.pt, or an export
    output_dir: str | None = None  # required: the bundle folder (an earlier bundle there is replaced)
    step: int | None = None  # with a run folder: this step's checkpoint instead of the latest
    source: str | None = None  # our wheel from this checkout or .whl file; None: the checkout this command runs from
    python_version: str | None = "3.12"  # the notebook's Python (Kaggle's image: 3.12); None: this interpreter's
    platform: str | None = "manylinux_2_35_x86_64"  # the notebook's glibc and CPU (Ubuntu 22.04); None: this machine's
    image_has: list[str] = field(default_factory=lambda: list(IMAGE_PACKAGES))  # packages the image has: not bundled
    challenges: str = "/kaggle/input/arc-prize-2025/arc-agi_test_challenges.json"  # run.py's default challenges file
    minutes: float = 660.0  # run.py's default wall clock, install included (11 h of the ARC Prize's 12 h)
    protocol: str = "strict"  # run.py's default ttt protocol
    ttt_overrides: list[str] = field(default_factory=list)  # more `ttt` key=value items run.py passes (steps=, ...)

    def __post_init__(self) -> None:
        if self.step is not None:
            at_least("step", self.step, 0)
        at_least("minutes", self.minutes, 0)
        one_of("protocol", self.protocol, ("strict", "transductive"))
        if self.python_version is not None and not re.fullmatch(r"3\.\d{1,2}", self.python_version):
            raise ConfigError(f"python_version={self.python_version}: MAJOR.MINOR such as 3.12, or null (this one's)")
        if self.platform is not None and not re.fullmatch(r"manylinux_2_\d+_(x86_64|aarch64)", self.platform):
            raise ConfigError(f"platform={self.platform}: a manylinux_2_GLIBC_ARCH tag such as manylinux_2_35_x86_64, "
                              "or null (this machine's)")
        for o in self.ttt_overrides:
            key = o.partition("=")[0]
            if "=" not in o or key in RESERVED:
                raise ConfigError(f"ttt_overrides: '{o}': " + ("each item is key=value" if "=" not in o else
                                  f"run.py sets {key} itself (its --{key.replace('_', '-')} or bundle's own key)"))


def _name(n: str) -> str:
    """A project name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", n).lower()


def _pip(args: list[str], what: str) -> str:
    """Run pip with this interpreter; its output, or one line naming the package it could not fetch."""
    r = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    text = r.stdout + r.stderr
    if r.returncode == 0:
        return text
    missing = re.findall(r"(?:No matching distribution found for|satisfies the requirement) (\S+)", text)
    if missing:
        raise UserError(f"cannot fetch {missing[-1]} ({what}): no network to the package index, or no wheel of "
                        "it for the notebook's Python and platform")
    last = [ln.strip() for ln in text.splitlines() if ln.strip() and "is ignored" not in ln][-1:] or ["(no output)"]
    raise UserError(f"pip failed ({what}): {last[0]}")


def target_flags(python_version: str | None, platform: str | None) -> list[str]:
    """pip download's flags for the notebook: its Python and every manylinux tag its glibc accepts
    (pip takes the tags literally: manylinux_2_35 alone would refuse a manylinux_2_28 wheel)."""
    flags = ["--only-binary=:all:"]
    if python_version:
        flags += ["--python-version", python_version, "--implementation", "cp"]
    if platform:
        m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
        assert m, platform  # checked by BundleConfig
        glibc, arch = int(m.group(1)), m.group(2)
        tags = [f"manylinux_2_{v}_{arch}" for v in range(glibc, 4, -1)]
        tags += [f"{legacy}_{arch}" for legacy, v in (("manylinux2014", 17), ("manylinux2010", 12),
                                                      ("manylinux1", 5)) if v <= glibc]
        flags += [f"--platform={t}" for t in tags]
    return flags


def our_wheel(source: str | None, wheels: Path, scratch: Path) -> Path:
    """hrm-deeploop's wheel in `wheels/`: copied from a .whl, or built (no deps) from a copy of the
    checkout's package folders, so nothing is written into the checkout itself."""
    if source and source.endswith(".whl"):
        src = Path(source)
        if not src.is_file():
            raise UserError(f"source={source}: no such wheel")
        return Path(shutil.copy2(src, wheels / src.name))
    root = Path(source) if source else Path(__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file() or 'name = "hrm-deeploop"' not in (root / "pyproject.toml").read_text():
        raise UserError(f"source={source or root}: not an hrm-deeploop checkout (no pyproject.toml naming it); "
                        "give source=CHECKOUT or source=FILE.whl")
    copy = scratch / "src"
    copy.mkdir(parents=True)
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", "build")
    for part in SOURCE_PARTS:
        p = root / part
        if p.is_dir():
            shutil.copytree(p, copy / part, ignore=junk)
        elif p.is_file():
            shutil.copy2(p, copy / part)
    _pip(["wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(copy)], "building hrm-deeploop")
    built = sorted(wheels.glob("hrm_deeploop-*.whl"))
    if len(built) != 1:
        raise UserError(f"building hrm-deeploop's wheel left {len(built)} wheels")
    return built[0]


def requirements(wheel: Path, image_has: list[str]) -> list[str]:
    """The wheel's own requirements (no extras) less what the image has."""
    from packaging.requirements import Requirement  # lazy: pip's own dependency, only here

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    skip = {_name(n) for n in image_has}
    reqs = [Requirement(ln.split(":", 1)[1].strip()) for ln in lines if ln.startswith("Requires-Dist:")]
    return [str(r) for r in reqs if _name(r.name) not in skip and not (r.marker and "extra" in str(r.marker))]


def dependency_wheels(reqs: list[str], cfg: BundleConfig, wheels: Path, scratch: Path) -> list[str]:
    """Every package `reqs` pull in, less the image's, as wheels in `wheels/`; their name==version."""
    if not reqs:
        return []
    report = scratch / "resolve.json"
    _pip(["install", "--dry-run", "--ignore-installed", "-q", "--report", str(report), *reqs],
         "resolving the dependencies")
    skip = {_name(n) for n in cfg.image_has}
    binary, sdist = [], []
    for item in json.loads(report.read_text()).get("install", []):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if _name(name) in skip:
            continue
        url = item.get("download_info", {}).get("url", "")
        (binary if url.endswith(".whl") else sdist).append(f"{name}=={version}")
    if binary:
        _pip(["download", "--no-deps", "-q", "-d", str(wheels), *target_flags(cfg.python_version, cfg.platform),
              *binary], "for Python " + (cfg.python_version or "here") + " on " + (cfg.platform or "this machine"))
    if sdist:  # no wheel on the index (antlr4-python3-runtime): built here, usable elsewhere only if pure Python
        _pip(["wheel", "--no-deps", "-q", "-w", str(wheels), *sdist], "building " + " ".join(sdist))
        cross = cfg.python_version is not None or cfg.platform is not None
        native = [w.name for w in wheels.glob("*.whl") if not w.name.endswith("-none-any.whl")
                  and _name(w.name.split("-")[0]) in {_name(s.split("==")[0]) for s in sdist}]
        if cross and native:
            raise UserError(f"{native[0]} has no wheel on the index and builds for this machine only; build the "
                            "bundle on the notebook's Python and platform (python_version=null platform=null)")
    return binary + sdist


def checkpoint_files(checkpoint: str, step: int | None) -> tuple[list[tuple[Path, str]], int | None]:
    """(file, its path inside checkpoint/) of what `ttt` needs, and the step; a missing or
    unusable checkpoint is one line."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch; keeps `bundle --help` light

    p = Path(checkpoint)
    if not p.exists():
        raise UserError(f"checkpoint={checkpoint}: no such file or folder")
    if p.is_dir() and hub.is_export(p):
        if step is not None:
            raise ConfigError(f"step={step}: {checkpoint} is an exported folder (one set of weights)")
        return [(f, f.name) for f in sorted(p.iterdir()) if f.is_file()], None
    if p.is_file():
        m = re.fullmatch(r"step_(\d+)\.pt", p.name)
        if not m or p.parent.name != "checkpoints":
            raise UserError(f"checkpoint={checkpoint}: not a run's checkpoints/step_N.pt (give the run folder)")
        if step is not None:
            raise ConfigError(f"step={step}: give a run folder with step=, or the step_N.pt file alone")
        run, chosen, n = p.parent.parent, p, int(m.group(1))
    else:
        run = p
        found = dict(ckpt.list_checkpoints(run))
        if not found:
            raise UserError(f"checkpoint={checkpoint}: holds no checkpoints/step_N.pt (nothing to bundle)")
        n = step if step is not None else max(found)
        if n not in found:
            raise UserError(f"step={step}: {checkpoint} has checkpoints at steps {', '.join(map(str, sorted(found)))}")
        chosen = found[n]
    if not (run / "config.yaml").is_file():
        raise UserError(f"checkpoint={checkpoint}: {run} has no config.yaml beside its checkpoints (not a run folder)")
    own = [(f, f.name) for f in sorted(run.iterdir()) if f.is_file() and f.name not in LEFT_OUT
           and not f.name.endswith(".tmp")]
    return [*own, (chosen, f"checkpoints/{chosen.name}")], n


# `ttt`'s config composed and checked as run.py will start it (its own keys as placeholders), in a child
# process: a misspelled key or a bad value (steps=-1) is refused here, not after the notebook's install
_CHECK_TTT = ("import sys\nfrom hrm_deeploop.cli import compose\nfrom hrm_deeploop.errors import UserError\n"
              "try:\n    compose('ttt', sys.argv[1:])\nexcept UserError as e:\n    sys.exit(f'error: {e}')\n")


def check_ttt_overrides(overrides: list[str]) -> None:
    """`ttt`'s own check of the overrides (its config composed and its values checked, run.py's own keys
    filled in): a misspelled key or a value ttt refuses is refused here, not twelve hours into a notebook."""
    own = ["checkpoint=CHECKPOINT", "challenges=CHALLENGES.json", "output_dir=WORK"]
    r = subprocess.run([sys.executable, "-c", _CHECK_TTT, *overrides, *own], capture_output=True, text=True)
    if r.returncode != 0:
        line = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConfigError(f"ttt_overrides: {line.removeprefix('error: ')}")


def readme(manifest: dict) -> str:
    image = ", ".join(manifest["image_has"])
    wheels = "\n".join(f"  - `{w}`" for w in manifest["wheels"])
    py = f"Python {manifest['python']}" if manifest["python"] else "any Python 3 (every wheel is pure Python)"
    where = f"`{manifest['platform']}`" if manifest["platform"] else "the platform of the machine that built them"
    return f"""# hrm-deeploop offline bundle

For a notebook without network (the ARC Prize's Kaggle setting): `run.py` installs hrm-deeploop
{manifest['version']} from `wheels/` (`pip install --no-index`), counts the GPUs and runs
`hrm-deeploop ttt` on `checkpoint/` (one process per GPU under torchrun), then writes a complete
`submission.json`. Made by `hrm-deeploop bundle` ({manifest['code_version']}).

## Use

Upload this folder as a Kaggle dataset, attach it and the competition's data to the notebook, and run:

```bash
python /kaggle/input/THIS_DATASET/run.py                 # --help lists the options
python /kaggle/input/THIS_DATASET/run.py --minutes 600 steps=100   # options, then more ttt key=value
```

- reads `{manifest['challenges']}` (`--challenges FILE`) and writes the fallback submission (each
  test input as both attempts) to `/kaggle/working/submission.json` (`--output`) at once, then
  replaces it with ttt's attempts, the fallback kept for anything ttt did not reach;
- `--minutes {manifest['minutes']:g}`: the wall clock of the whole script, install included, counted
  from its start; ttt's `time_budget` is what is left after the install;
- ttt's work folder is `/kaggle/working/ttt` (`--work-dir`); a rerun resumes it;
- protocol `{manifest['protocol']}` (`--protocol`); ttt settings baked in:
  `{' '.join(manifest['ttt_overrides']) or '(none: ttt defaults)'}`.

## What the notebook image must have

Not bundled, assumed installed: {image}. The wheels are for {py} on {where}. A package the image
lacks is one line from `run.py` naming it; rebuild the bundle without it in `image_has`.

## Contents

- `checkpoint/`: {', '.join(f'`{f}`' for f in manifest['checkpoint']['files'])} (from `{manifest['checkpoint']['source']}`)
- `wheels/`:
{wheels}
- `run.py`, `bundle.json` (this bundle's settings), `README.md`
"""


def bundle(cfg: BundleConfig) -> tuple[Path, dict]:
    from arc_data.files.guard import checked_output_dir  # lazy: keeps `bundle --help` light
    from arc_data.files.publish import atomic_dir  # lazy: keeps `bundle --help` light
    from hrm_deeploop.checkpoint import code_version  # lazy: torch; keeps `bundle --help` light

    if not cfg.checkpoint:
        raise ConfigError("checkpoint= is required (a run folder, its checkpoints/step_N.pt, or an exported folder)")
    if not cfg.output_dir:
        raise ConfigError("output_dir= is required (the bundle folder to write)")
    files, step = checkpoint_files(cfg.checkpoint, cfg.step)
    out = Path(cfg.output_dir)
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise UserError(f"output_dir={cfg.output_dir} exists and is not an earlier bundle (no {MANIFEST} in it): "
                        "choose another folder")
    inputs = [cfg.checkpoint, *(str(f) for f, _ in files), cfg.source]
    target = checked_output_dir(cfg.output_dir, True, inputs, marker=MANIFEST, writer="bundle",
                                outputs=(MANIFEST, "README.md", "run.py", "checkpoint", "wheels"))
    if cfg.ttt_overrides:
        check_ttt_overrides(cfg.ttt_overrides)
    with atomic_dir(target) as tmp:
        wheels, scratch = tmp / "wheels", tmp / ".scratch"
        wheels.mkdir()
        scratch.mkdir()
        ours = our_wheel(cfg.source, wheels, scratch)
        pins = dependency_wheels(requirements(ours, cfg.image_has), cfg, wheels, scratch)
        shutil.rmtree(scratch)
        for src, rel in files:
            (tmp / "checkpoint" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tmp / "checkpoint" / rel)
        shutil.copy2(RUN_SCRIPT, tmp / "run.py")
        names = sorted(w.name for w in wheels.glob("*.whl"))
        native = any(not n.endswith("-none-any.whl") for n in names)
        here = f"{sys.version_info[0]}.{sys.version_info[1]}"
        manifest = {
            "format": FORMAT, "version": ours.name.split("-")[1], "code_version": code_version(),
            "python": (cfg.python_version or here) if native else None, "platform": cfg.platform,
            "image_has": sorted(cfg.image_has), "dependencies": pins, "wheels": names,
            "checkpoint": {"source": str(Path(cfg.checkpoint).resolve()), "step": step,
                           "files": [rel for _, rel in files]},
            "challenges": cfg.challenges, "minutes": cfg.minutes, "protocol": cfg.protocol,
            "ttt_overrides": list(cfg.ttt_overrides),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        (tmp / "README.md").write_text(readme(manifest))
    return target.path, manifest


def run(cfg: BundleConfig) -> int:
    out, manifest = bundle(cfg)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"bundle: wrote {out} ({len(manifest['wheels'])} wheels, checkpoint step {manifest['checkpoint']['step']}, "
          f"{size / 2**20:.1f} MiB; not bundled: {', '.join(manifest['image_has'])}); in the notebook: "
          f"python {out.name}/run.py")
    return 0
