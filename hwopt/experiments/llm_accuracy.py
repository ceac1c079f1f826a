"""How much an LLM loses in a number format: validation perplexity and top-1 agreement with full precision
(lessons 4, 8, 9, 10).

A model's weights are stored in the format and computed with in fp32 (weight-only), every matrix included (the
tied embedding table too), norms kept in fp32:
- formats of hwopt.formats through quantization.fake_quantize: fp16, bf16, fp8_e4m3 / fp8_e5m2 (one fp32 scale
  per tensor), int4_g32 / int4_g128 (an fp32 or fp16 scale per 32 or 128 values), mxfp4, nvfp4, ...; int8 and
  int4 have one fp32 scale per output channel (row);
- GGUF tensor types (gguf_q8_0, gguf_q4_0, gguf_q4_k): the model written to a GGUF file with
  hwopt.models.gguf_export and read back dequantized by gguf-py.
Perplexity is exp(mean cross-entropy) over non-overlapping windows of the validation text (tokenized by the
model's own tokenizer); top-1 agreement is the share of positions where the format's most likely next token is
full precision's. Any other variant of the model (activations quantized, a KV cache in fewer bits, GPTQ's
weights: llm_quantization, kv_precision) goes through evaluate_variant, the same measurement. Results are
cached under cache_dir() / "llm_accuracy", keyed by the model's files, the variant, the evaluation text, the
window length and count: a lesson computes each number live once, on a slice of the text where the whole is
too slow (describe_slice says which).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from tqdm.auto import tqdm

from hwopt import arguments, formats, plots, quantization
from hwopt.machine import bench
from hwopt.machine.toolchain import cache_dir
from hwopt.models import checkpoint, corpus, gguf_export, perplexity, tokenizer
from hwopt.models.llama import Llama

__all__ = ["PRECISIONS", "GGUF_PRECISIONS", "load", "evaluation_stream", "quantize_weights", "measure",
           "evaluate", "evaluate_variant", "table", "describe_slice", "frontier", "plot_frontier"]

GGUF_PRECISIONS = {"gguf_q8_0": "Q8_0", "gguf_q4_0": "Q4_0", "gguf_q4_k": "Q4_K"}
PRECISIONS = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int4_g128", "int4_g32", "mxfp4",
              "nvfp4", *GGUF_PRECISIONS)  # the table's rows, in the order lessons show them
# int8 and int4: a scale per row, stored as a group format's scale is (one group a row)
_PER_CHANNEL = {"int8": "int8_g32", "int4": "int4_g32"}
_VERSION = 1  # bump when what a cached result means changes
EVAL_SETS = ("validation",)


def _precision(precision) -> str:
    if isinstance(precision, str) and precision in GGUF_PRECISIONS:
        return precision
    try:
        return formats.name(precision)
    except ValueError:
        raise ValueError(f"precision must be a format of hwopt.formats ({', '.join(formats.FORMATS)}) or "
                         f"a GGUF type ({', '.join(GGUF_PRECISIONS)}); got {precision!r}") from None


def load(model="target", device="cpu") -> tuple[Llama, object, Path]:
    """(fp32 Llama, its tokenizers.Tokenizer, its folder) for model: 'target', 'draft', a Hugging Face folder
    or hub id (hwopt.models.checkpoint.resolve). ValueError when the folder's tokenizer.json does not match
    the model's vocabulary."""
    folder = checkpoint.resolve(model)
    net = checkpoint.load(folder, device=device)
    tok = tokenizer.load(folder / "tokenizer.json")
    size = tok.get_vocab_size(with_added_tokens=True)
    if size != net.config.vocab_size:
        raise ValueError(f"tokenizer: {str(folder / 'tokenizer.json')!r} has {size} tokens; expected the "
                         f"{net.config.vocab_size} of {str(folder / 'config.json')!r}")
    return net, tok, folder


def _eos_id(folder: Path, tok) -> int:
    raw = json.loads((folder / "config.json").read_text())
    eos = raw.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    if eos is None:
        eos = tok.token_to_id(corpus.EOS)
    if eos is None:
        raise ValueError(f"model: {str(folder / 'config.json')!r} names no eos_token_id")
    return int(eos)


def evaluation_stream(folder: Path, tok, eval_set: str = "validation") -> torch.Tensor:
    """The evaluation text (the shipped validation split of the standard library) as the model's tokens."""
    arguments.one_of("eval_set", eval_set, EVAL_SETS)
    texts = corpus.read_validation(checkpoint.WEIGHTS_DIR / "validation.txt")
    return tokenizer.encode_documents(tok, texts, _eos_id(folder, tok))


def quantize_weights(net: Llama, precision, tokenizer_path: Path | str | None = None) -> tuple[Llama, float]:
    """(a copy of net whose matrices hold what precision stores, bytes per weight over those matrices with
    scales included). A GGUF precision writes the tokenizer at tokenizer_path (default: the course's) into
    the file it reads back."""
    arguments.instance("net", net, Llama)
    precision = _precision(precision)
    if precision in GGUF_PRECISIONS:
        return _through_gguf(net, GGUF_PRECISIONS[precision], tokenizer_path)
    out = copy.deepcopy(net)
    stored, count = 0.0, 0
    with torch.no_grad():
        for p in out.parameters():  # a tied head is the embedding table, visited once
            if p.dim() != 2:
                continue
            per_channel = precision in _PER_CHANNEL
            fmt = (formats.get(_PER_CHANNEL[precision]).with_block(p.shape[1]) if per_channel
                   else formats.get(precision))
            if precision != "fp32":
                rounded = quantization.fake_quantize(p.detach().float().cpu(), precision,
                                                     per_channel=per_channel)
                p.copy_(rounded.to(p.device, p.dtype))
            stored += p.numel() * fmt.bytes_per_weight
            count += p.numel()
    return out, stored / count


def _through_gguf(net: Llama, tensor_type: str, tokenizer_path: Path | None) -> tuple[Llama, float]:
    import gguf

    with tempfile.TemporaryDirectory(prefix="hwopt-gguf-") as folder:
        path = gguf_export.write(net, Path(folder) / f"model-{tensor_type}.gguf", tensor_type,
                                 tokenizer_path=tokenizer_path)
        out = gguf_export.load(path, device=next(net.parameters()).device)
    block, type_size = gguf.GGML_QUANT_SIZES[getattr(gguf.GGMLQuantizationType, tensor_type)]
    return out, type_size / block


@torch.no_grad()
def measure(net, windows: torch.Tensor, reference: torch.Tensor | None = None, batch_size: int = 8,
            progress: bool = True) -> dict:
    """Perplexity of net over windows (n, seq + 1) and, with reference (n, seq) top-1 tokens of full
    precision, the share of positions where net's top-1 agrees; also its own top-1 tokens."""
    arguments.instance("windows", windows, torch.Tensor)
    arguments.finite_array("windows", windows, ndim=2, integer=True, minimum=0)
    if windows.shape[1] < 2:
        raise ValueError(f"windows must hold at least 2 tokens each (context and target); "
                         f"got {windows.shape[1]}")
    batch_size = arguments.count("batch_size", batch_size, "batch")
    progress = arguments.boolean("progress", progress)
    device = next(net.parameters()).device
    total, tops = 0.0, []
    for i in tqdm(range(0, len(windows), batch_size), disable=not progress, desc="evaluating", unit="batch"):
        w = windows[i:i + batch_size].to(device)
        logits = net(w[:, :-1]).float()
        total += F.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
        tops.append(logits.argmax(-1).cpu())
    top1 = torch.cat(tops)
    result = {"perplexity": float(torch.tensor(total / top1.numel()).exp()), "tokens": top1.numel(),
              "top1": top1}
    if reference is not None:
        if reference.shape != top1.shape:
            raise ValueError(f"reference must have shape {tuple(top1.shape)}; got {tuple(reference.shape)}")
        result["top1_agreement"] = float((top1 == reference).double().mean())
    return result


def _hash_files(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in [folder / "config.json", *checkpoint._weight_files(folder)]:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def _write_atomically(path: Path, write) -> None:
    """write(temporary path), then rename it to path: a reader never sees half a file (two lessons may fill
    the cache at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _file_name(variant: str) -> str:
    """A cache file's name for a variant: readable, and unique (its hash) whatever characters it holds."""
    slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", variant)[:60]
    return f"{slug}-{hashlib.sha256(variant.encode()).hexdigest()[:8]}"


def evaluate_variant(model, variant: str, build: Callable[[Llama], tuple[nn.Module, float]], *,
                     eval_set: str = "validation", seq_len: int | None = None, max_windows: int | None = None,
                     batch_size: int = 8, device="cpu", cache: bool = True, progress: bool = True) -> dict:
    """Validation perplexity and top-1 agreement with fp32 of a variant of `model`: build(fp32 Llama) returns
    (the variant, a module tokens (batch, seq) -> logits, and its bytes per weight). `variant` names it in
    the cache: every setting build depends on belongs in it. Arguments and result as evaluate's, with the
    result's `variant`, `windows` (evaluated) and `available_tokens` (the whole evaluation text's)."""
    arguments.text("variant", variant)
    arguments.function("build", build)
    arguments.one_of("eval_set", eval_set, EVAL_SETS)
    cache = arguments.boolean("cache", cache)
    batch_size = arguments.count("batch_size", batch_size, "batch")
    device = bench.resolve_device(device)
    progress = arguments.boolean("progress", progress)
    if seq_len is not None:
        seq_len = arguments.count("seq_len", seq_len, "tokens")
    folder = checkpoint.resolve(model)
    net_config = checkpoint.read_config(folder)
    seq_len = arguments.count("seq_len", seq_len or min(512, net_config.max_seq_len), "tokens")
    if seq_len > net_config.max_seq_len:
        raise ValueError(f"seq_len must be at most the model's {net_config.max_seq_len} positions; "
                         f"got {seq_len}")
    if max_windows is not None:
        max_windows = arguments.count("max_windows", max_windows, "items")
    text_hash = hashlib.sha256((checkpoint.WEIGHTS_DIR / "validation.txt").read_bytes()).hexdigest()[:16]
    tok_hash = hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()[:16] \
        if (folder / "tokenizer.json").is_file() else "none"
    key = {"version": _VERSION, "model": _hash_files(folder), "tokenizer": tok_hash, "eval_set": eval_set,
           "text": text_hash, "seq_len": seq_len, "max_windows": max_windows}
    base = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    store = cache_dir() / "llm_accuracy"
    result_path = store / f"{base}-{_file_name(variant)}.json"
    if cache and result_path.is_file():
        try:
            return {**json.loads(result_path.read_text()), "cached": True}
        except json.JSONDecodeError:
            pass  # a file from an older layout, or damaged: measured again
    began = time.perf_counter()
    net, tok, _ = load(folder, device)
    stream = evaluation_stream(folder, tok, eval_set)
    windows = perplexity.windows(stream, seq_len, max_windows)
    reference_path = store / f"{base}-reference.pt"
    reference = torch.load(reference_path) if cache and reference_path.is_file() else None
    if reference is None or reference.shape != (len(windows), seq_len):
        reference = measure(net, windows, batch_size=batch_size, progress=progress)["top1"]
        if cache:
            _write_atomically(reference_path, lambda path: torch.save(reference, path))
    built = build(net)
    if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], nn.Module)):
        raise ValueError("build must return (a module tokens -> logits, its bytes per weight)")
    variant_net, bytes_per_weight = built[0], arguments.positive("bytes_per_weight", built[1])
    measured = measure(variant_net, windows, reference, batch_size=batch_size, progress=progress)
    result = {"model": str(model), "variant": variant, "bytes_per_weight": float(bytes_per_weight),
              "perplexity": measured["perplexity"], "top1_agreement": measured["top1_agreement"],
              "tokens": measured["tokens"], "seq_len": seq_len, "windows": len(windows),
              "available_tokens": (len(stream) - 1) // seq_len * seq_len, "eval_set": eval_set,
              "seconds": time.perf_counter() - began}
    if cache:
        _write_atomically(result_path, lambda path: path.write_text(json.dumps(result, indent=1) + "\n"))
    return {**result, "cached": False}


def evaluate(model="target", precision="fp32", *, eval_set: str = "validation", seq_len: int | None = None,
             max_windows: int | None = None, batch_size: int = 8, device="cpu", cache: bool = True,
             progress: bool = True) -> dict:
    """Validation perplexity and top-1 agreement with fp32 of `model` with its weights in `precision`.

    model: 'target' (default), 'draft', a Hugging Face LLaMA folder or hub id. precision: a format of
    hwopt.formats or a GGUF type (GGUF_PRECISIONS). seq_len: tokens per window (default min(512, the model's
    context)); max_windows: evaluate the first windows only (default all). Returns a dict: model, precision,
    bytes_per_weight, perplexity, top1_agreement, tokens, seconds, cached (and evaluate_variant's keys)."""
    precision = _precision(precision)
    folder = checkpoint.resolve(model)
    tokenizer_path = folder / "tokenizer.json"
    result = evaluate_variant(model, precision, lambda net: quantize_weights(net, precision, tokenizer_path),
                              eval_set=eval_set, seq_len=seq_len, max_windows=max_windows,
                              batch_size=batch_size, device=device, cache=cache, progress=progress)
    return {**result, "precision": precision}


def table(model="target", precisions=PRECISIONS, **options) -> list[dict]:
    """evaluate(model, p, **options) for each precision p, in order."""
    arguments.instance("precisions", precisions, (list, tuple))
    if not precisions:
        raise ValueError("precisions must name at least one format")
    for i, p in enumerate(precisions):
        arguments.named(f"precisions[{i}]", _precision, p)
    return [evaluate(model, p, **options) for p in precisions]


def describe_slice(rows) -> str:
    """Which text a result (or list of results) of evaluate came from, in words: 'the first 4 windows of 512
    tokens of the validation text: 2,048 of its 95,232 tokens'."""
    rows = [rows] if isinstance(rows, dict) else rows
    arguments.instance("rows", rows, (list, tuple))
    if not rows:
        raise ValueError("rows must hold at least one result of evaluate")
    slices = set()
    for k, row in enumerate(rows):
        arguments.instance(f"rows[{k}]", row, dict)
        if not {"tokens", "seq_len", "eval_set"} <= set(row):
            raise ValueError(f"rows[{k}] must be a result of evaluate or evaluate_variant")
        seq_len = arguments.count(f"rows[{k}]['seq_len']", row["seq_len"], "tokens")
        tokens = arguments.count(f"rows[{k}]['tokens']", row["tokens"], "tokens")
        if tokens % seq_len:
            raise ValueError(f"rows[{k}]['tokens'] must be whole windows of seq_len {seq_len}; got {tokens}")
        available = row.get("available_tokens")
        if available is not None:
            available = arguments.count(f"rows[{k}]['available_tokens']", available, "tokens", minimum=tokens)
        eval_set = arguments.one_of(f"rows[{k}]['eval_set']", row["eval_set"], EVAL_SETS)
        slices.add((tokens, seq_len, eval_set, available))
    if len(slices) > 1:
        raise ValueError("rows must come from one slice of the text (the same windows); got several")
    tokens, seq_len, eval_set, available = slices.pop()
    windows = tokens // seq_len
    if available and tokens >= available:
        return f"all {windows:,} windows of {seq_len} tokens of the {eval_set} text ({tokens:,} tokens)"
    whole = f": {tokens:,} of its {available:,} tokens" if available else f" ({tokens:,} tokens)"
    return f"the first {windows:,} windows of {seq_len} tokens of the {eval_set} text{whole}"


def frontier(rows: list[dict]) -> list[dict]:
    """The rows no other row beats on both bytes per weight and perplexity (as few bytes and a lower
    perplexity, or fewer bytes and as low a one): the choices a practitioner reads off the plot, fewest bytes
    first."""
    arguments.instance("rows", rows, (list, tuple))
    for k, row in enumerate(rows):
        arguments.instance(f"rows[{k}]", row, dict)
        for key in ("bytes_per_weight", "perplexity"):
            arguments.positive(f"rows[{k}]['{key}']", row.get(key))
    kept = [r for r in rows if not any(
        (o["bytes_per_weight"] <= r["bytes_per_weight"] and o["perplexity"] < r["perplexity"])
        or (o["bytes_per_weight"] < r["bytes_per_weight"] and o["perplexity"] <= r["perplexity"])
        for o in rows)]
    return sorted(kept, key=lambda r: r["bytes_per_weight"])


def _label(row: dict) -> str:
    return str(row.get("precision") or row.get("variant"))


def plot_frontier(rows: list[dict], ax=None):
    """Validation perplexity vs bytes per weight (scales included), a labelled point per row of table() (or
    of evaluate_variant), and the frontier through the rows nothing beats."""
    arguments.instance("rows", rows, (list, tuple))
    if not rows:
        raise ValueError("rows must hold at least one row of table()")
    for k, row in enumerate(rows):
        arguments.instance(f"rows[{k}]", row, dict)
        for key in ("bytes_per_weight", "perplexity"):
            arguments.positive(f"rows[{k}]['{key}']", row.get(key))
        arguments.fraction(f"rows[{k}]['top1_agreement']", row.get("top1_agreement"), allow_zero=True)
    ax = plots.axes("bytes per weight (scales included)", "validation perplexity", logx=True, ax=ax,
                    title="Storage vs accuracy: the frontier", figsize=(8.4, 4.0))
    best = frontier(rows)
    ax.plot([r["bytes_per_weight"] for r in best], [r["perplexity"] for r in best], "-", color="#999999",
            zorder=0, label="frontier: nothing beats these on both")
    for k, row in enumerate(rows):
        ax.plot(row["bytes_per_weight"], row["perplexity"], "osD^v"[k // 8 % 5], color=plots.color(k),
                linestyle="none", label=f"{_label(row)}: {row['bytes_per_weight']:.3g} B, "
                                        f"ppl {row['perplexity']:.3f}, top-1 {row['top1_agreement']:.1%}")
    ax.legend(frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return plots.finish(ax, legend=False)
