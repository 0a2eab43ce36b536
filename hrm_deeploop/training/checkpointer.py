"""The train state of one run folder, for the training loop (`training.loop`): `save(step)` writes
`checkpoints/step_N.pt` (rank 0) and each rank's side file `step_N.rank<r>.pt` (its `local_state`),
then keeps the newest `checkpoint.keep`; `load(path)` puts a checkpoint back into the task, the RNGs
and this rank's local state. The file format is `hrm_deeploop.checkpoint`'s; this class only says
what goes into a train state and in which order every rank does its part.

    ckpt = Checkpointer(run_dir, task, env, keep=cfg.checkpoint.keep, loop_state=lambda: {...})
    resumed = ckpt.load(path)      # Resumed(step, recent_losses, last_eval, wall_time_s)
    ckpt.save(step)                # collective: every rank calls it
    ckpt.last_saved()              # "the last checkpoint is .../step_N.pt", for error messages
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import runtime
from hrm_deeploop.errors import UserError


@dataclass
class Resumed:
    """What the loop itself keeps in a train state, as a checkpoint held it."""

    step: int
    recent_losses: list[float]
    last_eval: dict[str, float] | None
    wall_time_s: float


def rank_file(path: Path, rank: int) -> Path:
    """Rank `rank`'s side file of the checkpoint `path`."""
    return path.with_name(f"{path.stem}.rank{rank}.pt")


class Checkpointer:
    """Saves and loads the train states of `run_dir` for `task` (see the module docstring).

    `loop_state()` returns, at the moment of writing, the loop's own entries of a train state:
    `recent_losses`, `last_eval`, `wall_time_s`."""

    def __init__(self, run_dir: Path, task: Any, env: runtime.Env, keep: int,
                 loop_state: Callable[[], dict[str, Any]]):
        self.run_dir, self.task, self.env, self.keep, self.loop_state = run_dir, task, env, keep, loop_state
        self.saved_at: int | None = None  # the step of the newest checkpoint of this run (resumed or written)

    @property
    def last_path(self) -> Path | None:
        return ckpt.step_path(self.run_dir, self.saved_at) if self.saved_at is not None else None

    def last_saved(self) -> str:
        """Where a failed run leaves off, for its error message."""
        return f"the last checkpoint is {self.last_path}" if self.saved_at is not None else "no checkpoint was written yet"

    def load(self, path: Path) -> Resumed:
        """The task's state, the RNGs and this rank's local state from the checkpoint `path`."""
        state = ckpt.load(path, map_location="cpu")
        for key in ("step", "model"):
            if key not in state:
                raise UserError(f"checkpoint '{path}' has no '{key}' (not a train-state file of hrm-deeploop)")
        self.task.load_state_dict(state, path)
        ckpt.set_rng_state(state["rng"])
        local = state.get("local")
        if self.env.rank > 0:
            side = rank_file(path, self.env.rank)
            local = ckpt.load(side)["local"] if side.is_file() else None
        self.task.load_local_state(local)
        self.saved_at = int(state["step"])
        return Resumed(step=int(state["step"]), recent_losses=list(state.get("recent_losses", [])),
                       last_eval=state.get("last_eval"), wall_time_s=float(state.get("wall_time_s", 0.0)))

    def save(self, at: int) -> None:
        """The train state after step `at`, on every rank (collective: FSDP2 gathers the full
        tensors, and a rank that cannot write stops every rank, none waits). A full disk or a
        read-only folder: the temporary file is gone, the older checkpoints stay, and the error
        names the last checkpoint."""
        path = ckpt.step_path(self.run_dir, at)
        local = self.task.local_state()
        state = self.task.state_dict()  # on every rank: it may be collective
        side_error = None
        try:
            if self.env.rank > 0 and local is not None:
                ckpt.save(rank_file(path, self.env.rank), {"local": local})
        except UserError as e:
            side_error = str(e)
        if runtime.max_over_ranks(int(side_error is not None)):  # every rank stops, none waits (and a barrier)
            raise UserError(f"{side_error or 'another rank could not write its checkpoint file'}; {self.last_saved()}")

        def write_main() -> None:
            try:
                ckpt.save(path, {"step": at, **state, "rng": ckpt.rng_state(), "local": local, **self.loop_state(),
                                 "config": self.task.config})
            except UserError as e:
                raise UserError(f"{e}; {self.last_saved()}") from None
            if self.keep > 0:
                for _, old in ckpt.list_checkpoints(self.run_dir)[:-self.keep]:
                    old.unlink(missing_ok=True)
                    for side in old.parent.glob(f"{old.stem}.rank*.pt"):
                        side.unlink(missing_ok=True)

        runtime.on_main(write_main, self.env)  # its error reaches every rank; a collective, so also the barrier
        self.saved_at = at
