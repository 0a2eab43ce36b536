"""The families by name, and how one task of a family is drawn and checked.

A task is drawn from its own `np.random.Generator(PCG64([seed, crc32(family name), index]))`, so
it depends only on (seed, family, index, difficulty, demonstration and test counts): adding a
family or asking for more tasks never changes the tasks already drawn.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from arc_data.generators import fills, geometry, objects
from arc_data.generators.base import DIFFICULTIES, MAX_SIDE, Family, GenerationError, Grid, Params, fits

FAMILIES: dict[str, Family] = {f.name: f for f in (*geometry.FAMILIES, *objects.FAMILIES, *fills.FAMILIES)}

PARAM_TRIES = 20  # rule instances tried before a family is declared stuck
PAIR_TRIES = 40  # input draws per wanted pair, per rule instance


@dataclass
class GeneratedTask:
    name: str
    family: str
    params: Params
    train: list[tuple[Grid, Grid]]
    test: list[tuple[Grid, Grid]]


def family_named(name: str) -> Family:
    if name not in FAMILIES:
        raise GenerationError(f"family {name!r}: unknown (known: {', '.join(FAMILIES)})")
    return FAMILIES[name]


def task_rng(seed: int, family: str, index: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([seed, zlib.crc32(family.encode()), index]))


def make_task(family: Family, name: str, rng: np.random.Generator, difficulty: int, num_demos: int,
              num_tests: int, max_side: int = MAX_SIDE) -> GeneratedTask:
    """Draw a rule instance and `num_demos + num_tests` distinct pairs for it; checked by `check_task`.
    A pair with a grid side over `max_side` is drawn again (30, the format's limit: no pair is)."""
    if difficulty not in DIFFICULTIES:
        raise GenerationError(f"difficulty={difficulty}: must be one of {DIFFICULTIES}")
    want = num_demos + num_tests
    for _ in range(PARAM_TRIES):
        params = family.params(rng, difficulty)
        pairs: list[tuple[Grid, Grid]] = []
        seen: set[bytes] = set()
        for _ in range(PAIR_TRIES * want):
            inp = family.sample(rng, params, difficulty)
            if inp is None or not fits(inp) or max(inp.shape) > max_side:
                continue
            key = inp.tobytes() + bytes(inp.shape)
            if key in seen:
                continue
            out = family.rule(params, inp)
            if (out is None or not fits(out) or max(out.shape) > max_side
                    or (out.shape == inp.shape and (out == inp).all())):
                continue
            seen.add(key)
            pairs.append((np.ascontiguousarray(inp), np.ascontiguousarray(out)))
            if len(pairs) == want:
                task = GeneratedTask(name, family.name, params, pairs[:num_demos], pairs[num_demos:])
                check_task(task)
                return task
    raise GenerationError(f"family {family.name}: no valid task in {PARAM_TRIES} rule instances "
                          f"(difficulty={difficulty}, {want} pairs, sides <= {max_side}); lower max_demos (and min_demos) "
                          "or num_tests, change difficulty or raise max_side")


def check_task(task: GeneratedTask) -> None:
    """Every pair re-derived from the rule, sizes 1..30, values 0..9, no pair whose output is its
    input, no input twice; a failure is a bug in the family (GenerationError naming it)."""
    family = family_named(task.family)

    def bad(why: str) -> GenerationError:
        return GenerationError(f"family {task.family}: task {task.name}: {why}")

    pairs = task.train + task.test
    if not task.train or not task.test:
        raise bad("needs at least one demonstration and one test pair")
    keys = set()
    for i, (inp, out) in enumerate(pairs):
        if not fits(inp) or not fits(out):
            raise bad(f"pair {i}: a grid outside 1..30 x 1..30 or 0..9")
        again = family.rule(task.params, inp)
        if again is None or again.shape != out.shape or (again != out).any():
            raise bad(f"pair {i}: the output is not the rule's output for its input")
        if out.shape == inp.shape and (out == inp).all():
            raise bad(f"pair {i}: output == input")
        keys.add(inp.tobytes() + bytes(inp.shape))
    if len(keys) != len(pairs):
        raise bad("the same input twice")
