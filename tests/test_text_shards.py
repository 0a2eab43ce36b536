"""Token shards: .bin round trip, header errors, TokenShards (ranks, determinism, resume), eval."""

import numpy as np
import pytest
import torch

from hrm_deeploop.errors import UserError
from hrm_deeploop.text.loader import TokenShards, iter_eval_batches
from hrm_deeploop.text.shards import HEADER_BYTES, open_shard, read_shard_header, write_meta, write_shard


def make_shards(folder, sizes, seed=0, tokenizer_id="gpt2"):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(sizes):
        write_shard(folder / f"train_{i:06d}.bin", rng.integers(0, 50257, size=n))
    if tokenizer_id is not None:
        write_meta(folder, tokenizer_id)
    return folder


def test_round_trip(tmp_path):
    tokens = np.array([50256, 0, 1, 65535, 15496, 995], dtype=np.int64)
    path = tmp_path / "a.bin"
    assert write_shard(path, tokens) == 6
    assert path.stat().st_size == HEADER_BYTES + 2 * 6
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[:3].tolist() == [20240520, 1, 6] and not header[3:].any()
    assert read_shard_header(path) == 6
    np.testing.assert_array_equal(open_shard(path), tokens)
    assert not list(tmp_path.glob(".*tmp*"))  # atomic write leaves no temp file


def test_write_rejects_out_of_range(tmp_path):
    with pytest.raises(UserError, match=r"\[0, 65535\]"):
        write_shard(tmp_path / "a.bin", [1, 70000])
    assert not (tmp_path / "a.bin").exists()


def _corrupt(path, word=None, value=None, truncate=None, append=b""):
    data = bytearray(path.read_bytes())
    if word is not None:
        data[4 * word : 4 * word + 4] = np.int32(value).tobytes()
    if truncate is not None:
        data = data[:truncate]
    path.write_bytes(bytes(data) + append)


@pytest.mark.parametrize(
    "kind, match",
    [
        ("magic", "wrong magic"),
        ("version", "unsupported version"),
        ("truncated", "truncated"),
        ("short_header", "truncated header"),
        ("empty_file", "empty"),
        ("zero_tokens", "empty shard"),
        ("trailing", "trailing bytes"),
        ("missing", "cannot read"),
    ],
)
def test_header_errors(tmp_path, kind, match):
    path = tmp_path / "bad.bin"
    write_shard(path, np.arange(100))
    if kind == "magic":
        _corrupt(path, word=0, value=12345)
    elif kind == "version":
        _corrupt(path, word=1, value=7)
    elif kind == "truncated":
        _corrupt(path, truncate=HEADER_BYTES + 150)
    elif kind == "short_header":
        _corrupt(path, truncate=100)
    elif kind == "empty_file":
        path.write_bytes(b"")
    elif kind == "zero_tokens":
        write_shard(path, np.zeros(0, dtype=np.uint16))
    elif kind == "trailing":
        _corrupt(path, append=b"\0\0")
    elif kind == "missing":
        path.unlink()
    with pytest.raises(UserError, match=match) as err:
        open_shard(path)
    assert str(path) in str(err.value)  # the message names the file


def test_batches_are_shifted_pairs(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    write_shard(folder / "train_000000.bin", np.arange(1000))
    write_meta(folder, "gpt2")
    loader = TokenShards(str(folder / "train_*.bin"), seq_len=16, batch_size=4, seed=0)
    x, y = loader.next_batch()
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1)  # tokens are 0..999, so y is x shifted by one


def test_ranks_disjoint_and_deterministic(tmp_path):
    # Shard tokens are unique positions so a window is identified by its first two tokens.
    folder = tmp_path / "d"
    folder.mkdir()
    write_shard(folder / "train_000000.bin", np.arange(0, 3000))
    write_shard(folder / "train_001.bin", np.arange(10000, 12000))
    write_meta(folder, "gpt2")
    world, bs, T = 3, 4, 32
    loaders = [TokenShards(folder, T, bs, rank=r, world_size=world, seed=5) for r in range(world)]
    starts = [[] for _ in range(world)]
    steps = 10  # one epoch holds (2999 - off)//32 + (1999 - off')//32 >= 150 windows > 10 * 12
    for _ in range(steps):
        for r, loader in enumerate(loaders):
            x, y = loader.next_batch()
            assert torch.equal(x[:, 1:], y[:, :-1])
            starts[r] += x[:, 0].tolist()
    flat = [s for r in starts for s in r]
    assert len(flat) == len(set(flat)) == steps * bs * world  # no window seen twice, by any rank
    # Input positions never overlap either: windows are T apart.
    all_pos = sorted(flat)
    same_shard_gaps = [b - a for a, b in zip(all_pos, all_pos[1:]) if (a < 10000) == (b < 10000)]
    assert min(same_shard_gaps) >= T
    # Same seed -> same batches; another seed -> different.
    again = TokenShards(folder, T, bs, rank=1, world_size=world, seed=5)
    assert [again.next_batch()[0][:, 0].tolist() for _ in range(steps)] == [
        starts[1][i * bs : (i + 1) * bs] for i in range(steps)
    ]
    other = TokenShards(folder, T, bs, rank=1, world_size=world, seed=6)
    assert [other.next_batch()[0][:, 0].tolist() for _ in range(steps)] != [
        starts[1][i * bs : (i + 1) * bs] for i in range(steps)
    ]


def test_exact_resume_across_epochs(tmp_path):
    folder = make_shards(tmp_path / "d", [700, 450, 300], seed=1)
    ref = TokenShards(folder, seq_len=20, batch_size=3, rank=1, world_size=2, seed=3)
    batches = [ref.next_batch() for _ in range(60)]  # ~70 windows per epoch: several epochs
    assert ref.epoch >= 2
    fresh = TokenShards(folder, seq_len=20, batch_size=3, rank=1, world_size=2, seed=3)
    for _ in range(17):
        fresh.next_batch()
    state = fresh.state_dict()
    resumed = TokenShards(folder, seq_len=20, batch_size=3, rank=1, world_size=2, seed=3)
    resumed.load_state_dict(state)
    for x_ref, y_ref in batches[17:]:
        x, y = resumed.next_batch()
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref)
    # A different data setup refuses the state.
    other = TokenShards(folder, seq_len=10, batch_size=3, rank=1, world_size=2, seed=3)
    with pytest.raises(UserError, match="seq_len"):
        other.load_state_dict(state)


def test_context_longer_than_shard(tmp_path):
    folder = make_shards(tmp_path / "d", [500, 64])
    with pytest.raises(UserError, match="context longer than a shard.*train_000001.bin"):
        TokenShards(folder, seq_len=64, batch_size=2)
    with pytest.raises(UserError, match="context longer than a shard"):
        next(iter_eval_batches(folder, seq_len=64, batch_size=2))


def test_no_match_and_tokenizer_mismatch(tmp_path):
    with pytest.raises(UserError, match="no token shard matches"):
        TokenShards(str(tmp_path / "nothing_*.bin"), seq_len=8, batch_size=2)
    folder = make_shards(tmp_path / "d", [500])
    meta = (folder / "meta.json").read_text().replace('"tokenizer_id": "gpt2"', '"tokenizer_id": "llama3"')
    (folder / "meta.json").write_text(meta)
    with pytest.raises(UserError, match="tokenizer mismatch.*'llama3'.*'gpt2'"):
        TokenShards(folder, seq_len=8, batch_size=2, tokenizer_id="gpt2")
    with pytest.raises(UserError, match="vocabulary size 50257.*32000"):
        TokenShards(folder, seq_len=8, batch_size=2, tokenizer_id="llama3", vocab_size=32000)
    nometa = make_shards(tmp_path / "e", [500], tokenizer_id=None)
    with pytest.raises(UserError, match="meta.json is missing"):
        TokenShards(nometa, seq_len=8, batch_size=2)
    TokenShards(nometa, seq_len=8, batch_size=2, tokenizer_id=None)  # explicit opt-out


def test_eval_batches_sequential_and_rank_split(tmp_path):
    folder = tmp_path / "v"
    folder.mkdir()
    write_shard(folder / "val_000000.bin", np.arange(1000))
    write_meta(folder, "gpt2")
    full = list(iter_eval_batches(folder, seq_len=10, batch_size=4))
    assert len(full) == (999 // 10) // 4  # 99 windows, whole batches of 4
    assert full[0][0][:, 0].tolist() == [0, 10, 20, 30]
    assert torch.equal(full[0][1], full[0][0] + 1)
    assert [b[0].tolist() for b in iter_eval_batches(folder, 10, 4)] == [b[0].tolist() for b in full]
    r0 = list(iter_eval_batches(folder, 10, 2, rank=0, world_size=2))
    r1 = list(iter_eval_batches(folder, 10, 2, rank=1, world_size=2))
    assert len(r0) == len(r1) == len(full)
    assert torch.equal(torch.cat([r0[0][0], r1[0][0]]), full[0][0])
    assert len(list(iter_eval_batches(folder, 10, 4, max_batches=3))) == 3


def test_token_ids_outside_the_model_vocabulary_are_refused_naming_the_shard(tmp_path):
    """tokenizer_id=null skips the meta.json check; the ids themselves are still checked."""
    folder = tmp_path / "s"
    folder.mkdir()
    write_shard(folder / "train_000000.bin", np.arange(400) % 100)
    write_shard(folder / "val_000000.bin", np.full(200, 150))
    loader = TokenShards(folder / "train_000000.bin", seq_len=8, batch_size=2, tokenizer_id=None, vocab_size=64)
    with pytest.raises(UserError, match=r"train_000000.bin at token \d+: token id (6[4-9]|[7-9]\d) is outside the model.s vocabulary"):
        for _ in range(30):
            loader.next_batch()
    with pytest.raises(UserError, match="val_000000.bin at token 0: token id 150"):
        next(iter_eval_batches(folder / "val_000000.bin", 8, 2, tokenizer_id=None, vocab_size=100))
    ok = TokenShards(folder / "train_000000.bin", seq_len=8, batch_size=2, tokenizer_id=None, vocab_size=100)
    ok.next_batch()
