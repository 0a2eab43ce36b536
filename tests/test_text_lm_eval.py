"""The lm-evaluation-harness adapter: exact log-likelihoods, and a whole run on a local task offline."""

import json
import os

import pytest

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # before `datasets` is imported
os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("lm_eval")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402

from hrm_deeploop.text.lm_eval import LoopedLM, run_lm_eval  # noqa: E402
from hrm_deeploop.text.tokenizer import get_gpt2_tokenizer  # noqa: E402
from tests.lm_eval_helpers import write_tiny_mc_task

V = 50257


class TinyCausalLM(torch.nn.Module):
    """Logits from the running mean of token embeddings: causal, and every past token matters."""

    def __init__(self, vocab: int = V, dim: int = 8) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens_BT: torch.Tensor) -> torch.Tensor:
        T = tokens_BT.shape[1]
        h_BTD = self.emb(tokens_BT).cumsum(1) / torch.arange(1, T + 1)[:, None]
        return self.head(h_BTD)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TinyCausalLM()


def direct_loglik(model, ctx_tokens, cont_tokens, max_length):
    seq = (ctx_tokens + cont_tokens)[-(max_length + 1) :]
    with torch.no_grad():
        lp = F.log_softmax(model(torch.tensor([seq[:-1]])).float(), dim=-1)[0]
    n, c = len(seq) - 1, len(cont_tokens)
    targets = torch.tensor(seq[1:])
    scored = lp[n - c : n].gather(1, targets[n - c :, None]).squeeze(1)
    greedy = bool((lp[n - c : n].argmax(-1) == targets[n - c :]).all())
    return float(scored.sum()), greedy


def test_loglikelihood_matches_direct_computation(model):
    tok = get_gpt2_tokenizer()
    pairs = [
        ("Question: what colour is the sky?\nAnswer:", " blue"),
        ("The cat sat on the", " mat and purred loudly"),
        ("Short", " one"),
        ("", "Empty context uses end-of-text"),
        ("A fairly long context that will be truncated from the left " * 3, " by max_length"),
    ]
    requests = [Instance("loglikelihood", doc={}, arguments=p, idx=i) for i, p in enumerate(pairs)]
    for max_length in (16, 1024):
        for batch_size in (1, 3):
            lm = LoopedLM(model, max_length=max_length, batch_size=batch_size, device="cpu")
            got = lm.loglikelihood(requests, disable_tqdm=True)
            for (ctx, cont), (lp, greedy) in zip(pairs, got):
                if ctx:
                    # lm-eval moves the context's trailing spaces into the continuation.
                    n_sp = len(ctx) - len(ctx.rstrip())
                    ctx, cont = ctx[: len(ctx) - n_sp], ctx[len(ctx) - n_sp :] + cont
                    whole, ctx_ids = tok.encode(ctx + cont), tok.encode(ctx)
                    ctx_ids, cont_ids = whole[: len(ctx_ids)], whole[len(ctx_ids) :]
                else:
                    ctx_ids, cont_ids = [tok.eot_token], tok.encode(cont)
                ref_lp, ref_greedy = direct_loglik(model, ctx_ids, cont_ids, max_length)
                assert lp == pytest.approx(ref_lp, rel=1e-5, abs=1e-4), (ctx, cont, max_length, batch_size)
                assert greedy == ref_greedy


def test_is_greedy(model):
    lm = LoopedLM(model, max_length=64, batch_size=2, device="cpu")
    ctx = get_gpt2_tokenizer().encode("Once upon a time")
    cont = []
    with torch.no_grad():
        for _ in range(3):  # greedy continuation, token by token
            cont.append(int(model(torch.tensor([ctx + cont]))[0, -1].argmax()))
    wrong = cont[:-1] + [(cont[-1] + 1) % V]
    (lp_g, greedy_g), (lp_w, greedy_w) = lm._loglikelihood_tokens([(None, ctx, cont), (None, ctx, wrong)])
    assert greedy_g and not greedy_w and lp_g > lp_w


def test_loglikelihood_rolling(model):
    tok = get_gpt2_tokenizer()
    text = "Perplexity of a whole document, every token predicted once."
    ids = tok.encode(text)
    lm = LoopedLM(model, max_length=1024, batch_size=4, device="cpu")
    (total,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", doc={}, arguments=(text,), idx=0)])
    ref, _ = direct_loglik(model, [tok.eot_token], ids, 1024)
    assert total == pytest.approx(ref, rel=1e-5)
    # Short windows: still one score per token, summed over windows.
    lm_short = LoopedLM(model, max_length=4, batch_size=4, device="cpu")
    (short,) = lm_short.loglikelihood_rolling([Instance("loglikelihood_rolling", doc={}, arguments=(text,), idx=0)])
    assert short < 0 and short != pytest.approx(total)


def _greedy(model, ids, n):
    """The greedy continuation by hand: the whole sequence again for every token."""
    out = []
    with torch.no_grad():
        for _ in range(n):
            out.append(int(model(torch.tensor([ids + out]))[0, -1, :V].argmax()))
    return out


def test_generate_until_stops_at_until_and_max_gen_toks(model):
    tok = get_gpt2_tokenizer()
    context = "Once upon a time"
    text = tok.decode(_greedy(model, tok.encode(context), 12))
    lm = LoopedLM(model, max_length=64, device="cpu")

    def gen(**kw):
        return lm.generate_until([Instance("generate_until", doc={}, arguments=(context, kw), idx=0)],
                                 disable_tqdm=True)[0]

    assert gen(until=[], max_gen_toks=12) == text
    assert gen(until=[], max_gen_toks=3) == tok.decode(_greedy(model, tok.encode(context), 3))
    stop = text[len(text) // 2:len(text) // 2 + 2]  # a string the continuation contains
    assert gen(until=["@@never@@", stop], max_gen_toks=12) == text[:text.find(stop)]
    a, b = (gen(until=[], max_gen_toks=8, do_sample=True, temperature=1.0) for _ in range(2))
    assert a != b or a != text[:len(a)]  # sampled requests draw from the adapter's generator


def test_generate_until_on_a_local_generative_task_with_the_looped_gpt(tmp_path):
    """A tiny looped GPT (byte-level) through lm-eval on a local generate_until task: the answers
    are its greedy continuations (KV cache) for the first question and a wrong one for the second,
    so exact_match is 1/2 exactly when generation, stop string and scoring all agree."""
    from hrm_deeploop.models.gpt import GPT
    from hrm_deeploop.models.model_config import GPTConfig
    from hrm_deeploop.models.scaling import ScalingConfig
    from hrm_deeploop.text.tokenizer import get_bytes_tokenizer
    from tests.lm_eval_helpers import write_tiny_gen_task

    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=320, hidden_size=32, num_heads=2, num_blocks=2, num_rounds=2, mlp_multiple=16,
                        seq_len=64), ScalingConfig(scheme="baseline")).eval()
    tok = get_bytes_tokenizer()
    questions = ["Q: 2+2=", "Q: 3+3="]
    lm = LoopedLM(gpt, tokenizer=tok, max_length=64, device="cpu")
    got = lm.generate_until([Instance("generate_until", doc={}, arguments=(q, {"until": ["\n"], "max_gen_toks": 6}),
                                      idx=i) for i, q in enumerate(questions)], disable_tqdm=True)
    for q, g in zip(questions, got):  # the cached decoding = greedy by hand, cut at the first newline
        ids = [t for t in _greedy_bytes(gpt, tok.encode(q), 6)]
        assert g == tok.decode(ids).split("\n")[0]
    rows = [{"question": questions[0], "answer": got[0]}, {"question": questions[1], "answer": got[1] + "x"}]
    tasks = write_tiny_gen_task(tmp_path, rows, until=["\n"], max_gen_toks=6)
    table = run_lm_eval(gpt, tasks=["tiny_gen"], num_fewshot=0, batch_size=2, include_path=tasks,
                        include_defaults=False, device="cpu", tokenizer=tok, max_length=64)
    assert table.acc[0]["tiny_gen"] == pytest.approx(0.5)


def _greedy_bytes(model, ids, n):
    out = []
    with torch.no_grad():
        for _ in range(n):
            out.append(int(model(torch.tensor([ids + out]))[0, -1, :257].argmax()))
            if out[-1] == 256:
                return out[:-1]
    return out


def test_run_lm_eval_on_a_local_task(model, tmp_path):
    rows = [
        {"question": "What colour is the sky?", "choices": [" blue", " green", " red"], "label": 0},
        {"question": "How many legs has a cat?", "choices": [" two", " four", " six"], "label": 1},
        {"question": "What is two plus two?", "choices": [" three", " five", " four"], "label": 2},
        {"question": "Which one is an animal?", "choices": [" rock", " dog"], "label": 1},
        {"question": "Which is a fruit?", "choices": [" apple", " chair"], "label": 0},
    ]
    tasks = write_tiny_mc_task(tmp_path, rows)
    out = tmp_path / "results"
    model.train()
    table = run_lm_eval(model, tasks=["tiny_mc"], num_fewshot=(0, 1), limit=None, batch_size=4,
                        output_path=out, include_path=tasks, include_defaults=False, device="cpu")
    assert model.training  # mode restored
    assert sorted(table.acc) == [0, 1]
    for shot in (0, 1):
        acc = table.acc[shot]["tiny_mc"]
        assert 0.0 <= acc <= 1.0 and acc * len(rows) == pytest.approx(round(acc * len(rows)))
        assert table.average(shot) == acc
    md = (out / "lm_eval.md").read_text()
    assert "tiny_mc" in md and "Avg" in md and "0-shot" in md and "1-shot" in md
    csv_lines = (out / "lm_eval.csv").read_text().splitlines()
    assert csv_lines[0] == "shot,tiny_mc,Avg" and len(csv_lines) == 3
    assert json.loads((out / "lm_eval_results.json").read_text())["0"]["results"]["tiny_mc"]


@pytest.mark.slow
def test_paper_tasks_are_known_to_lm_eval():
    """The 8 task names exist in the installed lm-eval (indexing its tasks takes ~15 s)."""
    from lm_eval.tasks import TaskManager

    from hrm_deeploop.text.lm_eval import PAPER_TASKS

    known = TaskManager().all_tasks
    assert [t for t in PAPER_TASKS if t not in known] == []
