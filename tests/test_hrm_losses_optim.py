"""HRM losses (stablemax, per-sequence normalisation, Q terms, metrics) and the optimisers
(AdamATan2 formula and CUDA kernel, SparseSignSGD duplicates, warmup schedule)."""

import math

import pytest
import torch
import torch.nn.functional as F

from hrm_deeploop.models.losses import act_loss, log_stablemax, softmax_cross_entropy, stablemax_cross_entropy
from hrm_deeploop.training.optim import AdamATan2, SparseSignSGD, lr_at


def test_stablemax_known_values():
    x = torch.tensor([[[1.0, 0.0, -1.0]]])
    s = torch.tensor([2.0, 1.0, 0.5])
    torch.testing.assert_close(log_stablemax(x.double())[0, 0], torch.log(s / s.sum()).double())
    loss = stablemax_cross_entropy(x, torch.tensor([[2]]))
    assert loss.dtype == torch.float64 and loss.item() == pytest.approx(-math.log(0.5 / 3.5))
    assert stablemax_cross_entropy(x, torch.tensor([[2]]), "float32").dtype == torch.float32
    assert stablemax_cross_entropy(x, torch.tensor([[-100]])).item() == 0.0
    sm = softmax_cross_entropy(x, torch.tensor([[0]]))
    assert sm.item() == pytest.approx(F.cross_entropy(x[0], torch.tensor([0])).item())


def test_act_loss_terms_and_metrics():
    V = 4
    logits = torch.full((3, 4, V), -1.0)
    labels = torch.tensor([[1, 2, -100, -100], [0, 0, 0, 0], [-100] * 4])
    logits[0, 0, 1] = logits[0, 1, 2] = 3.0  # row 0 all right
    logits[1, :, 1] = 3.0  # row 1 all wrong
    out = {"logits": logits, "q_halt_logits": torch.tensor([1.0, 1.0, -1.0]),
           "q_continue_logits": torch.tensor([0.0, 0.5, 0.0]), "target_q_continue": torch.tensor([0.2, 0.3, 0.4])}
    halted = torch.tensor([True, True, True])
    steps = torch.tensor([2, 3, 4])
    total, m = act_loss(out, labels, halted, steps)
    tok = stablemax_cross_entropy(logits, labels)
    lm = tok[0].sum() / 2 + tok[1].sum() / 4  # per-sequence mean, summed; row 2 has no tokens
    seq_correct = torch.tensor([1.0, 0.0, 1.0])  # an empty row counts as correct (excluded from metrics)
    qh = F.binary_cross_entropy_with_logits(out["q_halt_logits"], seq_correct, reduction="sum")
    qc = F.binary_cross_entropy_with_logits(out["q_continue_logits"], out["target_q_continue"], reduction="sum")
    assert total.item() == pytest.approx((lm + 0.5 * (qh + qc)).item())
    assert m["count"].item() == 2  # row 2 excluded (no supervised tokens)
    assert m["exact_accuracy"].item() == 1 and m["accuracy"].item() == pytest.approx(1.0)
    assert m["q_halt_accuracy"].item() == 1  # row 0: q>=0 and correct; row 1: q>=0 but wrong
    assert m["steps"].item() == 5
    # only sequences halted at this call count
    _, m2 = act_loss(out, labels, torch.tensor([False, True, True]), steps)
    assert m2["count"].item() == 1 and m2["exact_accuracy"].item() == 0


def test_adam_atan2_matches_formula():
    torch.manual_seed(0)
    p0 = torch.randn(5, 3)
    grads = [torch.randn(5, 3) for _ in range(3)]
    p = torch.nn.Parameter(p0.clone())
    opt = AdamATan2([p], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    ref, m, v = p0.clone().double(), torch.zeros(5, 3).double(), torch.zeros(5, 3).double()
    for t, g in enumerate(grads, start=1):
        p.grad = g.clone()
        opt.step()
        g = g.double()
        ref = ref * (1 - 1e-2 * 0.1)
        m = 0.9 * m + 0.1 * g
        v = 0.95 * v + 0.05 * g * g
        ref = ref - 1e-2 / (1 - 0.9**t) * torch.atan2(m, v.sqrt() / math.sqrt(1 - 0.95**t))
    torch.testing.assert_close(p.data.double(), ref, atol=1e-6, rtol=1e-6)



def _compiled_matches_eager(device: str) -> None:
    """AdamATan2(compiled=True) follows the eager rule over several tensors and changing lr (the
    scalars travel as a tensor: no recompilation per step), state steps counted alike."""
    torch.manual_seed(0)
    shapes = [(6, 5), (7,), (4, 4)]
    p0 = [torch.randn(s, device=device) for s in shapes]
    a = [torch.nn.Parameter(x.clone()) for x in p0]
    b = [torch.nn.Parameter(x.clone()) for x in p0]
    oa = AdamATan2(a, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    ob = AdamATan2(b, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, compiled=True)
    for step in range(4):
        for x, y in zip(a, b):
            g = torch.randn_like(x)
            x.grad, y.grad = g.clone(), g.clone()
        for o in (oa, ob):
            o.param_groups[0]["lr"] = 1e-2 * (step + 1)
        oa.step()
        ob.step()
    for x, y, x0 in zip(a, b, p0):
        assert not torch.equal(y.data, x0)  # it moved
        torch.testing.assert_close(y.data, x.data, atol=1e-6, rtol=1e-5)
    assert [float(ob.state[y]["step"]) for y in b] == [4.0] * 3


@pytest.mark.slow  # compiles the update on the CPU (about 20 s)
def test_adam_atan2_compiled_matches_eager_cpu():
    _compiled_matches_eager("cpu")


@pytest.mark.gpu
def test_adam_atan2_compiled_matches_eager_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    _compiled_matches_eager("cuda")

@pytest.mark.gpu
def test_adam_atan2_matches_cuda_kernel():
    adam_atan2 = pytest.importorskip("adam_atan2")
    torch.manual_seed(0)
    p0 = torch.randn(64, 32, device="cuda")
    a, b = torch.nn.Parameter(p0.clone()), torch.nn.Parameter(p0.clone())
    oa = AdamATan2([a], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    ob = adam_atan2.AdamATan2([b], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    for _ in range(5):
        g = torch.randn(64, 32, device="cuda")
        a.grad, b.grad = g.clone(), g.clone()
        oa.step()
        ob.step()
    torch.testing.assert_close(a.data, b.data, atol=1e-6, rtol=1e-5)


def test_sparse_sign_sgd_sums_duplicates_before_sign():
    table = torch.ones(5, 2)
    opt = SparseSignSGD(table, lr=0.1, weight_decay=0.5)
    ids = torch.tensor([1, 1, 3])
    grads = torch.tensor([[1.0, -1.0], [-3.0, 0.5], [0.0, 2.0]])
    opt.step(ids, grads)
    # id 1: summed grad (-2, -0.5) -> sign (-1, -1); id 3: (0, 2) -> sign (0, 1); decay only on those rows
    expected = torch.ones(5, 2)
    expected[1] = 1 * (1 - 0.05) + 0.1
    expected[3] = torch.tensor([0.95, 0.95 - 0.1])
    torch.testing.assert_close(table, expected)


def test_lr_schedule():
    assert lr_at(1, 1e-4, 2000, 10000, 1.0) == pytest.approx(1e-4 / 2000)
    assert lr_at(1000, 1e-4, 2000, 10000, 1.0) == pytest.approx(0.5e-4)
    assert lr_at(2000, 1e-4, 2000, 10000, 1.0) == pytest.approx(1e-4)
    assert lr_at(9000, 1e-4, 2000, 10000, 1.0) == pytest.approx(1e-4)  # min_ratio 1: constant
    assert lr_at(10000, 1e-4, 2000, 10000, 0.1) == pytest.approx(1e-5)
