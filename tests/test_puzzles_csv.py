"""The puzzle CSV reader: the fast numpy reader and the csv-module reader agree on every file, and
the fast one hands anything unusual to the csv module."""

import csv
import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arc_data.puzzles import csvfile

HEADER = "source,question,answer,rating"


def _both(path, parse_ratings=True):
    """(fast reader with numpy splitting, the same with the numba kernel, the csv module)."""
    fast = csvfile._read_fast(path, parse_ratings, None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(csvfile, "NUMBA_MIN_BYTES", -1)
        fast_numba = csvfile._read_fast(path, parse_ratings, None)
    assert (fast is None) == (fast_numba is None)
    assert fast is None or _same(fast, fast_numba)
    slow = csvfile._read_csv_module(path, parse_ratings, None)
    return fast, slow


def _same(a: csvfile.PuzzleCsv, b: csvfile.PuzzleCsv) -> bool:
    return (np.array_equal(a.questions, b.questions) and np.array_equal(a.answers, b.answers)
            and (a.ratings is None) == (b.ratings is None)
            and (a.ratings is None or np.array_equal(a.ratings, b.ratings)) and a.sha256 == b.sha256)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.text("abc_-. 0123", min_size=0, max_size=6), st.text("#. S12", min_size=5, max_size=5),
                               st.text("#. G34", min_size=5, max_size=5), st.integers(0, 10**12)),
                     min_size=1, max_size=40),
       crlf=st.booleans(), bom=st.booleans(), blank_lines=st.booleans(), block=st.sampled_from([16, 64, 1 << 20]))
def test_fast_reader_equals_csv_module(tmp_path_factory, rows, crlf, bom, blank_lines, block):
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    eol = "\r\n" if crlf else "\n"
    lines = [HEADER] + [f"{s},{q},{a},{r:0{(r % 3) + 1}d}" for s, q, a, r in rows]  # some leading zeros
    text = eol.join(lines) + eol + (eol if blank_lines else "")
    path.write_bytes(("\ufeff" if bom else "").encode() + text.encode())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(csvfile, "BLOCK_BYTES", block)  # many blocks: lines cut across block ends
        fast, slow = _both(path)
    assert fast is not None, "a plain file must take the fast path"
    assert _same(fast, slow)
    assert fast.questions.tobytes().decode() == "".join(q for _, q, _, _ in rows)
    assert fast.ratings.tolist() == [r for *_, r in rows]
    assert fast.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("body", [
    'with "quotes",1.2,3.4,5',  # a quoted field: the csv module
    '"a,b",1.2,3.4,5',
    "src,1.2,3.4,-5",  # int() takes a sign; the fast reader does not
    "src,1.2,3.4, 5",
    "é,1.2,3.4,5",  # non-ASCII source
])
def test_unusual_rows_go_to_the_csv_module(tmp_path, body):
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER}\nok,1.2,3.4,1\n{body}\n", encoding="utf-8")
    fast, slow = _both(path)
    assert fast is None
    got = csvfile.read_puzzle_csv(path, parse_ratings=True)
    assert _same(got, slow) and len(got) == 2
    want = list(csv.reader(path.read_text().splitlines()))[2]
    assert got.questions[1].tobytes().decode() == want[1] and got.ratings[1] == int(want[3])


def test_progress_counts_once_when_the_fast_reader_gives_up(tmp_path, monkeypatch):
    monkeypatch.setattr(csvfile, "BLOCK_BYTES", 64)
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n" + "".join(f"s,1.2,3.4,{i}\n" for i in range(30)) + '"q",1.2,3.4,9\n')
    total = []
    got = csvfile.read_puzzle_csv(path, progress=total.append)
    assert len(got) == 31 and sum(total) == 31 and any(t < 0 for t in total)


def test_errors_name_file_and_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n\ns,1.2,3.4,1\ns,1.2,3.45,1\n")
    with pytest.raises(csvfile.DatasetError, match=r"t\.csv:4: answer has 4 characters, expected 3"):
        csvfile.read_puzzle_csv(path)
    path.write_text(HEADER + "\ns,1.2,3.4,1\ns,1.2,3.4\n")
    with pytest.raises(csvfile.DatasetError, match=r"t\.csv:3: 3 fields, expected 4"):
        csvfile.read_puzzle_csv(path)
    path.write_bytes(HEADER.encode() + b"\ns,1.2,3.4,1\ns,1\xff2,3.4,1\n")
    with pytest.raises(csvfile.DatasetError, match=r"t\.csv: not UTF-8 text"):
        csvfile.read_puzzle_csv(path)
    with pytest.raises(csvfile.DatasetError, match=r"nope\.csv: missing"):
        csvfile.read_puzzle_csv(tmp_path / "nope.csv")


def test_writer_round_trip(tmp_path):
    q = np.frombuffer(b"1.2.# S G", np.uint8).reshape(1, 9).repeat(3, 0)
    a = np.frombuffer(b"1o2o# SoG", np.uint8).reshape(1, 9).repeat(3, 0)
    csvfile.write_puzzle_csv(tmp_path / "w.csv", q, a, [3, 1, 4], "gen")
    text = (tmp_path / "w.csv").read_text()
    assert text.splitlines()[:2] == [HEADER, "gen,1.2.# S G,1o2o# SoG,3"] and "\r" not in text
    got = csvfile.read_puzzle_csv(tmp_path / "w.csv", parse_ratings=True)
    assert np.array_equal(got.questions, q) and np.array_equal(got.answers, a) and got.ratings.tolist() == [3, 1, 4]
