"""Section 5 of the performance report: the course's trained LLM in every weight format, by validation
perplexity and top-1 agreement with fp32 (hwopt.experiments.llm_accuracy, the lessons' own measurement)."""

from __future__ import annotations

from hwopt.experiments import llm_accuracy

QUICK_WINDOWS = 4  # windows of 512 tokens in --quick mode
FULL_WINDOWS = None  # the whole validation text


def measure(quick: bool, model: str = "target") -> dict:
    """{"rows": one per format (precision, bytes_per_weight, perplexity, top1_agreement), "notes": [...]},
    measured live (cache=False) on the first windows of the validation text in quick mode, all of it else."""
    windows = QUICK_WINDOWS if quick else FULL_WINDOWS
    rows = llm_accuracy.table(model, llm_accuracy.PRECISIONS, seq_len=512, max_windows=windows, cache=False,
                              progress=False)
    keep = ("precision", "bytes_per_weight", "perplexity", "top1_agreement")
    return {"rows": [{k: r[k] for k in keep} for r in rows],
            "notes": [f"model '{model}', {llm_accuracy.describe_slice(rows)}; weights of every Linear and of "
                      "the tied embedding table in the format, norms in fp32; top-1 agreement: the share of "
                      "positions whose most likely next token is fp32's"]}
