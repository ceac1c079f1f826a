"""Speculative greedy decoding with the course's trained models (lesson 10): the trained draft, or prompt
lookup (n-gram drafting, no draft model), proposing tokens that the trained target verifies in one pass.

Every step: the drafter proposes up to draft_len tokens after the committed text; the target scores its
pending token and the proposals in one forward pass over its KV cache; the longest prefix of proposals equal
to the target's greedy choices is kept, plus the target's own next token; both caches are cut back to the
kept text (KVCache.truncate). Draft, target and verification all run in torch's kernels, so their times
compare like with like. The output equals the target's greedy decoding up to numerics: the verification
scores several tokens in one pass, whose float sums are ordered differently from one-token steps, and a
near-tie between two tokens can flip (checked_run says whether it did).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hwopt import arguments
from hwopt.cost import speculative
from hwopt.experiments import llm_accuracy
from hwopt.machine import bench
from hwopt.models import checkpoint, tokenizer
from hwopt.models.llama import Llama

__all__ = ["DRAFTERS", "Run", "prompt_lookup", "speculative_generate", "checked_run", "validation_prompt",
           "step_costs", "compare_generation"]

DRAFTERS = ("draft", "prompt-lookup")
DECODE_THREADS = 1  # as speculative_decoding's: a decode step is too small to split over threads well


@dataclass(frozen=True)
class Run:
    """One speculative generation: its tokens (1, prompt + new), and per target step the tokens proposed
    and the proposals accepted."""

    tokens: torch.Tensor
    proposed: tuple[int, ...]
    accepted: tuple[int, ...]
    draft_len: int
    new_tokens: int

    @property
    def target_steps(self) -> int:
        return len(self.accepted)

    @property
    def tokens_per_step(self) -> float:
        """New tokens per target step (the prefill's first token counted in the first step)."""
        return self.new_tokens / self.target_steps

    @property
    def acceptance(self) -> float:
        """Accepted proposals / proposals judged (a proposal after a rejection is never judged)."""
        judged = sum(min(p, a + 1) for p, a in zip(self.proposed, self.accepted, strict=True))
        return sum(self.accepted) / judged if judged else 0.0

    def acceptance_by_position(self) -> list[float | None]:
        """For each draft position i (0-based): the share of steps that judged a proposal there and accepted
        it (None where no step got that far)."""
        shares = []
        for i in range(self.draft_len):
            judged = [a > i for p, a in zip(self.proposed, self.accepted, strict=True) if p > i and a >= i]
            shares.append(sum(judged) / len(judged) if judged else None)
        return shares


def prompt_lookup(history: list[int], draft_len: int, ngram: int = 3) -> list[int]:
    """Prompt-lookup drafting: find the last earlier occurrence of the final n tokens of history (n = ngram,
    then shorter) and propose the draft_len tokens that followed it; [] if none occurs."""
    arguments.instance("history", history, list)
    history = [arguments.count(f"history[{i}]", t, "dimension", minimum=0) for i, t in enumerate(history)]
    draft_len = arguments.count("draft_len", draft_len, "tokens")
    ngram = arguments.count("ngram", ngram, "tokens")
    for n in range(min(ngram, len(history) - 1), 0, -1):
        tail = history[-n:]
        for start in range(len(history) - n - 1, -1, -1):
            if history[start:start + n] == tail:
                return history[start + n:start + n + draft_len]
    return []


def _check(target, draft, prompt, new_tokens, draft_len, drafter):
    arguments.instance("target", target, Llama)
    arguments.one_of("drafter", drafter, DRAFTERS)
    if drafter == "draft":
        arguments.instance("draft", draft, Llama)
        if draft.config.vocab_size != target.config.vocab_size:
            raise ValueError("draft and target must share one vocabulary (the same tokenizer)")
    arguments.instance("prompt", prompt, torch.Tensor)
    arguments.finite_array("prompt", prompt, ndim=2, integer=True, minimum=0,
                           maximum=target.config.vocab_size - 1)
    if prompt.shape[0] != 1:
        raise ValueError(f"prompt must hold one sequence (1, seq); got shape {tuple(prompt.shape)}")
    new_tokens = arguments.count("new_tokens", new_tokens, "tokens")
    draft_len = arguments.between("draft_len", draft_len, 1, speculative.MAX_DRAFT_LEN, integer=True)
    if prompt.shape[1] + new_tokens + draft_len + 1 > target.config.max_seq_len:
        raise ValueError(f"new_tokens: prompt ({prompt.shape[1]}) + new_tokens + draft_len + 1 must fit the "
                         f"model's {target.config.max_seq_len} positions")
    return new_tokens, draft_len


@torch.inference_mode()
def speculative_generate(target: Llama, prompt, new_tokens: int = 64, draft_len: int = 4,
                         drafter: str = "draft", draft: Llama | None = None, ngram: int = 3) -> Run:
    """Greedy decoding of new_tokens after prompt (1, seq) by target, drafted by `draft` (drafter 'draft') or
    by prompt_lookup(ngram) (drafter 'prompt-lookup'), draft_len proposals per target step."""
    new_tokens, draft_len = _check(target, draft, prompt, new_tokens, draft_len, drafter)
    ngram = arguments.count("ngram", ngram, "tokens")
    room = prompt.shape[1] + new_tokens + draft_len + 1
    target_cache = target.new_cache(1, room)
    pending = int(target(prompt, target_cache)[0, -1].argmax())
    text = prompt[0].tolist()
    draft_cache = draft.new_cache(1, room) if drafter == "draft" else None
    proposed, accepted = [], []
    device = prompt.device
    while len(text) - prompt.shape[1] < new_tokens:
        text.append(pending)  # the target's own choice: always kept
        if drafter == "draft":
            guesses = []
            feed = text[draft_cache.length:]
            for _ in range(draft_len):
                logits = draft(torch.tensor([feed], device=device), draft_cache)[0, -1]
                guesses.append(int(logits.argmax()))
                feed = guesses[-1:]
        else:
            guesses = prompt_lookup(text, draft_len, ngram)
        committed = target_cache.length
        scores = target(torch.tensor([[pending, *guesses]], device=device), target_cache)[0]
        choices = scores.argmax(-1).tolist()
        kept = 0
        while kept < len(guesses) and guesses[kept] == choices[kept]:
            kept += 1
        text.extend(guesses[:kept])
        pending = choices[kept]
        target_cache.truncate(committed + 1 + kept)
        if draft_cache is not None:
            draft_cache.truncate(min(draft_cache.length, len(text)))
        proposed.append(len(guesses))
        accepted.append(kept)
    out = torch.tensor([text[:prompt.shape[1] + new_tokens]], device=device)
    return Run(out, tuple(proposed), tuple(accepted), draft_len, new_tokens)


def checked_run(target: Llama, prompt, new_tokens: int = 64, draft_len: int = 4, drafter: str = "draft",
                draft: Llama | None = None) -> tuple[Run, int]:
    """(speculative_generate's Run, the number of leading new tokens equal to target.generate's greedy
    output: new_tokens when they all agree)."""
    run = speculative_generate(target, prompt, new_tokens, draft_len, drafter, draft)
    plain = target.generate(prompt, new_tokens)[0, prompt.shape[1]:]
    mine = run.tokens[0, prompt.shape[1]:]
    differ = (plain != mine).nonzero()
    return run, int(differ[0, 0]) if len(differ) else new_tokens


def validation_prompt(model="target", prompt_len: int = 128, offset: int = 0) -> torch.Tensor:
    """(1, prompt_len) tokens of the model's validation text from token `offset`: code it never trained on."""
    prompt_len = arguments.count("prompt_len", prompt_len, "tokens")
    offset = arguments.count("offset", offset, "tokens", minimum=0)
    folder = checkpoint.resolve(model)
    tok = tokenizer.load(folder / "tokenizer.json")
    stream = llm_accuracy.evaluation_stream(folder, tok, "validation")
    if offset + prompt_len > len(stream):
        raise ValueError(f"offset: {offset} + prompt_len {prompt_len} exceeds the text's {len(stream)} "
                         "tokens")
    return torch.as_tensor(stream[offset:offset + prompt_len]).view(1, -1)


def step_costs(target: Llama, draft: Llama, context_len: int = 128, draft_len: int = 4,
               repeats: int = 7) -> dict[str, bench.Measurement]:
    """Interleaved times of one draft step, one target step and one target pass over draft_len + 1 tokens (the
    verification), each after context_len cached tokens, on DECODE_THREADS threads: all in torch."""
    arguments.instance("target", target, Llama)
    arguments.instance("draft", draft, Llama)
    context_len = arguments.count("context_len", context_len, "tokens")
    draft_len = arguments.between("draft_len", draft_len, 1, speculative.MAX_DRAFT_LEN, integer=True)
    repeats = arguments.count("repeats", repeats, "repeats")
    if context_len + draft_len + 1 > min(target.config.max_seq_len, draft.config.max_seq_len):
        raise ValueError("context_len: context_len + draft_len + 1 must fit both models' positions")
    tokens = torch.zeros(1, context_len, dtype=torch.long)

    def step(net, width):
        cache = net.new_cache(1, context_len + width)
        with torch.inference_mode():
            net(tokens, cache)

        def run():
            with torch.inference_mode():
                net(torch.zeros(1, width, dtype=torch.long), cache)
            cache.truncate(context_len)
        return run

    fns = {"draft step": step(draft, 1), "target step": step(target, 1),
           f"target verifies {draft_len + 1} tokens": step(target, draft_len + 1)}
    with bench.threads(DECODE_THREADS):
        return bench.compare(fns, warmup=2, repeats=repeats)


def compare_generation(target: Llama, draft: Llama, prompt, new_tokens: int = 64, draft_len: int = 4,
                       repeats: int = 3) -> dict[str, bench.Measurement]:
    """Interleaved times of one generation of new_tokens: target greedy, speculative with the draft,
    speculative with prompt lookup (DECODE_THREADS threads, all in torch)."""
    new_tokens, draft_len = _check(target, draft, prompt, new_tokens, draft_len, "draft")
    repeats = arguments.count("repeats", repeats, "repeats")
    fns = {"target greedy": lambda: target.generate(prompt, new_tokens),
           "speculative, trained draft": lambda: speculative_generate(target, prompt, new_tokens, draft_len,
                                                                      "draft", draft),
           "speculative, prompt lookup": lambda: speculative_generate(target, prompt, new_tokens, draft_len,
                                                                      "prompt-lookup")}
    with bench.threads(DECODE_THREADS):
        return bench.compare(fns, warmup=1, repeats=repeats, number=1)
