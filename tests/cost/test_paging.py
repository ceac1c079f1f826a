"""cost.paging: contiguous reservation vs paged blocks, by hand and as properties."""

import numpy as np
import pytest

from hwopt.cost import paging


def test_held_tokens_reserve_max_len_or_round_up_to_blocks():
    lengths = [5, 17, 3, 16]
    assert paging.held_tokens(lengths, "contiguous", 32, 8).tolist() == [32] * 4
    assert paging.held_tokens(lengths, "paged", 32, 8).tolist() == [8, 24, 8, 16]


def test_allocation_by_hand():
    result = paging.compare_policies([5, 17, 3], memory_tokens=64, max_len=32, block_size=8)
    contiguous, paged = result["contiguous"], result["paged"]
    assert (contiguous.sequences, contiguous.used_tokens, contiguous.held_tokens) == (2, 22, 64)
    assert contiguous.wasted_tokens == 42 and contiguous.waste_fraction == pytest.approx(42 / 64)
    assert (paged.sequences, paged.used_tokens, paged.held_tokens) == (3, 25, 40)
    assert paged.wasted_tokens == 15 and "3 sequences fit" in str(paged)


@pytest.mark.parametrize("seed", range(5))
def test_paging_fits_at_least_as_many_and_wastes_less_than_a_block_each(seed):
    lengths = paging.request_lengths(500, mean_tokens=200, max_len=2048, seed=seed)
    for block in (1, 16, 128):
        result = paging.compare_policies(lengths, 100_000, 2048, block)
        paged = result["paged"]
        assert paged.sequences >= result["contiguous"].sequences
        assert paged.wasted_tokens < block * max(paged.sequences, 1)
    assert paging.allocate(lengths, 100_000, "paged", 2048, 1).wasted_tokens == 0


def test_request_lengths_are_capped_and_reproducible():
    a = paging.request_lengths(1000, 300, 512, seed=3)
    assert a.max() <= 512 and a.min() >= 1 and np.array_equal(a, paging.request_lengths(1000, 300, 512, 3))


def test_report_says_how_many_times_more_fit():
    lengths = paging.request_lengths(2000, 300, 4096, seed=0)
    text = paging.paging_report(lengths, 100_000, 4096, 16)
    assert "contiguous" in text and "paged" in text and "as many sequences" in text
    assert "max_len = 4,096 tokens" in text and "max_len / mean length" in text
    assert "every one" in paging.paging_report([4, 4], 1000, 8, 4)
    assert "not one" in paging.paging_report([4, 4], 6, 8, 2)


def test_plot_and_explorer():
    fig = paging.plot_policies(paging.compare_policies([5, 17, 3], 64, 32, 8))
    assert fig.axes[0].get_ylabel() == "share of KV-cache memory"
    box = paging.paging_explorer(131072.0, n_requests=200)
    box.controls["block_size"].value = 64
    box.controls["memory_gb"].value = 1.0
    assert set(box.controls) == {"block_size", "max_len", "memory_gb"}


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="lengths"):
        paging.held_tokens([40], "paged", 32)
    with pytest.raises(ValueError, match="policy"):
        paging.allocate([4], 10, "buddy", 32)
    with pytest.raises(ValueError, match="block_size"):
        paging.allocate([4], 10, "paged", 32, 0)
    with pytest.raises(ValueError, match="result"):
        paging.plot_policies({"paged": 3})
