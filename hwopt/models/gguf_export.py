"""A Llama as GGUF, llama.cpp's file format, written with the `gguf` package (llama.cpp's gguf-py) and read
back.

The file holds what llama.cpp needs to run it as a `llama` model: the hyper-parameters under `llama.*`, the
byte-level BPE tokenizer (`tokenizer.ggml.model` "gpt2", pre-tokenizer "gpt-2", tokens, types, merges), and
the tensors under llama.cpp's names. llama.cpp applies RoPE to adjacent pairs where Hugging Face rotates the
two halves of a head, so the Q and K projections' rows are permuted on the way in, as llama.cpp's
convert_hf_to_gguf.py does, and back on the way out. Norm weights stay F32; every matrix is stored in the
chosen type. gguf-py quantizes Q8_0 and Q4_0; it has no Q4_K quantizer, so Q4_K blocks are made here by the
plain min/max rule (llama.cpp's llama-quantize searches each block's scale and gets a smaller error).
The file also carries a chat template (`tokenizer.chat_template`, CHAT_TEMPLATE) so that a server can answer
chat requests: the course's model knows only Python, so a chat turns into a Python file whose non-assistant
messages are comments. `cached(model, tensor_type)` writes the course's model once into the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from hwopt import arguments
from hwopt.machine import bench, toolchain
from hwopt.models import checkpoint
from hwopt.models.llama import Llama, LlamaConfig

__all__ = ["TYPES", "CHAT_TEMPLATE", "quantize_q4_k", "write", "read", "load", "cached"]

TYPES = ("F16", "Q8_0", "Q4_0", "Q4_K")  # the tensor types `write` stores matrices in
# Jinja, as llama.cpp and transformers read it: system and user messages become Python comments, the
# assistant's turns code; the model then writes on.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{{ message['content'] + '\\n' }}"
    "{%- else -%}{{ '# ' + message['content'] + '\\n' }}{%- endif -%}"
    "{%- endfor -%}"
)
_FILE_TYPES = {"F16": "MOSTLY_F16", "Q8_0": "MOSTLY_Q8_0", "Q4_0": "MOSTLY_Q4_0", "Q4_K": "MOSTLY_Q4_K_S"}
_NAMES = {  # Hugging Face name (layer N as {}) -> llama.cpp name
    "embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "layers.{}.input_layernorm.weight": "blk.{}.attn_norm.weight",
    "layers.{}.self_attn.q_proj.weight": "blk.{}.attn_q.weight",
    "layers.{}.self_attn.k_proj.weight": "blk.{}.attn_k.weight",
    "layers.{}.self_attn.v_proj.weight": "blk.{}.attn_v.weight",
    "layers.{}.self_attn.o_proj.weight": "blk.{}.attn_output.weight",
    "layers.{}.post_attention_layernorm.weight": "blk.{}.ffn_norm.weight",
    "layers.{}.mlp.gate_proj.weight": "blk.{}.ffn_gate.weight",
    "layers.{}.mlp.up_proj.weight": "blk.{}.ffn_up.weight",
    "layers.{}.mlp.down_proj.weight": "blk.{}.ffn_down.weight",
}


def _gguf_name(name: str) -> str:
    parts = name.split(".")
    if parts[0] == "layers":
        return _NAMES[".".join(["layers", "{}", *parts[2:]])].format(parts[1])
    return _NAMES[name]


def _hf_name(gguf_name: str) -> str | None:
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        key = ".".join(["blk", "{}", *parts[2:]])
        hf = next((h for h, g in _NAMES.items() if g == key), None)
        return hf.format(parts[1]) if hf else None
    return next((h for h, g in _NAMES.items() if g == gguf_name), None)


def _permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of a Q or K projection from rotate-half order to llama.cpp's adjacent-pair order."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    return w.reshape(n_heads, w.shape[0] // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def quantize_q4_k(rows: np.ndarray) -> np.ndarray:
    """rows (n, k) fp32, k a multiple of 256, as Q4_K blocks (n, k / 256 * 144) uint8: per 32 values a 6-bit
    scale and a 6-bit min under the super-block's fp16 d and dmin: x ~ d * scale * q - dmin * min, q in
    0..15."""
    rows = arguments.finite_array("rows", rows, ndim=2)
    rows = rows.detach().cpu().numpy() if hasattr(rows, "detach") else np.asarray(rows)
    n, k = rows.shape
    if k % 256:
        raise ValueError(f"rows must have a multiple of 256 values per row (Q4_K super-blocks); got {k}")
    x = rows.reshape(-1, 8, 32).astype(np.float32)
    low = np.minimum(x.min(axis=2), 0)
    scale = (x.max(axis=2) - low) / 15
    minimum = -low
    d = (scale.max(axis=1) / 63).astype(np.float16)
    dmin = (minimum.max(axis=1) / 63).astype(np.float16)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.clip(np.rint(np.divide(scale, d32, out=np.zeros_like(scale), where=d32 > 0)), 0, 63)
    sc = sc.astype(np.uint8)
    mn = np.clip(np.rint(np.divide(minimum, dmin32, out=np.zeros_like(scale), where=dmin32 > 0)), 0, 63)
    mn = mn.astype(np.uint8)
    step = (d32 * sc)[:, :, None]
    offset = (dmin32 * mn)[:, :, None]
    q = np.clip(np.rint(np.divide(x + offset, step, out=np.zeros_like(x), where=step > 0)), 0, 15)
    q = q.astype(np.uint8)
    packed_scales = np.concatenate([
        sc[:, :4] | ((sc[:, 4:] >> 4) << 6),
        mn[:, :4] | ((mn[:, 4:] >> 4) << 6),
        (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)], axis=1)
    pairs = q.reshape(-1, 4, 2, 32)
    qs = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(-1, 128)
    blocks = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                             packed_scales, qs], axis=1)
    return blocks.reshape(n, k // 256 * 144)


def _tokenizer_fields(tokenizer_path: Path) -> tuple[list[str], list[int], list[str]]:
    """(tokens by id, token types, merges 'a b') of a tokenizers BPE JSON."""
    spec = json.loads(Path(tokenizer_path).read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    tokens = [None] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    special = {a["content"] for a in spec.get("added_tokens", []) if a.get("special")}
    types = [3 if t in special else 1 for t in tokens]  # gguf.TokenType CONTROL, NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return tokens, types, merges


def write(model: Llama, path: Path | str, tensor_type: str = "F16", tokenizer_path: Path | str | None = None,
          name: str = "hwopt-stdlib", chat_template: str | None = CHAT_TEMPLATE) -> Path:
    """model as a GGUF file at path, matrices in tensor_type (one of TYPES), the tokenizer from
    tokenizer_path (default: the course's), and chat_template (Jinja; None: none)."""
    import gguf


    arguments.instance("model", model, Llama)
    arguments.one_of("tensor_type", tensor_type, TYPES)
    path = Path(arguments.instance("path", path, (str, Path)))
    if path.suffix != ".gguf":
        raise ValueError(f"path must end in .gguf; got {str(path)!r}")
    arguments.text("name", name)
    if chat_template is not None:
        arguments.text("chat_template", chat_template)
    tokenizer_path = Path(tokenizer_path or checkpoint.WEIGHTS_DIR / "tokenizer.json")
    c = model.config
    if c.rope_llama3:
        raise ValueError("model: Llama 3 RoPE scaling is not written to GGUF here; "
                         "expected a plain RoPE model")
    tokens, types, merges = _tokenizer_fields(tokenizer_path)
    if len(tokens) != c.vocab_size:
        raise ValueError(f"tokenizer_path: {str(tokenizer_path)!r} has {len(tokens)} tokens; the model's "
                         f"vocabulary has {c.vocab_size}")
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_file_type(getattr(gguf.LlamaFileType, _FILE_TYPES[tensor_type]))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_vocab_size(c.vocab_size)
    writer.add_context_length(c.max_seq_len)
    writer.add_embedding_length(c.d_model)
    writer.add_block_count(c.n_layers)
    writer.add_feed_forward_length(c.hidden)
    writer.add_head_count(c.n_heads)
    writer.add_head_count_kv(c.n_kv_heads)
    writer.add_key_length(c.dim_per_head)
    writer.add_value_length(c.dim_per_head)
    writer.add_rope_dimension_count(c.dim_per_head)
    writer.add_rope_freq_base(c.rope_theta)
    writer.add_layer_norm_rms_eps(c.norm_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    qtype = getattr(gguf.GGMLQuantizationType, tensor_type)
    for hf_name, tensor in model.state_dict().items():
        if c.tie_embeddings and hf_name == "lm_head.weight":
            continue  # llama.cpp reads a missing output.weight as the token embeddings
        w = tensor.detach().float().cpu().numpy()
        if hf_name.endswith("q_proj.weight"):
            w = _permute(w, c.n_heads)
        elif hf_name.endswith("k_proj.weight"):
            w = _permute(w, c.n_kv_heads)
        if w.ndim == 1:
            writer.add_tensor(_gguf_name(hf_name), w.astype(np.float32))
        elif tensor_type == "F16":
            writer.add_tensor(_gguf_name(hf_name), w.astype(np.float16))
        else:
            block = 256 if tensor_type == "Q4_K" else 32
            if w.shape[1] % block:
                raise ValueError(f"model: {hf_name} has rows of {w.shape[1]} values; {tensor_type} needs a "
                                 f"multiple of {block}")
            data = quantize_q4_k(w) if tensor_type == "Q4_K" else gguf.quants.quantize(w, qtype)
            writer.add_tensor(_gguf_name(hf_name), data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _float32(value) -> float:
    """A GGUF float32 field as the decimal it was written from (1e-05, not 9.99999974738e-06)."""
    return float(f"{float(value):.7g}")


def _field(reader, key: str):
    field = reader.fields.get(key)
    if field is None:
        return None
    return field.contents()


def read(path: Path | str) -> tuple[LlamaConfig, dict[str, np.ndarray], dict]:
    """(config, tensors under Hugging Face names dequantized to fp32 with Q/K in rotate-half order,
    {tensor name: GGML type name}) of a llama GGUF; ValueError naming the file for anything else."""
    import gguf

    path = Path(arguments.instance("path", path, (str, Path)))
    if not path.is_file():
        raise ValueError(f"path: expected a GGUF file at {str(path)!r}; it does not exist")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as error:  # gguf raises ValueError, struct errors or numpy errors on a bad file
        raise ValueError(f"path: {str(path)!r} is not a readable GGUF file ({error})") from None
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"path: {str(path)!r} holds a {arch!r} model; expected architecture 'llama'")
    try:
        config = LlamaConfig(
            vocab_size=len(_field(reader, "tokenizer.ggml.tokens")),
            d_model=int(_field(reader, "llama.embedding_length")),
            n_layers=int(_field(reader, "llama.block_count")),
            n_heads=int(_field(reader, "llama.attention.head_count")),
            n_kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
            hidden=int(_field(reader, "llama.feed_forward_length")),
            max_seq_len=int(_field(reader, "llama.context_length")),
            rope_theta=_float32(_field(reader, "llama.rope.freq_base")),
            norm_eps=_float32(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
            head_dim=int(_field(reader, "llama.attention.key_length") or 0))
    except TypeError:
        raise ValueError(f"path: {str(path)!r} lacks llama hyper-parameters (llama.*) "
                         "or its token list") from None
    tensors, types = {}, {}
    for t in reader.tensors:
        hf_name = _hf_name(t.name)
        if hf_name is None:
            raise ValueError(f"path: {str(path)!r} holds tensor {t.name!r}, not one of a llama model's")
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(n) for n in reversed(t.shape)])
        if hf_name.endswith("q_proj.weight"):
            w = _unpermute(w, config.n_heads)
        elif hf_name.endswith("k_proj.weight"):
            w = _unpermute(w, config.n_kv_heads)
        tensors[hf_name] = w
        types[hf_name] = t.tensor_type.name
    if "lm_head.weight" in tensors:
        config = replace(config, tie_embeddings=False)
    return config, tensors, types


def load(path: Path | str, device="cpu", dtype=torch.float32) -> Llama:
    """A Llama with the dequantized weights of a GGUF file (see read)."""
    device = bench.resolve_device(device)
    config, tensors, _ = read(path)
    model = Llama(config)
    expected = set(model.state_dict()) - ({"lm_head.weight"} if config.tie_embeddings else set())
    missing = sorted(expected - set(tensors))
    if missing:
        raise ValueError(f"path: {str(path)!r} lacks tensors {', '.join(missing[:3])}; "
                         "expected a complete llama")
    model.load_state_dict({k: torch.from_numpy(tensors[k]) for k in expected}, strict=False)
    return model.to(device, dtype).eval()


def cached(model: str = "target", tensor_type: str = "Q8_0") -> Path:
    """The course's model ('target' or 'draft') as a GGUF file of tensor_type, written once into
    toolchain.cache_dir() / "gguf" (keyed by its weights, its tokenizer and this exporter)."""
    arguments.one_of("model", model, checkpoint.MODELS)
    arguments.one_of("tensor_type", tensor_type, TYPES)
    folder = checkpoint.resolve(model)
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for file in sorted(folder.glob("*.safetensors")) + [folder / "config.json", folder / "tokenizer.json"]:
        digest.update(file.read_bytes())
    path = toolchain.cache_dir() / "gguf" / f"hwopt-{model}-{tensor_type}-{digest.hexdigest()[:12]}.gguf"
    if not path.is_file():
        part = path.with_name(f"{path.stem}.{os.getpid()}.part.gguf")  # written aside, then renamed
        write(checkpoint.load(model), part, tensor_type, folder / "tokenizer.json", name=f"hwopt-{model}")
        os.replace(part, path)
    return path
