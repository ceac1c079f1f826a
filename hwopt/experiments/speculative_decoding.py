"""Speculative greedy decoding with two tiny decoders (lesson 10): real acceptance, real step costs.

The draft is the target's first layers, sharing its embeddings, final norm and output head (layer-skip
self-speculation, as in LayerSkip and Draft & Verify). The target's remaining layers add to the residual
stream what the draft lacks; `difference` scales those contributions (their attention and MLP output
projections): 0 makes the target compute exactly what the draft does, 1 leaves its random weights as
drawn. With random weights this dial stands in for what training gives a real draft (distilled or trained to
agree with the target); the acceptance rate is then measured, never assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hwopt import arguments
from hwopt.cost import speculative
from hwopt.machine import bench
from hwopt.models import tiny_decoder as td

# CPU threads for the timed decoding: a decode step is too small to split well, and threads that spin while
# another program holds the cores slow it many times over.
DECODE_THREADS = 1


def make_draft_and_target(vocab_size: int = 4096, d_model: int = 512, draft_layers: int = 1,
                          extra_layers: int = 7, n_heads: int = 8, difference: float = 0.3, seed: int = 0,
                          device="cpu", kernel: str = "auto") -> tuple[td.TinyDecoder, td.TinyDecoder]:
    """(draft, target): target has draft_layers + extra_layers blocks; the draft is its first draft_layers,
    sharing embeddings, norm and head; the extra blocks' residual contributions are scaled by `difference`.
    kernel (td.KERNELS) runs both models' one-token steps: "torch" puts the draft step, the target step and
    the verification of several tokens in one kernel stack."""
    arguments.count("draft_layers", draft_layers, "layers")
    arguments.count("extra_layers", extra_layers, "layers")
    difference = arguments.positive("difference", difference, allow_zero=True, maximum=10.0)
    arguments.one_of("kernel", kernel, td.KERNELS)
    target = td.make_tiny_decoder(vocab_size, d_model, draft_layers + extra_layers, n_heads, seed, device,
                                  kernel)
    with torch.no_grad():
        for block in target.blocks[draft_layers:]:
            for linear in (block.proj, block.down):  # what the block adds to the residual stream
                linear.weight.mul_(difference)
                linear.bias.mul_(difference)
    draft = td.TinyDecoder(vocab_size, d_model, 1, n_heads, target.max_len, kernel=kernel).eval()
    draft.tok, draft.pos, draft.norm, draft.head = target.tok, target.pos, target.norm, target.head
    draft.blocks = nn.ModuleList(target.blocks[:draft_layers])
    return draft.to(target.head.weight.device), target


def _check_pair(draft, target, prompt, new_tokens: int, draft_len: int) -> None:
    arguments.instance("draft", draft, td.TinyDecoder)
    arguments.instance("target", target, td.TinyDecoder)
    if draft.tok.num_embeddings != target.tok.num_embeddings:
        raise ValueError("draft and target must share one vocabulary (the same vocab_size)")
    arguments.instance("prompt", prompt, torch.Tensor)
    vocab = target.tok.num_embeddings
    arguments.finite_array("prompt", prompt, ndim=2, integer=True, minimum=0, maximum=vocab - 1)
    if prompt.shape[0] != 1:
        raise ValueError(f"prompt must hold one sequence (batch 1); got shape {tuple(prompt.shape)}")
    arguments.count("new_tokens", new_tokens, "tokens")
    arguments.between("draft_len", draft_len, 1, speculative.MAX_DRAFT_LEN, integer=True)
    longest = prompt.shape[1] + new_tokens + draft_len
    if longest > min(draft.max_len, target.max_len):
        raise ValueError(f"new_tokens must leave room for a draft: prompt + new_tokens + draft_len = "
                         f"{longest} exceeds max_len {min(draft.max_len, target.max_len)}")


@dataclass(frozen=True)
class SpeculativeRun:
    """One speculative generation: the tokens (1, prompt + new), and per target step how many of the
    draft_len proposals the target accepted."""

    tokens: torch.Tensor
    accepted_per_step: tuple[int, ...]
    draft_len: int

    @property
    def target_steps(self) -> int:
        """Target forward passes after the prompt (one verification each)."""
        return len(self.accepted_per_step)

    @property
    def tokens_per_step(self) -> float:
        """Measured tokens per target step: accepted proposals + the target's own token, averaged."""
        return sum(n + 1 for n in self.accepted_per_step) / self.target_steps

    @property
    def acceptance(self) -> float:
        """The acceptance rate a estimated from these steps (speculative.acceptance_rate)."""
        return speculative.acceptance_rate(self.accepted_per_step, self.draft_len)


@torch.inference_mode()
def speculative_generate(draft: td.TinyDecoder, target: td.TinyDecoder, prompt, new_tokens: int,
                         draft_len: int = 4) -> SpeculativeRun:
    """Greedy speculative decoding: the draft proposes draft_len tokens one by one, the target scores them all
    in one pass over its KV cache and keeps the longest prefix matching its own greedy choice, plus its next
    token. The result equals td.generate(target, prompt, new_tokens)."""
    _check_pair(draft, target, prompt, new_tokens, draft_len)
    goal = prompt.shape[1] + new_tokens
    logits, target_cache = target(prompt)
    tokens = torch.cat([prompt, logits[:, -1:].argmax(-1)], dim=1)  # the target's first token: no draft yet
    _, draft_cache = draft(prompt)
    accepted = []
    while tokens.shape[1] < goal:
        length = tokens.shape[1]
        done = draft_cache[0][0].shape[2]  # the draft may lag by the token it did not need to see
        proposal = tokens[:, done:]
        for _ in range(draft_len):
            out, draft_cache = draft(proposal, draft_cache, start=draft_cache[0][0].shape[2])
            proposal = out[:, -1:].argmax(-1)
            tokens = torch.cat([tokens, proposal], dim=1)
        checked, target_cache = target(tokens[:, length - 1:], target_cache, start=length - 1)
        choice = checked.argmax(-1)  # choice[:, i]: the target's greedy token after tokens[length - 1 + i]
        agree = (choice[0, :draft_len] == tokens[0, length:]).int()
        n = int(agree.cumprod(0).sum())
        accepted.append(n)
        tokens = torch.cat([tokens[:, :length + n], choice[:, n:n + 1]], dim=1)
        target_cache = td.truncate_caches(target_cache, length + n)
        draft_cache = td.truncate_caches(draft_cache, min(length + n, draft_cache[0][0].shape[2]))
    return SpeculativeRun(tokens[:, :goal], tuple(accepted), draft_len)


def checked_run(draft: td.TinyDecoder, target: td.TinyDecoder, prompt, new_tokens: int = 32,
                draft_len: int = 4) -> tuple[SpeculativeRun, bool]:
    """(speculative_generate's run, whether its tokens equal td.generate(target, ...)), on DECODE_THREADS."""
    with bench.threads(DECODE_THREADS):
        run = speculative_generate(draft, target, prompt, new_tokens, draft_len)
        return run, bool(torch.equal(run.tokens, td.generate(target, prompt, new_tokens)))


def random_prompt(vocab_size: int, prompt_len: int = 8, seed: int = 0, device="cpu") -> torch.Tensor:
    """(1, prompt_len) random token ids below vocab_size, from a seeded generator."""
    vocab_size = arguments.count("vocab_size", vocab_size, "dimension")
    prompt_len = arguments.count("prompt_len", prompt_len, "tokens")
    generator = torch.Generator().manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    return torch.randint(0, vocab_size, (1, prompt_len), generator=generator).to(bench.resolve_device(device))


def acceptance_by_difference(differences, draft_len: int = 4, new_tokens: int = 32, **model_kwargs) -> dict:
    """{difference: SpeculativeRun}: the measured acceptance as the target moves away from the draft
    (model_kwargs go to make_draft_and_target)."""
    values = arguments.finite_array("differences", differences, ndim=1, minimum=0, maximum=10.0)
    arguments.between("draft_len", draft_len, 1, speculative.MAX_DRAFT_LEN, integer=True)
    arguments.count("new_tokens", new_tokens, "tokens")
    runs = {}
    with bench.threads(DECODE_THREADS):
        for d in values.tolist():
            draft, target = make_draft_and_target(difference=d, **model_kwargs)
            prompt = random_prompt(target.tok.num_embeddings, device=target.head.weight.device)
            runs[d] = speculative_generate(draft, target, prompt, new_tokens, draft_len)
    return runs


@dataclass(frozen=True)
class StepCosts:
    """Interleaved timings of one draft step, one target step and one target verification of
    draft_len + 1 tokens, all at the same context length."""

    draft: bench.Measurement
    target: bench.Measurement
    verify: bench.Measurement
    draft_len: int

    @property
    def cost_ratio(self) -> float:
        """c = draft step time / target step time (medians)."""
        return self.draft.median_s / self.target.median_s

    @property
    def verify_ratio(self) -> float:
        """Target verification of draft_len + 1 tokens / one target step (1 where weights dominate)."""
        return self.verify.median_s / self.target.median_s


def measure_step_costs(draft: td.TinyDecoder, target: td.TinyDecoder, draft_len: int = 4,
                       context_len: int = 32, device="cpu", repeats: int = 9) -> StepCosts:
    """Time a draft step, a target step and a verification of draft_len + 1 tokens, interleaved
    (on DECODE_THREADS CPU threads)."""
    arguments.instance("draft", draft, td.TinyDecoder)
    arguments.instance("target", target, td.TinyDecoder)
    context_len = arguments.count("context_len", context_len, "tokens")
    device = bench.resolve_device(device)
    prompt = random_prompt(target.tok.num_embeddings, context_len, device=device)
    _check_pair(draft, target, prompt, 1, draft_len)
    arguments.count("repeats", repeats, "repeats")
    with torch.inference_mode():
        _, draft_cache = draft(prompt)
        _, target_cache = target(prompt)
    one = prompt[:, -1:]
    several = prompt[:, -1:].repeat(1, draft_len + 1)

    def run(model, tokens, caches):
        def step():
            with torch.inference_mode():
                return model(tokens, caches, start=context_len)[0]
        return step

    fns = {"draft step": run(draft, one, draft_cache), "target step": run(target, one, target_cache),
           f"target verifies {draft_len + 1} tokens": run(target, several, target_cache)}
    with bench.threads(DECODE_THREADS):
        m = bench.compare(fns, device=device, warmup=2, repeats=repeats)
    return StepCosts(*m.values(), draft_len=draft_len)


def compare_generation(draft: td.TinyDecoder, target: td.TinyDecoder, prompt, new_tokens: int = 32,
                       draft_len: int = 4, device="cpu", repeats: int = 5) -> dict[str, bench.Measurement]:
    """Interleaved timings of plain greedy decoding with the target and speculative decoding (seconds per
    generation of new_tokens, on DECODE_THREADS CPU threads): {"target greedy": ..., "speculative": ...}."""
    _check_pair(draft, target, prompt, new_tokens, draft_len)
    device = bench.resolve_device(device)
    arguments.count("repeats", repeats, "repeats")
    fns = {"target greedy": lambda: td.generate(target, prompt, new_tokens),
           "speculative": lambda: speculative_generate(draft, target, prompt, new_tokens, draft_len)}
    with bench.threads(DECODE_THREADS):
        return bench.compare(fns, device=device, warmup=1, repeats=repeats, number=1)


def predicted_over_measured(run: SpeculativeRun, costs: StepCosts, timings: dict) -> dict:
    """{"predicted": E / (1 + k c), "predicted_with_verify": E / (v + k c), "measured": plain / speculative
    time}: E from the measured acceptance, c and v from measure_step_costs, times from compare_generation."""
    arguments.instance("run", run, SpeculativeRun)
    arguments.instance("costs", costs, StepCosts)
    arguments.instance("timings", timings, dict)
    if set(timings) != {"target greedy", "speculative"}:
        raise ValueError("timings must be compare_generation's {'target greedy', 'speculative'} measurements")
    k, a, c = run.draft_len, run.acceptance, costs.cost_ratio
    return {"predicted": speculative.predicted_speedup(a, k, c),
            "predicted_with_verify": speculative.predicted_speedup(a, k, c, costs.verify_ratio),
            "measured": bench.speedup(timings["target greedy"], timings["speculative"])}


def speedup_report(run: SpeculativeRun, costs: StepCosts, timings: dict) -> str:
    """Predicted speedup (from the measured acceptance and cost ratio) against the measured one, explained."""
    s = predicted_over_measured(run, costs, timings)
    k, a, c, v = run.draft_len, run.acceptance, costs.cost_ratio, costs.verify_ratio
    predicted, measured = s["predicted"], s["measured"]
    lines = [f"measured acceptance a = {a:.2f} over {run.target_steps} target steps; tokens per step: "
             f"formula {speculative.expected_tokens_per_step(a, k):.2f}, measured {run.tokens_per_step:.2f}",
             f"c = draft / target step = {c:.2f}; predicted speedup E / (1 + k c) = {predicted:.2f}x, "
             f"measured {measured:.2f}x: predicted / measured = {predicted / measured:.2f}",
             f"verifying {k + 1} tokens cost v = {v:.2f} target steps here; E / (v + k c) = "
             f"{s['predicted_with_verify']:.2f}x: predicted / measured = "
             f"{s['predicted_with_verify'] / measured:.2f}"]
    plain, spec = timings["target greedy"].median_ms, timings["speculative"].median_ms
    lines.append(f"one generation took {plain:,.1f} ms plain and {spec:,.1f} ms speculative; the prediction "
                 "leaves out the loop's own work "
                 "(concatenating tokens, cutting the caches back) and the noise of a shared machine, "
                 f"and is {abs(s['predicted_with_verify'] / measured - 1):.0%} from the measurement with v.")
    return "\n".join(lines)
