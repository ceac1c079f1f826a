"""The course's target as ONNX: ONNX Runtime gives the module's logits, at any batch and length."""

import numpy as np
import pytest
import torch

from hwopt.models import checkpoint, onnx_export


def test_onnx_runtime_gives_the_course_modules_logits(tmp_path):
    model = checkpoint.load("target")
    path = onnx_export.export(model, tmp_path / "target.onnx")
    for shape in ((1, 100), (3, 17)):
        tokens = torch.randint(0, model.config.vocab_size, shape, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            expected = model(tokens).numpy()
        np.testing.assert_allclose(onnx_export.logits(path, tokens), expected, atol=2e-4, rtol=1e-4)


def test_export_needs_an_onnx_path(tmp_path):
    with pytest.raises(ValueError, match="path"):
        onnx_export.export(checkpoint.load("draft"), tmp_path / "model.bin")
