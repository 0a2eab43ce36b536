"""Tiny lm-eval tasks on local JSONL (offline), multiple choice and generative, shared by the lm-eval tests."""

import json
from pathlib import Path

# the local-JSONL dataset both tasks read (train = test split, an HF cache inside the test folder)
LOCAL_DATASET = """dataset_path: json
dataset_kwargs:
  data_files:
    train: {data}
    test: {data}
  cache_dir: {cache}
training_split: train
test_split: test
"""

TASK_YAML = """task: tiny_mc
""" + LOCAL_DATASET + """output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{label}}}}"
doc_to_choice: "{{{{choices}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def write_tiny_mc_task(tmp_path: Path, rows: list[dict]) -> Path:
    """Write rows as JSONL plus a `tiny_mc` task YAML; return the folder to pass as include_path."""
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "tiny_mc.yaml").write_text(TASK_YAML.format(data=data, cache=tmp_path / "hf_cache"))
    return tasks


GEN_TASK_YAML = """task: tiny_gen
""" + LOCAL_DATASET + """output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: {until}
  max_gen_toks: {max_gen_toks}
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""


def write_tiny_gen_task(tmp_path: Path, rows: list[dict], until: list[str], max_gen_toks: int) -> Path:
    """Rows ({question, answer}) as JSONL plus a generative `tiny_gen` task (exact match of the greedy
    continuation up to the first `until` string); return the folder to pass as include_path."""
    data = tmp_path / "tiny_gen.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = tmp_path / "gen_tasks"
    tasks.mkdir()
    (tasks / "tiny_gen.yaml").write_text(GEN_TASK_YAML.format(data=data, cache=tmp_path / "hf_cache",
                                                              until=json.dumps(until), max_gen_toks=max_gen_toks))
    return tasks
