"""What `eval.every: 0` means, as each trainer's `--help` says it, agrees with what the trainer does:
`train` never evaluates at 0 (`TrainConfig.evaluates`: eval.every > 0 or eval.interval_epochs), while
train-vit and train-gpt evaluate at the end (the loop's last step). `train --help` said "0: only at the
end" for all three (new-user audit)."""

from hrm_deeploop.cli import compose, main


def _eval_every_line(capsys, name: str) -> str:
    assert main([name, "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("eval:"))
    return next(line for line in lines[at + 1:] if line.strip().startswith("every:"))


def test_train_help_says_eval_every_0_never_evaluates(capsys):
    cfg = compose("train", ["eval.every=0"])
    assert cfg.eval.every == 0 and cfg.eval.interval_epochs is None and not cfg.evaluates
    line = _eval_every_line(capsys, "train")
    assert "only at the end" not in line and "0: never" in line, line
    assert compose("train", ["eval.every=5"]).evaluates


def test_train_vit_help_still_says_at_the_end(capsys):
    assert compose("train-vit", ["eval.every=0"]).evaluates  # the loop's last step evaluates
    assert "0: only at the end" in _eval_every_line(capsys, "train-vit")
