"""The offline GPT-2 tokenizer gives GPT-2's ids (no network: the BPE ranks are vendored)."""

import pytest

from hrm_deeploop.errors import UserError
from hrm_deeploop.text.tokenizer import GPT2_EOT_ID, get_gpt2_tokenizer, get_tokenizer

# Ids from GPT-2's published encoder (tiktoken "gpt2" / Hugging Face GPT2TokenizerFast).
KNOWN = {
    "Hello world": [15496, 995],
    " the": [262],
    "Hello, world!": [15496, 11, 995, 0],
    "The quick brown fox": [464, 2068, 7586, 21831],
    "\n\n": [628],
    "<|endoftext|>": [27, 91, 437, 1659, 5239, 91, 29],  # ordinary text, not the special token
}


def test_known_ids_and_vocab():
    tok = get_gpt2_tokenizer()
    assert tok.n_vocab == 50257
    assert tok.eot_token == GPT2_EOT_ID == 50256
    assert tok.tokenizer_id == "gpt2"
    for text, ids in KNOWN.items():
        assert tok.encode(text) == ids, text
    assert tok.encode_batch(list(KNOWN), num_threads=2) == list(KNOWN.values())


def test_round_trip_and_cache():
    tok = get_gpt2_tokenizer()
    text = "Looped transformers reuse K blocks for R rounds. ünïcødé ✓ 12345"
    assert tok.decode(tok.encode(text)) == text
    assert get_gpt2_tokenizer() is tok
    assert get_tokenizer("gpt2") is tok


def test_unknown_tokenizer():
    with pytest.raises(UserError, match="unknown tokenizer"):
        get_tokenizer("llama")
