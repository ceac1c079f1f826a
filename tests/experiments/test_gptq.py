"""GPTQ: with uncorrelated inputs it is round-to-nearest; with correlated ones its output error is lower."""

import pytest
import torch

from hwopt import quantization
from hwopt.experiments import gptq


def test_with_uncorrelated_inputs_gptq_is_round_to_nearest():
    torch.manual_seed(0)
    w = torch.randn(16, 64)
    rtn = quantization.fake_quantize(w, "int4", per_channel=True)
    assert torch.allclose(gptq.gptq_quantize(w, torch.eye(64), "int4", damping=1e-6), rtn, atol=1e-5)


@pytest.mark.parametrize("precision", ["int4", "int4_g32"])
def test_with_correlated_inputs_gptq_lowers_the_output_error(precision):
    torch.manual_seed(0)
    w = torch.randn(32, 128)
    x = torch.randn(1024, 16) @ torch.randn(16, 128) + 0.1 * torch.randn(1024, 128)  # inputs of low rank
    h = gptq.hessian(x)
    assert h.shape == (128, 128) and h.dtype == torch.float64

    def output_error(q):
        return float(((x @ (w - q).T) ** 2).mean())

    rtn = quantization.fake_quantize(w, precision, per_channel=precision == "int4")
    assert output_error(gptq.gptq_quantize(w, h, precision)) < 0.5 * output_error(rtn)


def test_gptq_keeps_the_grid_of_its_format():
    torch.manual_seed(1)
    w, x = torch.randn(8, 64), torch.randn(256, 64)
    q = gptq.gptq_quantize(w, gptq.hessian(x), "int4_g32")
    for group in q.split(32, dim=1):  # at most 15 levels per row and group: a symmetric int4 grid
        assert all(len(torch.unique(row)) <= 15 for row in group)
    with pytest.raises(ValueError, match="integer format"):
        gptq.gptq_quantize(w, gptq.hessian(x), "nvfp4")
    with pytest.raises(ValueError, match="h must be"):
        gptq.gptq_quantize(w, torch.eye(32), "int4")
