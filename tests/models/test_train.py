"""The training command: a few steps of the tiny size, checkpoints, a resumed run equal to an unbroken one."""

import json

import pytest
import torch

from hwopt.models import checkpoint, corpus, tokenizer, train


@pytest.fixture(scope="module")
def stream():
    """A small train stream (the shipped validation text: the test needs tokens, not the train split)."""
    tok = tokenizer.load(train.TOKENIZER)
    return tokenizer.encode_documents(tok, corpus.read_validation(train.VALIDATION)[:3])


def tiny(steps: int) -> train.TrainConfig:
    # warm-up over all steps: the learning rate of a step does not depend on the run's length
    return train.TrainConfig(size="tiny", steps=steps, batch_size=2, seq_len=32, warmup_steps=4, eval_every=2,
                             eval_windows=2, checkpoint_every=2)


def test_a_resumed_run_equals_an_unbroken_one(tmp_path, stream):
    whole = train.train(tiny(4), tmp_path / "whole", progress=False, train_stream=stream)
    train.train(tiny(2), tmp_path / "broken", progress=False, train_stream=stream)
    resumed = train.train(tiny(4), tmp_path / "broken", resume=True, progress=False, train_stream=stream)
    assert resumed["losses"] == whole["losses"] and resumed["tokens_seen"] == 4 * 2 * 32
    a = checkpoint.read_weights(tmp_path / "whole" / "weights")
    b = checkpoint.read_weights(tmp_path / "broken" / "weights")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert whole["losses"][-1] < whole["losses"][0]


def test_resuming_another_configuration_is_refused(tmp_path, stream):
    train.train(tiny(2), tmp_path, progress=False, train_stream=stream)
    other = train.TrainConfig(size="tiny", steps=2, batch_size=3, seq_len=32, warmup_steps=4, eval_every=2)
    with pytest.raises(ValueError, match="another configuration"):
        train.train(other, tmp_path, resume=True, progress=False, train_stream=stream)


def test_the_command_resumes_a_checkpoint_and_trains_on_the_standard_library(tmp_path, stream):
    config = train.TrainConfig(size="tiny", steps=2, batch_size=2, seq_len=32, warmup_steps=3, eval_every=1,
                               checkpoint_every=1, threads=1)
    train.train(config, tmp_path, progress=False, train_stream=stream)  # the checkpoint of a broken run
    argv = ["--size", "tiny", "--steps", "3", "--batch-size", "2", "--seq-len", "32", "--warmup-steps", "3",
            "--eval-every", "1", "--checkpoint-every", "1", "--threads", "1", "--out", str(tmp_path)]
    log = train.main([*argv, "--resume"])
    assert log["steps_done"] == 3 and len(log["losses"]) == 3 and len(log["validation"]) == 3
    assert json.loads((tmp_path / "log.json").read_text())["tokens_seen"] == 3 * 2 * 32
    assert (tmp_path / "loss_curve.png").stat().st_size > 10_000
    model = checkpoint.load(tmp_path / "weights")
    assert model.config.n_layers == train.SIZES["tiny"].n_layers
    assert (tmp_path / "weights" / "tokenizer.json").is_file()


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="size"):
        train.TrainConfig(size="huge")
    with pytest.raises(ValueError, match="seq_len"):
        train.TrainConfig(size="tiny", seq_len=65)
    with pytest.raises(ValueError, match="precision"):
        train.TrainConfig(precision="int8")
