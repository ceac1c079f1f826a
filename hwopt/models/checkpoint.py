"""Weights on disk in Hugging Face's layout: a folder with config.json (LlamaConfig's fields) and
model.safetensors (or model.safetensors.index.json and its shards), tokenizer.json beside them.

The course's own model is such a folder (hwopt/models/weights/target, .../draft), so transformers'
LlamaForCausalLM.from_pretrained reads it, and `load` reads any LLaMA-architecture folder of that layout, or a
hub id where huggingface_hub is installed and the hub reachable.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from hwopt import arguments
from hwopt.machine import bench
from hwopt.models.llama import Llama, LlamaConfig

__all__ = ["WEIGHTS_DIR", "MODELS", "resolve", "read_config", "read_weights", "load", "save", "hf_config"]

WEIGHTS_DIR = Path(__file__).parent / "weights"
MODELS = ("target", "draft")  # the course's own models, folders of WEIGHTS_DIR
_PREFIX = "model."  # Hugging Face's LlamaForCausalLM keeps the decoder under `model`


def resolve(model) -> Path:
    """The folder of a model: 'target' or 'draft' (the course's), a local folder, or a hub id (downloaded to
    the hub's cache where huggingface_hub is installed and the hub is reachable)."""
    if isinstance(model, Path):
        folder = model
    else:
        arguments.text("model", model)
        if model in MODELS:
            folder = WEIGHTS_DIR / model
        else:
            folder = Path(model).expanduser()
    if folder.is_dir():
        return folder
    if isinstance(model, str) and model.count("/") == 1 and not model.startswith((".", "/", "~")):
        return _from_hub(model)
    raise ValueError(f"model must be one of {', '.join(MODELS)}, a folder with config.json and safetensors, "
                     f"or a hub id (org/name); {str(folder)!r} is not a folder")


def _from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ValueError(f"model {repo_id!r} is not a local folder, and loading it from the Hugging Face hub "
                         "needs huggingface_hub (pip install huggingface_hub)") from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors"]))
    except Exception as error:  # offline, unknown repository, gated model: all told the same way
        raise ValueError(f"model {repo_id!r}: not a local folder, and the hub did not provide it "
                         f"({error})") from None


def read_config(folder: Path) -> LlamaConfig:
    """The LlamaConfig of a folder's config.json; ValueError naming the file for another architecture."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ValueError(f"model: expected {str(path)!r} (a Hugging Face config); it does not exist")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"model: {str(path)!r} is not valid JSON ({error})") from None
    if raw.get("model_type") != "llama":
        raise ValueError(f"model: {str(path)!r} describes model_type {raw.get('model_type')!r}; "
                         "expected 'llama'")
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        raise ValueError(f"model: {str(path)!r} has biases; expected a LLaMA without them")
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    theta = rope.get("rope_theta", raw.get("rope_theta", 10_000.0))
    llama3 = ()
    if rope_type == "llama3":
        llama3 = (float(rope["factor"]), float(rope["low_freq_factor"]), float(rope["high_freq_factor"]),
                  int(rope["original_max_position_embeddings"]))
    elif rope_type != "default":
        raise ValueError(f"model: {str(path)!r} uses RoPE scaling {rope_type!r}; "
                         "expected 'default' or 'llama3'")
    try:
        return LlamaConfig(
            vocab_size=raw["vocab_size"], d_model=raw["hidden_size"], n_layers=raw["num_hidden_layers"],
            n_heads=raw["num_attention_heads"],
            n_kv_heads=raw.get("num_key_value_heads") or raw["num_attention_heads"],
            hidden=raw["intermediate_size"], max_seq_len=raw.get("max_position_embeddings", 2048),
            rope_theta=float(theta), norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            head_dim=raw.get("head_dim") or 0, tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
            rope_llama3=llama3)
    except KeyError as missing:
        raise ValueError(f"model: {str(path)!r} lacks the field {missing}") from None


def hf_config(config: LlamaConfig, dtype: str = "bfloat16") -> dict:
    """config.json's fields for a LlamaConfig (transformers 4 and 5 both read them)."""
    arguments.instance("config", config, LlamaConfig)
    arguments.one_of("dtype", dtype, ("float32", "float16", "bfloat16"))
    fields = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": config.vocab_size,
        "hidden_size": config.d_model, "intermediate_size": config.hidden,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads, "num_key_value_heads": config.n_kv_heads,
        "head_dim": config.dim_per_head, "max_position_embeddings": config.max_seq_len,
        "rms_norm_eps": config.norm_eps, "rope_theta": config.rope_theta, "hidden_act": "silu",
        "tie_word_embeddings": config.tie_embeddings, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": dtype,
    }
    if config.rope_llama3:
        factor, low, high, original = config.rope_llama3
        fields["rope_scaling"] = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                                  "high_freq_factor": high, "original_max_position_embeddings": original}
    return fields


def save(model: Llama, folder: Path | str, dtype=torch.bfloat16) -> Path:
    """model's config.json and model.safetensors (in dtype, tied head stored once) into folder."""
    arguments.instance("model", model, Llama)
    folder = Path(arguments.instance("folder", folder, (str, Path)))
    folder.mkdir(parents=True, exist_ok=True)
    state = {_PREFIX + name: t.detach().to("cpu", dtype).contiguous()
             for name, t in model.state_dict().items()
             if not (model.config.tie_embeddings and name == "lm_head.weight")}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    dtype_name = str(dtype).removeprefix("torch.")
    (folder / "config.json").write_text(json.dumps(hf_config(model.config, dtype_name), indent=1) + "\n")
    return folder


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError) as error:
            raise ValueError(f"model: {str(index)!r} is not a safetensors index ({error})") from None
        return [folder / n for n in names]
    single = folder / "model.safetensors"
    if not single.is_file():
        raise ValueError(f"model: expected weights at {str(single)!r} (or a model.safetensors.index.json); "
                         "none found")
    return [single]


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a folder's safetensors, names without the `model.` prefix; ValueError naming a
    missing or corrupt file."""
    tensors = {}
    for path in _weight_files(Path(folder)):
        if not path.is_file():
            raise ValueError(f"model: expected the weights file {str(path)!r}; it does not exist")
        try:
            loaded = load_file(str(path))
        except (SafetensorError, OSError, RuntimeError) as error:
            raise ValueError(f"model: {str(path)!r} is not a readable safetensors file ({error})") from None
        tensors.update({name.removeprefix(_PREFIX): t for name, t in loaded.items()})
    return tensors


def load(model="target", device="cpu", dtype=torch.float32) -> Llama:
    """A Llama with the weights of `model` (see resolve), on device, in dtype, in eval mode."""
    device = bench.resolve_device(device)
    folder = resolve(model)
    config = read_config(folder)
    tensors = read_weights(folder)
    if config.tie_embeddings:
        tensors.pop("lm_head.weight", None)
    net = Llama(config)  # on the CPU: the meta device's initialisation imports torch's compiler (1 s)
    expected = {name: p.shape for name, p in net.state_dict().items()
                if not (config.tie_embeddings and name == "lm_head.weight")}
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise ValueError(f"model: the weights in {str(folder)!r} lack {len(missing)} tensors of the config "
                         f"({', '.join(missing[:3])}...); expected every tensor of a "
                         f"{config.n_layers}-layer LLaMA")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != tuple(shape):
            raise ValueError(f"model: tensor {name} in {str(folder)!r} has shape "
                             f"{tuple(tensors[name].shape)}; config.json expects {tuple(shape)}")
    net.load_state_dict({k: tensors[k] for k in expected}, strict=False, assign=True)
    if config.tie_embeddings:
        net.lm_head.weight = net.embed_tokens.weight
    return net.to(device, dtype).eval()
