"""Perplexity: windows, the unigram baseline, and the same number every time."""

import math

import pytest
import torch

from hwopt.models import perplexity
from hwopt.models.llama import Llama, LlamaConfig


def test_windows_do_not_overlap_and_drop_the_tail():
    w = perplexity.windows(torch.arange(23), 5)
    assert w.shape == (4, 6) and w[1, 0] == 5 and w[-1, -1] == 20
    assert perplexity.windows(torch.arange(23), 5, max_windows=2).shape == (2, 6)
    with pytest.raises(ValueError, match="stream"):
        perplexity.windows(torch.arange(4), 5)


def test_unigram_baseline_of_a_uniform_stream_is_the_vocabulary():
    stream = torch.arange(8).repeat(50)
    assert perplexity.unigram_perplexity(stream, stream, 8) == pytest.approx(8.0)


def test_mean_loss_is_deterministic_and_near_log_vocab_when_untrained():
    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=300, d_model=64, n_layers=1, n_heads=4, n_kv_heads=2, hidden=128,
                              max_seq_len=64)).eval()
    stream = torch.randint(0, 300, (1000,), generator=torch.Generator().manual_seed(0))
    first = perplexity.mean_loss(model, stream, 32, progress=False)
    assert first == perplexity.mean_loss(model, stream, 32, progress=False)
    assert abs(first - math.log(300)) < 0.2
