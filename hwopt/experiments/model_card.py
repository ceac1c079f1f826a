"""The model card of the course's models (hwopt/models/weights/MODEL_CARD.md), written from measurements:
`python -m hwopt.experiments.model_card` reads each model's training log, measures validation perplexity (and
the target's in every format of llm_accuracy.PRECISIONS), the unigram baseline, and greedy completions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from hwopt import arguments
from hwopt.experiments import llm_accuracy
from hwopt.models import checkpoint, corpus, perplexity, tokenizer

__all__ = ["PROMPTS", "measure", "render", "main"]

# Each prompt ends inside a line: the tokenizer joins a newline with the next line's indentation, so a prompt
# ending in a bare newline leaves a token boundary the models rarely saw in training.
PROMPTS = ('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if',
           'import os\n\n\ndef list_python_files(folder):\n'
           '    """Return the .py files in folder."""\n    paths =',
           'class Stack:\n    """A last-in, first-out list."""\n\n'
           '    def __init__(self):\n        self')
CARD = checkpoint.WEIGHTS_DIR / "MODEL_CARD.md"


def measure(completion_tokens: int = 48, progress: bool = True) -> dict:
    """Everything the card states: per model its training log, parameters and perplexity; the format table
    of the target; the unigram baseline; greedy completions of PROMPTS."""
    completion_tokens = arguments.count("completion_tokens", completion_tokens, "tokens")
    progress = arguments.boolean("progress", progress)
    tok = tokenizer.load(checkpoint.WEIGHTS_DIR / "tokenizer.json")
    train_docs, _ = corpus.split(corpus.documents())
    train_stream = tokenizer.encode_documents(tok, [d.text for d in train_docs])
    texts = corpus.read_validation(checkpoint.WEIGHTS_DIR / "validation.txt")
    validation = tokenizer.encode_documents(tok, texts)
    unigram = perplexity.unigram_perplexity(train_stream, validation, tok.get_vocab_size())
    facts = {"unigram_perplexity": unigram, "validation_tokens": len(validation), "models": {}}
    manifest = json.loads((checkpoint.WEIGHTS_DIR / "corpus_manifest.json").read_text())
    facts["corpus"] = {split: {k: manifest[split][k] for k in ("files", "bytes")}
                       for split in ("train", "validation")}
    facts["corpus"].update(python=manifest["python"], validation_modules=manifest["validation"]["modules"])
    for name in checkpoint.MODELS:
        model = checkpoint.load(name)
        log = json.loads((checkpoint.WEIGHTS_DIR / name / "training_log.json").read_text())
        fp32 = llm_accuracy.evaluate(name, "fp32", progress=progress)
        samples = {}
        for prompt in PROMPTS:
            ids = torch.tensor([tok.encode(prompt).ids])
            completion = model.generate(ids, completion_tokens)[0, ids.shape[1]:]
            samples[prompt] = tok.decode(completion.tolist())
        facts["models"][name] = {"log": {k: v for k, v in log.items() if k != "losses"},
                                 "parameters": model.parameter_count(),
                                 "config": model.config.to_dict(), "perplexity": fp32["perplexity"],
                                 "seq_len": fp32["seq_len"], "samples": samples}
    facts["formats"] = llm_accuracy.table("target", progress=progress)
    weights = [p.detach() for p in checkpoint.load("target").parameters()]
    rounded = sum(int((w.half().float() != w).sum()) for w in weights)
    facts["fp16_rounded_share"] = rounded / sum(w.numel() for w in weights)
    return facts


def _row(label: str, values) -> str:
    return f"| {label} | " + " | ".join(str(v) for v in values) + " |"


def render(facts: dict) -> str:
    """The card's Markdown from measure()'s facts."""
    arguments.instance("facts", facts, dict)
    if not {"models", "corpus", "formats", "unigram_perplexity", "validation_tokens",
            "fp16_rounded_share"} <= set(facts):
        raise ValueError("facts must be model_card.measure()'s result (or the MODEL_CARD.json it wrote)")
    models = facts["models"]
    names = list(models)
    c = facts["corpus"]
    logs = [models[n]["log"] for n in names]
    lines = [
        "# The course's models: small code LLMs trained on Python's standard library",
        "",
        "Two LLaMA-architecture decoders (RMSNorm, RoPE, grouped-query attention, SwiGLU, tied embeddings) "
        "trained by the course on the same tokens: `target`, the model of the LLM lessons, and `draft`, "
        "its speculative-decoding draft. Each folder is in Hugging Face's layout (config.json, "
        "model.safetensors in bf16, tokenizer.json): `hwopt.models.checkpoint.load(name)` and transformers' "
        "`LlamaForCausalLM.from_pretrained(folder)` both read it. Every number below was measured by "
        "`python -m hwopt.experiments.model_card`, which wrote this file.",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        _row("parameters (tied head counted once)",
             [f"{models[n]['parameters'] / 1e6:.2f} M" for n in names]),
        _row("layers x width, heads / KV heads, SwiGLU width",
             [f"{m['config']['n_layers']} x {m['config']['d_model']}, {m['config']['n_heads']} / "
              f"{m['config']['n_kv_heads']}, {m['config']['hidden']}" for m in models.values()]),
        _row("context (tokens)", [m["config"]["max_seq_len"] for m in models.values()]),
        _row("training tokens", [f"{g['tokens_seen'] / 1e6:.2f} M ({g['steps_done']} steps of "
                                 f"{g['train']['batch_size']} x {g['train']['seq_len']}; "
                                 f"{g['tokens_seen'] / g['train_tokens_available']:.2f} epochs)"
                                 for g in logs]),
        _row("wall time", [f"{g['wall_s'] / 60:.0f} min" for g in logs]),
        _row("training speed", [f"{g['tokens_per_s']:,.0f} tokens/s" for g in logs]),
        _row("validation perplexity (fp32)", [f"{models[n]['perplexity']:.3f}" for n in names]),
        _row("unigram baseline perplexity", [f"{facts['unigram_perplexity']:.1f}"] * len(names)),
        "",
        "Validation perplexity is exp(mean next-token cross-entropy) over the "
        f"{facts['validation_tokens']:,} "
        f"tokens of the validation text in non-overlapping windows of {models[names[0]]['seq_len']} tokens. "
        "The unigram baseline predicts every token by its frequency in the train split, ignoring context: "
        "the gap between the two is what the models learnt from context.",
        "",
        "## Data and licence",
        "",
        f"The source of Python {c['python']}'s standard library: every `.py` file except tests (folders "
        "`test`, `tests`, `idle_test`), installed packages and generated files (codec tables, pydoc "
        "topics), "
        f"split by top-level module: train {c['train']['files']} files, {c['train']['bytes'] / 1e6:.1f} MB; "
        f"validation {c['validation']['files']} files, {c['validation']['bytes'] / 1e3:.0f} kB "
        f"(modules {', '.join(c['validation_modules'])}). `corpus_manifest.json` lists every file with its "
        "size and sha256. The text is under the PSF License Agreement (Python Software Foundation); "
        "`validation.txt` is a verbatim copy of those files and keeps that licence. The tokenizer "
        "(byte-level BPE, 4096 tokens) was trained on the train split. The weights, tokenizer and this card "
        "are course data under CC BY 4.0 (LICENSE-content.md).",
        "",
        "## Training",
        "",
    ]
    for n, g in zip(names, logs, strict=True):
        m = g["machine"]
        t = g["train"]
        resumed = g.get("resumed", [])
        first_steps = resumed[0]["from_steps"] if resumed else t["steps"]
        command = (f"`python -m hwopt.models.train --size {n} --steps {first_steps} --threads {m['threads']} "
                   f"--precision {t['precision']}`")
        for r in resumed:
            command += (f", then `--steps {r['to_steps']} --resume` (from step {r['at_step']} the learning "
                        f"rate follows the {r['to_steps']}-step schedule, back up from where the "
                        f"{r['from_steps']}-step one ended)")
        lines.append(f"- `{n}`: {command}, `--publish`, on {m['cpu']} "
                     f"({m['cores']} cores shared with other work, torch {m['torch']}, {m['threads']} "
                     f"thread); AdamW (lr {t['lr']:g}, warm-up {t['warmup_steps']} steps, cosine to a tenth, "
                     f"weight decay {t['weight_decay']:g}), seed {t['seed']}, matmuls in bf16 (autocast) "
                     "where `--precision bf16`.")
    lines += ["", "The two trainings ran side by side, one thread each; the loss curves are each "
              "folder's `loss_curve.png`.", "", "## Accuracy in each format (target)", "",
              "Weights stored in the format, computed in fp32 (weight-only), every matrix including the "
              "tied embedding table, norms in fp32; top-1 agreement is the share of positions where the "
              "format's most likely next token is fp32's. `hwopt.experiments.llm_accuracy.table('target')` "
              "measures it. The shipped weights are bf16 values, so bf16 stores them exactly and fp16 "
              f"rounds only the {facts['fp16_rounded_share']:.3%} too small for its range. Each row is a "
              "deterministic computation (no timing); another machine's BLAS may move its last digits.",
              "", "| format | bytes per weight (scales included) | validation perplexity | top-1 agreement |",
              "|---|---|---|---|"]
    for row in facts["formats"]:
        lines.append(f"| {row['precision']} | {row['bytes_per_weight']:.4f} | {row['perplexity']:.3f} | "
                     f"{row['top1_agreement']:.2%} |")
    lines += ["", "## Greedy completions", "",
              "Each prompt ends inside a line: the tokenizer joins a newline with the next line's "
              "indentation, so a prompt that ends in a bare newline asks for what follows a token the models "
              "rarely saw there.", ""]
    for prompt in PROMPTS:
        for n in names:
            completion = prompt + models[n]["samples"][prompt]
            lines += [f"`{n}`, prompt `{prompt!r}`:", "", "```python", completion, "```", ""]
    lines += [
        "## What it cannot do",
        "",
        "- It writes code that looks like the standard library: names, indentation, docstrings, idioms. It "
        "does not reason, follow instructions or answer questions, and its code is rarely correct beyond a "
        "few lines; it repeats itself in long greedy completions.",
        "- It has seen Python only, of one version's standard library; other languages, third-party "
        "libraries and prose are out of its distribution.",
        f"- Its context is {models[names[0]]['config']['max_seq_len']} tokens; RoPE lets it run longer, "
        "but it was never trained there.",
        "- Trained for about an hour on two CPU cores, it is far from converged: its numbers are for "
        "comparing formats and methods on a model whose weights were learnt, not for judging code LLMs.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m hwopt.experiments.model_card", description=__doc__)
    parser.add_argument("--out", default=str(CARD), help="where to write the card")
    args = parser.parse_args(argv)
    facts = measure()
    out = Path(args.out)
    out.write_text(render(facts), encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    main()
