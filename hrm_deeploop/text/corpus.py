"""The bundled synthetic corpus: deterministic templated documents for CPU demos and tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from hrm_deeploop.errors import UserError
from hrm_deeploop.text.shards import PathLike

_SYLLABLES = ["ka", "lo", "mi", "ren", "ta", "vo", "zu", "pel", "dor", "sin", "ba", "qui", "nor", "el", "fa"]
_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                 "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                 "eighteen", "nineteen", "twenty"]
_COLORS = ["red", "blue", "green", "yellow", "white", "black", "purple", "orange"]
_ANIMALS = ["fox", "owl", "cat", "horse", "frog", "bear", "crow", "goat"]
_ARTICLE = {a: ("an" if a[0] in "aeiou" else "a") for a in _ANIMALS}
_FOODS = ["apples", "bread", "fish", "rice", "honey", "cheese", "plums", "beans"]


def write_demo_corpus(path: PathLike, num_docs: int = 2000, seed: int = 0) -> Path:
    """Write a synthetic, deterministic JSONL corpus (`{"text": ...}` per line) for CPU demos.

    A small invented world, fixed by `seed`: 24 made-up towns, each with a colour, an animal, a
    food and a neighbour. Documents mix templated facts about the towns (the same facts recur, so
    a tiny model can memorise them), additions with answers, and counting runs. Nothing is
    downloaded; no third-party text. `num_docs=2000` gives about 450 KB / 100K GPT-2 tokens.
    """
    if num_docs < 1:
        raise UserError(f"write_demo_corpus: num_docs must be >= 1, got {num_docs}")
    rng = np.random.default_rng(seed)
    towns: list[str] = []
    while len(towns) < 24:
        name = "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 4)))).capitalize()
        if name not in towns:
            towns.append(name)
    facts = {
        t: {
            "color": str(rng.choice(_COLORS)),
            "animal": str(rng.choice(_ANIMALS)),
            "food": str(rng.choice(_FOODS)),
            "near": towns[(i + 1 + int(rng.integers(0, len(towns) - 1))) % len(towns)],
        }
        for i, t in enumerate(towns)
    }

    def town_sentence(t: str) -> str:
        f = facts[t]
        return str(rng.choice([
            f"The flag of {t} is {f['color']}.",
            f"In {t} the people keep {_ARTICLE[f['animal']]} {f['animal']}.",
            f"The people of {t} like to eat {f['food']}.",
            f"{t} is next to {f['near']}.",
            f"The town of {t} has a {f['color']} flag and {_ARTICLE[f['animal']]} {f['animal']}.",
        ]))

    def sum_sentence() -> str:
        a, b = (int(v) for v in rng.integers(0, 11, size=2))
        return str(rng.choice([
            f"{a} plus {b} is {a + b}.",
            f"{_NUMBER_WORDS[a]} plus {_NUMBER_WORDS[b]} is {_NUMBER_WORDS[a + b]}.",
        ]))

    def count_sentence() -> str:
        start = int(rng.integers(0, 12))
        n = int(rng.integers(3, 9))
        return "Counting: " + ", ".join(_NUMBER_WORDS[start : start + n]) + "."

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for _ in range(num_docs):
        kind = int(rng.integers(0, 3))
        n_sent = int(rng.integers(3, 8))
        if kind == 0:
            t = str(rng.choice(towns))
            sents = [f"A note about {t}."] + [town_sentence(t) for _ in range(n_sent)]
        elif kind == 1:
            sents = ["Some sums."] + [sum_sentence() for _ in range(n_sent)]
        else:
            sents = [count_sentence() if rng.random() < 0.5 else town_sentence(str(rng.choice(towns)))
                     for _ in range(n_sent)]
        lines.append(json.dumps({"text": " ".join(sents)}))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path
