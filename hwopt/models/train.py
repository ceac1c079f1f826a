"""Training the course's models: `python -m hwopt.models.train --size target` (see --help).

Next-token prediction on the train split of hwopt.models.corpus, tokenized with the shipped tokenizer (built
first when missing, with the validation text and the manifest). Each step draws batch_size windows of seq_len
+ 1 tokens at offsets from a generator seeded by (seed, step), so a run resumed from its checkpoint sees the
same batches as one that never stopped, and two sizes trained with one seed see the same tokens. AdamW, linear
warm-up then cosine decay to a tenth, gradients clipped at 1. The output folder gets checkpoint.pt (every
--checkpoint-every steps), log.json, loss_curve.png, and at the end the weights in Hugging Face's layout
(hwopt.models.checkpoint) with tokenizer.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from hwopt import arguments, formats, plots
from hwopt.machine import bench
from hwopt.models import checkpoint, corpus, perplexity, tokenizer
from hwopt.models.llama import Llama, LlamaConfig

__all__ = ["SIZES", "TrainConfig", "prepare", "train", "publish", "plot_loss_curve", "main"]

# dims are multiples of 256 so that every GGUF format (Q4_K's 256-value super-blocks) quantizes every matrix
SIZES: dict[str, LlamaConfig] = {
    "target": LlamaConfig(d_model=512, n_layers=6, n_heads=8, n_kv_heads=2, hidden=1536),
    "draft": LlamaConfig(d_model=256, n_layers=3, n_heads=4, n_kv_heads=2, hidden=768),
    "tiny": LlamaConfig(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden=128, max_seq_len=64),
}
TOKENIZER = checkpoint.WEIGHTS_DIR / "tokenizer.json"
VALIDATION = checkpoint.WEIGHTS_DIR / "validation.txt"
MANIFEST = checkpoint.WEIGHTS_DIR / "corpus_manifest.json"
CALIBRATION = checkpoint.WEIGHTS_DIR / "calibration.txt"


@dataclass(frozen=True)
class TrainConfig:
    """A training run: model size, steps, batch (sequences of seq_len tokens), optimizer, where and how."""

    size: str = "target"
    steps: int = 800
    batch_size: int = 8
    seq_len: int = 512
    lr: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.1
    seed: int = 0
    device: str = "cpu"
    threads: int = 0  # torch's CPU threads (0: torch's default)
    precision: str = "fp32"  # bf16: matmuls autocast to bf16, fp32 master weights (fast with native bf16)
    eval_every: int = 100
    eval_windows: int = 16  # validation windows for the loss curve (the full set is perplexity's job)
    checkpoint_every: int = 100

    def __post_init__(self):
        arguments.one_of("size", self.size, SIZES)
        arguments.count("steps", self.steps, "items")
        arguments.count("batch_size", self.batch_size, "batch")
        arguments.count("seq_len", self.seq_len, "tokens")
        if self.seq_len > SIZES[self.size].max_seq_len:
            raise ValueError(f"seq_len must be at most the model's {SIZES[self.size].max_seq_len} positions; "
                             f"got {self.seq_len}")
        arguments.positive("lr", self.lr, maximum=arguments.LIMITS["learning_rate"])
        arguments.count("warmup_steps", self.warmup_steps, "items", minimum=0)
        arguments.positive("weight_decay", self.weight_decay, allow_zero=True)
        arguments.count("seed", self.seed, "seed", minimum=0)
        arguments.count("threads", self.threads, "threads", minimum=0)
        bench.resolve_device(self.device)
        formats.name(self.precision, "precision", ("fp32", "bf16"))
        arguments.count("eval_every", self.eval_every, "items")
        arguments.count("eval_windows", self.eval_windows, "batch")
        arguments.count("checkpoint_every", self.checkpoint_every, "items")


def prepare(root=None, out: Path = checkpoint.WEIGHTS_DIR) -> None:
    """Build tokenizer.json, validation.txt, calibration.txt and corpus_manifest.json in out from the standard
    library at root (default: this interpreter's)."""
    train_docs, validation_docs = corpus.split(corpus.documents(root))
    calibration_docs = corpus.calibration_documents(train_docs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.train([d.text for d in train_docs]).save(str(out / TOKENIZER.name))
    corpus.write_validation(validation_docs, out / VALIDATION.name)
    corpus.write_validation(calibration_docs, out / CALIBRATION.name)
    corpus.write_manifest(corpus.manifest(train_docs, validation_docs, calibration_docs), out / MANIFEST.name)


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warm-up over warmup_steps, then cosine from lr down to lr / 10 at the last step."""
    step = arguments.count("step", step, "items", minimum=0)
    arguments.instance("config", config, TrainConfig)
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def batch(stream: torch.Tensor, step: int, config: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) each (batch_size, seq_len): windows at offsets drawn from (seed, step)."""
    arguments.instance("stream", stream, torch.Tensor)
    arguments.finite_array("stream", stream, ndim=1, integer=True, minimum=0)
    step = arguments.count("step", step, "items", minimum=0)
    arguments.instance("config", config, TrainConfig)
    if len(stream) <= config.seq_len + 1:
        raise ValueError(f"stream must hold more than seq_len + 1 = {config.seq_len + 1} tokens; "
                         f"got {len(stream)}")
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
    starts = torch.randint(0, len(stream) - config.seq_len - 1, (config.batch_size,), generator=generator)
    windows = torch.stack([stream[s:s + config.seq_len + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


def _optimizer(model: Llama, config: TrainConfig) -> torch.optim.AdamW:
    matrices = [p for p in model.parameters() if p.dim() >= 2]  # norms' gains are not decayed
    others = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": matrices, "weight_decay": config.weight_decay},
                              {"params": others, "weight_decay": 0.0}], lr=config.lr, betas=(0.9, 0.95))


def _save_checkpoint(path: Path, model, optimizer, step: int, log: dict) -> None:
    partial = path.with_suffix(".partial")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "log": log},
               partial)
    os.replace(partial, path)  # a run killed while saving keeps its previous checkpoint


def train(config: TrainConfig, out: Path | str, resume: bool = False, progress: bool = True,
          train_stream: torch.Tensor | None = None) -> dict:
    """Train SIZES[config.size] per config, writing into out; the log (losses, tokens, time) as a dict.

    resume: continue from out/checkpoint.pt (ValueError if its run had another configuration).
    train_stream: the train tokens (default: the train split of this interpreter's standard library)."""
    arguments.instance("config", config, TrainConfig)
    out = Path(arguments.instance("out", out, (str, Path)))
    resume = arguments.boolean("resume", resume)
    progress = arguments.boolean("progress", progress)
    if train_stream is not None:
        arguments.instance("train_stream", train_stream, torch.Tensor)
        arguments.finite_array("train_stream", train_stream, ndim=1, integer=True, minimum=0)
    out.mkdir(parents=True, exist_ok=True)
    device = bench.resolve_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    if not TOKENIZER.is_file():
        prepare()
    tok = tokenizer.load(TOKENIZER)
    if train_stream is None:
        train_docs, _ = corpus.split(corpus.documents())
        train_stream = tokenizer.encode_documents(tok, [d.text for d in train_docs])
    validation_stream = tokenizer.encode_documents(tok, corpus.read_validation(VALIDATION))
    model_config = replace(SIZES[config.size], vocab_size=tok.get_vocab_size())
    torch.manual_seed(config.seed)
    model = Llama(model_config).to(device)
    optimizer = _optimizer(model, config)
    log = {"train": asdict(config), "model": model_config.to_dict(), "parameters": model.parameter_count(),
           "train_tokens_available": len(train_stream), "steps_done": 0, "tokens_seen": 0, "wall_s": 0.0,
           "losses": [], "validation": []}
    ckpt = out / "checkpoint.pt"
    if resume and ckpt.is_file():
        state = torch.load(ckpt, map_location=device, weights_only=True)
        if state["log"]["train"] != asdict(config) and {**state["log"]["train"], "steps": 0} != {
                **asdict(config), "steps": 0}:
            raise ValueError(f"resume: {ckpt} is from another configuration ({state['log']['train']})")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        previous = state["log"]["train"]["steps"]
        log = {**state["log"], "train": asdict(config)}
        if previous != config.steps:  # a run lengthened (or shortened): its schedule changed at this step
            log.setdefault("resumed", []).append({"at_step": log["steps_done"], "from_steps": previous,
                                                  "to_steps": config.steps})
    autocast = torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=config.precision == "bf16")
    start = log["steps_done"]
    model.train()
    bar = tqdm(range(start, config.steps), initial=start, total=config.steps, disable=not progress,
               desc=f"training {config.size}", unit="step")
    began = time.perf_counter() - log["wall_s"]
    for step in bar:
        inputs, targets = (t.to(device) for t in batch(train_stream, step, config))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        with autocast:
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        log["steps_done"] = step + 1
        log["tokens_seen"] += inputs.numel()
        log["wall_s"] = time.perf_counter() - began
        log["losses"].append(round(loss.item(), 4))
        bar.set_postfix(loss=f"{loss.item():.3f}", tokens_per_s=f"{log['tokens_seen'] / log['wall_s']:.0f}")
        last = step + 1 == config.steps
        if (step + 1) % config.eval_every == 0 or last:
            model.eval()
            with autocast:
                val = perplexity.mean_loss(model, validation_stream, config.seq_len,
                                           max_windows=config.eval_windows, progress=False)
            model.train()
            log["validation"].append({"step": step + 1, "tokens": log["tokens_seen"], "loss": round(val, 4)})
        if (step + 1) % config.checkpoint_every == 0 or last:
            _save_checkpoint(ckpt, model, optimizer, step + 1, log)
    bar.close()
    log["tokens_per_s"] = log["tokens_seen"] / max(log["wall_s"], 1e-9)
    log["machine"] = {"cpu": _cpu_name(), "cores": os.cpu_count(), "device": device,
                      "torch": torch.__version__, "python": platform.python_version(),
                      "threads": torch.get_num_threads()}
    (out / "log.json").write_text(json.dumps(log, indent=1) + "\n")
    plot_loss_curve(log).savefig(out / "loss_curve.png", dpi=110, bbox_inches="tight")
    checkpoint.save(model.eval(), out / "weights")
    shutil.copy(TOKENIZER, out / "weights" / TOKENIZER.name)
    return log


def publish(run: Path | str, folder: Path | str) -> Path:
    """Copy a finished run's weights (config.json, model.safetensors, tokenizer.json), log.json (as
    training_log.json) and loss_curve.png into folder."""
    run, folder = Path(run), Path(folder)
    if not (run / "weights" / "model.safetensors").is_file():
        raise ValueError(f"run: {str(run)!r} holds no finished run (weights/model.safetensors)")
    folder.mkdir(parents=True, exist_ok=True)
    for path in (run / "weights").iterdir():
        shutil.copy(path, folder / path.name)
    shutil.copy(run / "log.json", folder / "training_log.json")
    shutil.copy(run / "loss_curve.png", folder / "loss_curve.png")
    return folder


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def plot_loss_curve(log: dict, ax=None):
    """Training loss (per step, and its running mean) and validation loss vs tokens seen, nats per token."""
    arguments.instance("log", log, dict)
    if not {"train", "losses", "validation", "parameters"} <= set(log):
        raise ValueError("log must be a training log (train.train's result or a log.json)")
    per_step = log["train"]["batch_size"] * log["train"]["seq_len"]
    title = f"Training the {log['train']['size']} model ({log['parameters'] / 1e6:.1f} M parameters)"
    ax = plots.axes("tokens seen (millions)", "loss (nats per token)", title=title, ax=ax)
    losses = torch.tensor(log["losses"], dtype=torch.float64)
    tokens = (torch.arange(1, len(losses) + 1) * per_step / 1e6).numpy()
    ax.plot(tokens, losses.numpy(), color=plots.color(0), alpha=0.3, linewidth=0.8, label="train (per step)")
    window = max(1, len(losses) // 50)
    smooth = torch.nn.functional.avg_pool1d(losses[None, None], window, 1).flatten().numpy()
    ax.plot(tokens[window - 1:], smooth, color=plots.color(0), label=f"train (mean of {window} steps)")
    if log["validation"]:
        ax.plot([v["tokens"] / 1e6 for v in log["validation"]], [v["loss"] for v in log["validation"]], "o-",
                color=plots.color(1), label="validation")
    return plots.finish(ax)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m hwopt.models.train", description=__doc__.split("\n")[0])
    defaults = TrainConfig()
    parser.add_argument("--size", choices=list(SIZES), default=defaults.size, help="model size (SIZES)")
    parser.add_argument("--out", default=None, help="output folder (default: runs/<size>)")
    parser.add_argument("--steps", type=int, default=defaults.steps, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="sequences per step")
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len, help="tokens per sequence")
    parser.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate")
    parser.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps,
                        help="linear warm-up steps")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of weights and batches")
    parser.add_argument("--device", default=defaults.device, help="cpu (default), cuda, mps or auto")
    parser.add_argument("--threads", type=int, default=defaults.threads,
                        help="CPU threads (default: torch's; 1 is faster on a CPU other work shares)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default=defaults.precision,
                        help="bf16: autocast matmuls (fast where the chip has native bf16: AMX, recent GPUs)")
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every,
                        help="steps between validations")
    parser.add_argument("--checkpoint-every", type=int, default=defaults.checkpoint_every,
                        help="steps between checkpoints")
    parser.add_argument("--resume", action="store_true", help="continue from <out>/checkpoint.pt if present")
    parser.add_argument("--publish", action="store_true",
                        help="copy the final weights, log and loss curve into hwopt/models/weights/<size>")
    parser.add_argument("--prepare", action="store_true",
                        help="rebuild tokenizer.json, validation.txt, calibration.txt and "
                             "corpus_manifest.json first")
    args = parser.parse_args(argv)
    if args.prepare:
        prepare()
    config = TrainConfig(size=args.size, steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len,
                         lr=args.lr, warmup_steps=args.warmup_steps, seed=args.seed,
                         device=args.device, threads=args.threads, precision=args.precision,
                         eval_every=args.eval_every,
                         checkpoint_every=args.checkpoint_every)
    out = Path(args.out or Path("runs") / args.size)
    log = train(config, out, resume=args.resume)
    if args.publish:
        publish(out, checkpoint.WEIGHTS_DIR / args.size)
    print(f"{config.size}: {log['parameters']:,} parameters, {log['tokens_seen']:,} tokens in "
          f"{log['wall_s']:.0f} s ({log['tokens_per_s']:.0f} tokens/s), "
          f"final validation loss {log['validation'][-1]['loss']:.3f}")
    return log


if __name__ == "__main__":
    main()
