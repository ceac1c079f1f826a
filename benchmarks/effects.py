"""Section 2: the lessons' headline effects, each a ratio of the lesson modules' own code in one run.

Every effect is a small `setup_*` function that builds zero-argument callables from the toolkit (never a copy
of what a lesson measures); `measure` times them with machine.bench.compare and turns them into report rows.
"""

from __future__ import annotations

import functools
import importlib
import tempfile
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from benchmarks import fidelity, native, parallelism, report
from hwopt import formats
from hwopt.kernels import lowbit_gemv
from hwopt.machine import bench, probe


class Unavailable(RuntimeError):
    """The lesson code this effect needs is not in the toolkit (yet) or cannot run here; message says why."""


@dataclass
class Comparison:
    """One report row: the fastest of `candidates` vs the fastest of `baselines` (labels of Setup.fns)."""

    name: str
    goal: float | tuple[float, float] | None  # a lower bound, or a band (low, high) for predicted / measured
    baselines: list[str]
    candidates: list[str]
    note: str = ""
    predicted: float | None = None  # set: the row is predicted / measured (baseline / candidate) instead


@dataclass
class AgainstStream:
    """One report row: bytes moved per second by the best of `candidates` / STREAM Triad, round by round.

    unit 'GB/s': both sides as bytes per second; 'tokens/s': the candidate's items per second against the
    bound that STREAM's rate sets (STREAM bytes/s / bytes per item) - the same ratio, read as tokens.
    """

    name: str
    goal: float | None
    candidates: list[str]
    note: str = ""
    unit: str = "GB/s"
    in_cache: str = ""  # why the weights partly fit in the cache: then no verdict on memory (note says it)


@dataclass
class Setup:
    """Callables to time in one interleaved run, and the comparisons (report rows) drawn from it."""

    fns: dict[str, Callable[[], object]]
    comparisons: list[Comparison]
    items: dict[str, int] = field(default_factory=dict)  # items per call (per-item time = time / items)
    settle_s: float = 0.0  # untimed run of each callable before each repeat (hwopt.machine.bench.compare)
    # Rows against STREAM: then each repeat is a round of STREAM Triad followed by every callable, and
    # bytes_moved[label] says what one call moves (weights, scales, activations; KV for the decoder).
    against_stream: list[AgainstStream] = field(default_factory=list)
    bytes_moved: dict[str, float] = field(default_factory=dict)


def need(module: str, *names: str):
    """Import hwopt.<layer>.<module>, check it has `names`; Unavailable naming what is missing otherwise."""
    try:
        mod = importlib.import_module(f"hwopt.{module}")
    except ImportError as exc:
        raise Unavailable(f"hwopt.{module} is not in the toolkit ({exc})") from exc
    missing = [n for n in names if not hasattr(mod, n)]
    if missing:
        raise Unavailable(f"hwopt.{module} has no {', '.join(missing)}")
    return mod


def _llc_bytes() -> int:
    return probe.last_level_cache_bytes() or 32 * 2**20


# ---------------------------------------------------------------- the effects

DECODE_VS_STREAM = [("fp32 decode bytes/s / STREAM", 0.85), ("int8 decode bytes/s / STREAM", 0.85),
                    ("int4 decode bytes/s / STREAM", 0.85)]
DECODE = [("int8 decode GEMV / best fp32", 2.5), ("int4 decode GEMV / best fp32", 3.5), *DECODE_VS_STREAM]
TINY_DECODER = [("tiny decoder tokens/s / bound", 0.75),
                ("tiny decoder with torch GEMVs tokens/s / bound", None),
                ("tiny decoder's GEMVs alone bytes/s / STREAM", None)]
BATCHING = [("best batched throughput / batch 1", 10.0)]
ORT = [("ORT / torch eager at batch 1", None)]
FUSION = [("fused / unfused elementwise chain", 2.0)]
PROFILING = [("profiling lesson's fix / slow pipeline", 2.0)]
# A prefill reuses each weight for every prompt token, a decode step for one: per token, the prefill should
# run at least 10x the decode step's FLOP/s on any machine whose ridge point is above ~5 FLOP/byte.
PHASES = [("prefill / decode-step arithmetic intensity", 10.0)]
KV_BOUND = [("KV-bound decode slowdown predicted / measured", (0.7, 1.3))]
ATTENTION = [("SDPA / naive attention at 4k tokens", 2.0)]
SPECULATIVE = [("speculative speedup predicted / measured", (0.7, 1.3))]
SPLIT_BLOCK = parallelism.SPLIT_BLOCK


DECODE_D_MODEL = 4096  # the width of lesson 2's decode stack


def setup_decode(quick: bool) -> Setup:
    """Lesson 2: the decode step's int8 and int4 paths (ONNX Runtime, C kernel) vs the best fp32 path."""
    decode = need("experiments.decode", "make_stack", "layers_for_working_set", "decode_paths", "check_paths",
                  "SETTLE_S", "CACHE_MARGIN")
    d_model = DECODE_D_MODEL
    # sized as lesson 2 sizes it
    n_layers = min(8, decode.layers_for_working_set(d_model, decode.CACHE_MARGIN * _llc_bytes()))
    stack = decode.make_stack(d_model, n_layers)
    paths = decode.decode_paths(stack, "cpu")
    decode.check_paths(paths, stack)  # every path agrees with the fp32 oracle within the lesson's tolerance
    by = {prec: [k for k, p in paths.items() if p.precision == prec] for prec in ("fp32", "int8", "int4")}
    note = (f"decode: {n_layers} layers of {d_model}x{d_model}, {stack.weight_bytes('fp32') / 1e6:,.0f} MB "
            f"fp32 weights; fastest of {', '.join(by['int8'] + by['int4'])} vs fastest of "
            f"{', '.join(by['fp32'])}; each runs untimed for {decode.SETTLE_S:g} s before each repeat")
    rows = [Comparison(name, goal, by["fp32"], by[prec], note)
            for (name, goal), prec in zip(DECODE[:2], ("int8", "int4"), strict=True)]
    counted = ("bytes moved per step = weights + their scales + every layer's fp32 input and output; a "
               "read-only stream can pass 1.0, up to 4/3: STREAM counts 3 arrays, but writing `a` first "
               "reads it into the cache (write-allocate)")
    stream_note = f"decode: {n_layers} layers of {d_model}x{d_model}; {counted}"
    vs_stream, moved_from_memory = [], {}
    for (name, goal), prec in zip(DECODE_VS_STREAM, ("fp32", "int8", "int4"), strict=True):
        cached = in_cache(min(paths[k].weight_bytes for k in by[prec]), decode.CACHE_MARGIN)
        big = from_memory_path(decode, d_model, prec) if cached else None
        if big is None:  # the lesson's stack streams from memory (or no C kernel: the row says why not)
            vs_stream.append(AgainstStream(name, goal, by[prec], stream_note, in_cache=cached))
            continue
        path, moved_from_memory[path.label] = big
        paths[path.label] = path
        vs_stream.append(AgainstStream(name, goal, [path.label], (
            f"the lesson's copies fit in this last-level cache ({_llc_bytes() / 2**20:,.0f} MiB), so this "
            f"row times the {path.label} of {d_model}x{d_model} ({path.weight_bytes / 1e6:,.0f} MB, "
            f"{FROM_MEMORY_MULTIPLE}x the cache) from memory; {counted}")))
    baseline = avx2_paths(stack, paths)  # where this CPU runs a wider path: the one AVX2-only CPUs run
    if baseline:
        decode.check_paths(baseline, stack)
    paths |= baseline
    vs_stream += [AgainstStream(f"{p.precision} decode, C kernel's AVX2 path, bytes/s / STREAM", None,
                                [label], "for information: the C kernel built for AVX2 + FMA only, as on an "
                                "AVX2-only CPU, on this CPU's memory",
                                in_cache=in_cache(p.weight_bytes, decode.CACHE_MARGIN))
                  for label, p in baseline.items()]
    moved = {k: p.weight_bytes + stack.activation_bytes for k, p in paths.items()} | moved_from_memory
    return Setup({k: p.fn for k, p in paths.items()}, rows, settle_s=decode.SETTLE_S,
                 against_stream=vs_stream, bytes_moved=moved)


FROM_MEMORY_MULTIPLE = 2  # where the lesson's stack fits in the cache: the C kernel on this many x the cache
CHECKED_LAYERS = 4  # the from-memory stack's layers checked against the oracle (its tolerance is for 4)


def from_memory_path(decode, d_model: int, precision: str):
    """The C kernel at `precision` on a stack of FROM_MEMORY_MULTIPLE x the last-level cache in its format:
    (its DecodePath, bytes moved per step); None without the kernel. The kernel is checked against the float64
    oracle on the stack's first CHECKED_LAYERS layers, within the lesson's tolerance (stated for 4 layers)."""
    if lowbit_gemv.unavailable_reason() is not None:
        return None
    fmt = lowbit_gemv.WEIGHT_FORMATS[precision]
    n_layers = decode.layers_for_working_set(d_model, FROM_MEMORY_MULTIPLE * _llc_bytes(),
                                             formats.bytes_per_weight(fmt))
    stack = decode.make_stack(d_model, n_layers)
    label = f"{precision} C kernel, {n_layers} layers"
    path = decode.DecodePath(label, precision, fmt, lowbit_gemv.step_fn(stack, precision),
                             stack.weight_bytes(fmt))
    first = decode.DecodeStack(stack.layers[:CHECKED_LAYERS], stack.x)
    decode.check_paths({label: replace(path, fn=lowbit_gemv.step_fn(first, precision))}, first)
    return path, path.weight_bytes + stack.activation_bytes


def in_cache(weight_bytes: float, margin: float) -> str:
    """'' when weight_bytes is at least margin x the last-level cache; else why a row that times them from
    memory gets no verdict (a cache so large that the lesson's capped sizes partly fit in it)."""
    if weight_bytes >= margin * _llc_bytes():
        return ""
    return (f"no verdict on memory: these weights ({weight_bytes / 1e6:,.0f} MB) are under {margin:g}x the "
            f"last-level cache ({_llc_bytes() / 2**20:,.0f} MiB), so part of each step is read from it")


def avx2_paths(stack, paths: dict) -> dict:
    """The C kernel's paths (paths' '<precision> C kernel') rebuilt for AVX2 + FMA only, labelled '... (AVX2
    path)', where this CPU builds a wider path and can run AVX2; else none."""
    c_paths = {k: p for k, p in paths.items() if k.endswith(" C kernel")}
    if not c_paths or lowbit_gemv.kernel_path() == "avx2" or "avx2" not in lowbit_gemv.runnable_paths():
        return {}
    lib = lowbit_gemv.load(path="avx2")
    return {f"{k} (AVX2 path)": replace(p, label=f"{k} (AVX2 path)",
                                        fn=lowbit_gemv.step_fn(stack, p.precision, lib=lib))
            for k, p in c_paths.items()}


def setup_tiny_decoder(quick: bool) -> Setup:
    """Lesson 2: the tiny decoder's measured tokens/s against its bandwidth bound (weights + KV per token),
    its single-token steps in the C kernel (where it builds) and, for comparison, in torch."""
    td = need("models.tiny_decoder", "make_tiny_decoder", "weight_bytes_per_token")
    speed = need("experiments.decode_speed", "decode_steps", "decode_bytes_read", "gemvs_alone")
    decode = need("experiments.decode", "SETTLE_S", "CACHE_MARGIN")
    model = td.make_tiny_decoder()
    prompt_len, new_tokens = 16, 16
    fns = {}
    for label, kernel in (("tiny decoder", "auto"), ("tiny decoder, torch GEMVs", "torch")):
        steps = speed.decode_steps(model, prompt_len, new_tokens)

        def run(steps=steps, kernel=kernel):
            model.kernel = kernel
            return steps()

        fns[label] = run
    model.kernel = "auto"
    alone = speed.gemvs_alone(model, new_tokens - 1)

    def gemvs():
        model.kernel = "auto"  # as the first row's decoder runs them
        return alone()

    fns["GEMVs alone"] = gemvs
    moved = speed.decode_bytes_read(model, prompt_len, new_tokens)
    weights_mb = td.weight_bytes_per_token(model) / 1e6
    note = (f"hwopt.models.tiny_decoder.make_tiny_decoder(): {weights_mb:,.0f} MB of fp32 weights per "
            f"token (last-level cache {_llc_bytes() / 2**20:,.0f} MiB), "
            f"{new_tokens - 1} steps after a {prompt_len}-token prompt; bound = STREAM Triad / (weights + KV "
            "bytes per token)")
    (name, goal), (torch_name, torch_goal), (alone_name, alone_goal) = TINY_DECODER
    rows = [AgainstStream(name, goal, ["tiny decoder"], f"{note}; the step runs in {model.gemv_runner()}",
                          "tokens/s", in_cache(td.weight_bytes_per_token(model), decode.CACHE_MARGIN)),
            AgainstStream(torch_name, torch_goal, ["tiny decoder, torch GEMVs"],
                          "for information: the same model with every Linear in torch", "tokens/s"),
            AgainstStream(alone_name, alone_goal, ["GEMVs alone"],
                          "for information, why the decoder is below its bound: the same GEMVs with nothing "
                          "between them (the gap between this row and the first is the rest of the step)")]
    moved_by = {k: moved for k in fns} | {"GEMVs alone": (new_tokens - 1) * td.weight_bytes_per_token(model)}
    return Setup(fns, [], items={k: new_tokens - 1 for k in fns}, settle_s=decode.SETTLE_S,
                 against_stream=rows, bytes_moved=moved_by)


def setup_batching(quick: bool) -> Setup:
    """Lesson 3: throughput of the lesson's MLP at its best batch size vs batch 1 (per-item times)."""
    mlp = need("models.mlp", "make_mlp")

    model = mlp.make_mlp()
    width = next(m for m in model.modules() if isinstance(m, torch.nn.Linear)).in_features
    sizes = [1, 64, 256] if quick else [1, 32, 128, 256, 512]
    fns, items = {}, {}
    for b in sizes:
        x = torch.randn(b, width)

        def step(x=x):
            with torch.inference_mode():
                return model(x)

        fns[f"batch {b}"], items[f"batch {b}"] = step, b
    note = f"hwopt.models.mlp.make_mlp(), items/s; best of batch {', '.join(map(str, sizes[1:]))}"
    (name, goal), = BATCHING
    return Setup(fns, [Comparison(name, goal, ["batch 1"], [f"batch {b}" for b in sizes[1:]], note)], items)


def setup_ort(quick: bool) -> Setup:
    """Lesson 5: the digits classifier at batch 1 in ONNX Runtime (all graph optimizations) vs torch eager."""
    classifier = need("models.classifier", "make_classifier", "N_FEATURES")
    ort = need("kernels.ort", "export_onnx", "make_session", "Predictor")

    model = classifier.make_classifier().eval()
    x = torch.randn(1, classifier.N_FEATURES)
    predictor = ort.Predictor(ort.make_session(ort.export_onnx(model, (x,)), threads=1))  # as lesson 5 does
    x_np = x.numpy()

    def eager():
        with torch.inference_mode():
            return model(x)

    (name, goal), = ORT
    note = ("hwopt.models.classifier.make_classifier() exported with hwopt.kernels.ort.export_onnx; "
            "ORT opt_level 'all', 1 thread")
    return Setup({"torch eager": eager, "ORT": lambda: predictor(x_np)},
                 [Comparison(name, goal, ["torch eager"], ["ORT"], note)])


def setup_fusion(quick: bool) -> Setup:
    """Lesson 5: the elementwise chain eager (a memory pass per op) vs fused (torch.compile, ORT if there)."""
    fusion = need("experiments.fusion", "chain", "Chain", "chain_inputs")

    rows = 4096 if quick else 8192  # 64 / 128 MB per fp32 tensor: memory-bound, far beyond the caches
    inputs = fusion.chain_inputs(rows, 4096)
    args = (inputs["x"], inputs["bias"], inputs["residual"], inputs["scale"])
    compiled = torch.compile(fusion.chain)
    with torch.inference_mode():
        reference = fusion.chain(*args)
        compiled(*args)  # the first call compiles (seconds); the lesson shows that time separately
    fns = {"torch eager": lambda: fusion.chain(*args), "torch.compile": lambda: compiled(*args)}
    try:
        ort = need("kernels.ort", "export_onnx", "make_session", "run")
        module = fusion.Chain(inputs["bias"], inputs["scale"])
        session = ort.make_session(ort.export_onnx(module, (inputs["x"][:2], inputs["residual"][:2])),
                                   threads=torch.get_num_threads())
        x_np, residual_np = inputs["x"].numpy(), inputs["residual"].numpy()
        if float(abs(torch.from_numpy(ort.run(session, x_np, residual_np)) - reference).max()) < 1e-3:
            fns["ORT"] = lambda: ort.run(session, x_np, residual_np)
    except Unavailable:
        pass

    def check(fn):
        with torch.inference_mode():
            return float((fn() - reference).abs().max())

    if check(fns["torch.compile"]) > 1e-3:
        raise ValueError("torch.compile's chain disagrees with eager beyond 1e-3")
    (name, goal), = FUSION
    note = (f"hwopt.experiments.fusion.chain (gelu(x + bias) + residual) * scale on {rows}x4096 fp32; "
            f"fused = faster of {', '.join(k for k in fns if k != 'torch eager')}")
    return Setup(fns, [Comparison(name, goal, ["torch eager"], [k for k in fns if k != "torch eager"], note)])


def setup_profiling(quick: bool) -> Setup:
    """Lesson 6: the lesson's pipeline as first written vs after the fix its profile points to."""
    profiling = need("experiments.profiling", "make_pipeline", "slow_pipeline", "fixed_pipeline")
    pipeline = profiling.make_pipeline()
    (name, goal), = PROFILING
    note = "hwopt.experiments.profiling.make_pipeline(): slow_pipeline vs fixed_pipeline"
    return Setup({"slow pipeline": lambda: profiling.slow_pipeline(pipeline),
                  "fixed pipeline": lambda: profiling.fixed_pipeline(pipeline)},
                 [Comparison(name, goal, ["slow pipeline"], ["fixed pipeline"], note)])


def setup_phases(quick: bool) -> Setup:
    """Lesson 8: tokens/s of a prefill of 256 tokens vs a decode step after it (the tiny decoder, batch 1)."""
    prefill_decode = need("experiments.prefill_decode", "phase_steps")
    tiny_decoder = need("models.tiny_decoder", "make_tiny_decoder")
    prompt = 256
    fns = prefill_decode.phase_steps(tiny_decoder.make_tiny_decoder(), (prompt,))
    (name, goal), = PHASES
    note = (f"hwopt.experiments.prefill_decode.phase_steps(make_tiny_decoder(), ({prompt},)): time per token "
            f"of the prefill (TTFT / {prompt}) vs a decode step at that context; both do ~2 FLOP per weight "
            f"per token, so this is the ratio of their FLOP/s, which their intensities allow")
    return Setup({"decode step": fns[f"decode {prompt}"], "prefill": fns[f"prefill {prompt}"]},
                 [Comparison(name, goal, ["decode step"], ["prefill"], note)], items={"prefill": prompt})


def setup_kv_bound(quick: bool) -> Setup:
    """Lesson 8: a decode step at 448 vs 16 tokens of context, batch sized for KV = weights at 448, against
    the slowdown predicted from the bytes moved."""
    prefill_decode = need("experiments.prefill_decode", "context_steps", "predicted_slowdowns",
                          "batch_for_kv_share")
    tiny_decoder = need("models.tiny_decoder", "make_tiny_decoder")
    model = tiny_decoder.make_tiny_decoder()
    contexts = (16, 448)
    batch = prefill_decode.batch_for_kv_share(model, contexts[-1])
    fns = prefill_decode.context_steps(model, contexts, batch)
    predicted = prefill_decode.predicted_slowdowns(model, contexts, batch)[-1]
    (name, goal), = KV_BOUND
    note = (f"hwopt.experiments.prefill_decode.context_steps(make_tiny_decoder(), {contexts}, batch "
            f"{batch}): step time at {contexts[-1]} / at {contexts[0]} tokens of context vs bytes moved "
            f"(weights + KV passes, prefill_decode.predicted_slowdowns)")
    return Setup({f"context {c}": fns[c] for c in contexts},
                 [Comparison(name, goal, [f"context {contexts[-1]}"], [f"context {contexts[0]}"], note,
                             predicted=predicted)])


def setup_attention(quick: bool) -> Setup:
    """Lesson 10: naive attention (N x N scores materialised) vs the fused kernel (SDPA) at 4096 tokens."""
    attention = need("experiments.attention", "attention_inputs", "naive_attention", "sdpa")

    q, k, v = attention.attention_inputs(4096)  # 4 heads of 64, fp32, batch 1: 268 MB of scores
    with torch.inference_mode():
        if float((attention.sdpa(q, k, v) - attention.naive_attention(q, k, v)).abs().max()) > 1e-4:
            raise ValueError("SDPA disagrees with naive attention beyond 1e-4")
    (name, goal), = ATTENTION
    note = "hwopt.experiments.attention at N = 4096, 4 heads of 64, fp32: naive_attention vs sdpa"
    fns = {"naive": lambda: attention.naive_attention(q, k, v), "sdpa": lambda: attention.sdpa(q, k, v)}
    return Setup(fns, [Comparison(name, goal, ["naive"], ["sdpa"], note)])


def setup_speculative(quick: bool) -> Setup:
    """Lesson 10: speculative decoding's speedup predicted from the measured acceptance and step costs
    (E / (v + k c)) over the speedup measured against plain greedy decoding, as the lesson builds them."""
    speculative_decoding = need("experiments.speculative_decoding", "make_draft_and_target", "checked_run",
                       "measure_step_costs", "random_prompt", "speculative_generate", "DECODE_THREADS")
    cost = need("cost.speculative", "predicted_speedup")
    td = need("models.tiny_decoder", "generate")
    draft, target = speculative_decoding.make_draft_and_target(difference=0.3)
    prompt = speculative_decoding.random_prompt(target.tok.num_embeddings)
    k, new_tokens = 4, 32
    run, same = speculative_decoding.checked_run(draft, target, prompt, new_tokens, k)
    if not same:
        raise ValueError("speculative decoding's tokens differ from the target's greedy tokens")
    costs = speculative_decoding.measure_step_costs(draft, target, k)
    predicted = cost.predicted_speedup(run.acceptance, k, costs.cost_ratio, costs.verify_ratio)

    def on_threads(fn):
        def call():
            with bench.threads(speculative_decoding.DECODE_THREADS):
                return fn()
        return call

    fns = {"target greedy": on_threads(lambda: td.generate(target, prompt, new_tokens)),
           "speculative": on_threads(lambda: speculative_decoding.speculative_generate(draft, target, prompt,
                                                                               new_tokens, k))}
    (name, goal), = SPECULATIVE
    note = (f"hwopt.experiments.speculative_decoding, difference 0.3, k = {k}, {new_tokens} tokens: measured "
            f"acceptance {run.acceptance:.2f}, c = {costs.cost_ratio:.2f}, v = {costs.verify_ratio:.2f}; "
            f"predicted E / (v + k c) = {predicted:.2f}x (E / (1 + k c) = "
            f"{cost.predicted_speedup(run.acceptance, k, costs.cost_ratio):.2f}x)")
    return Setup(fns, [Comparison(name, goal, ["target greedy"], ["speculative"], note, predicted=predicted)])


def setup_split_block(quick: bool) -> list[dict]:
    """Lesson 12: the tensor-parallel block's time predicted from its parts against the block measured whole;
    it runs in worker processes, so the rows come back finished (benchmarks/parallelism.py)."""
    block = need("experiments.tensor_parallel_block", "measure_allreduce", "measure_block")
    return parallelism.rows(block, quick)


Goal = float | tuple[float, float] | None
EFFECTS: list[tuple[Callable[[bool], Setup | list[dict]], list[tuple[str, Goal]]]] = [
    (setup_decode, DECODE),
    (setup_tiny_decoder, TINY_DECODER),
    (setup_batching, BATCHING),
    (setup_fusion, FUSION),
    (setup_profiling, PROFILING),
    (setup_ort, ORT),
    (setup_phases, PHASES),
    (setup_kv_bound, KV_BOUND),
    (setup_attention, ATTENTION),
    (setup_speculative, SPECULATIVE),
    (setup_split_block, SPLIT_BLOCK),
]


# ---------------------------------------------------------------- measuring


def per_item(m: bench.Measurement, items: int) -> bench.Measurement:
    """The same measurement expressed per item (seconds per call / items)."""
    if items < 1:
        raise ValueError(f"items must be a positive integer, got {items!r}")
    if items == 1:
        return m
    return bench.Measurement(m.label, tuple(t / items for t in m.times_s), number=m.number, device=m.device)


@functools.cache
def stream_executable() -> Path:
    """benchmarks/stream.c compiled once per process (into a folder removed at exit)."""
    folder = tempfile.TemporaryDirectory(prefix="hwopt-stream-")
    stream_executable.folder = folder  # lives as long as the cached path
    return native.compile_kernel("stream", Path(folder.name))


STREAM_TRIALS = 2  # per round: STREAM Triad's best of 2 trials, each callable's faster of 2 calls


def stream_triad_gbs(quick: bool) -> float:
    """One round of the C STREAM Triad on torch's thread count: the best of STREAM_TRIALS trials, GB/s."""
    n = native.stream_elements_for(fidelity.stream_array_bytes(quick, _llc_bytes()))
    out = native.run_stream(stream_executable(), n, STREAM_TRIALS, threads=torch.get_num_threads())
    return max(out["triad_bytes"] / t / 1e9 for t in out["triad_s"] if t > 0)


def run_against_stream(setup: Setup, *, rounds: int, quick: bool) -> tuple[dict, list[dict]]:
    """Rounds of STREAM Triad then every callable (interleaved, STREAM_TRIALS calls each): the callables'
    Measurements over all rounds, and one row per AgainstStream from the per-round ratios."""
    triad, best_s, times = [], {k: [] for k in setup.fns}, {k: [] for k in setup.fns}
    for r in range(rounds):
        triad.append(stream_triad_gbs(quick))
        with warnings.catch_warnings():  # two calls a round are noisy on their own; the rows show the spread
            warnings.simplefilter("ignore", bench.NoisyMeasurementWarning)
            res = bench.compare(setup.fns, repeats=STREAM_TRIALS, warmup=2 if r == 0 else 0,
                                settle_s=setup.settle_s)
        for k, m in res.items():
            times[k] += m.times_s
            best_s[k].append(m.min_s)
    rows = []
    for row in setup.against_stream:
        ratios = {k: [setup.bytes_moved[k] / t / 1e9 / g for t, g in zip(best_s[k], triad, strict=True)]
                  for k in row.candidates}
        best = max(row.candidates, key=lambda k: bench.quantile(ratios[k], 0.5))
        bytes_per_item = setup.bytes_moved[best] / setup.items.get(best, 1)
        if row.unit == "GB/s":
            candidate = [setup.bytes_moved[best] / t / 1e9 for t in best_s[best]]
            reference = triad
        else:
            candidate = [setup.items.get(best, 1) / t for t in best_s[best]]
            reference = [g * 1e9 / bytes_per_item for g in triad]
        others = ", ".join(f"{k} {bench.quantile(v, 0.5):.2f}" for k, v in ratios.items() if k != best)
        note = "; ".join(filter(None, [
            row.in_cache, row.note, f"best path: {best}" if len(row.candidates) > 1 else "",
            f"the others (median ratio): {others}" if others else "",
            f"{rounds} rounds of STREAM Triad (C, best of {STREAM_TRIALS} trials) then each path (faster of "
            f"{STREAM_TRIALS} calls), interleaved; ratio = median of the per-round ratios, brackets: their "
            "IQR"]))
        reference_label = "STREAM Triad" if row.unit == "GB/s" else "bound at STREAM Triad"
        line = report.fidelity_row(row.name, report.rate_stats(best, candidate, row.unit),
                                   report.rate_stats(reference_label, reference, row.unit), goal=row.goal,
                                   note=note, pairs=ratios[best])
        # the median of the paired ratios: each round's load on the machine hits both sides alike
        line["ratio"] = bench.quantile(ratios[best], 0.5)
        cached = row.in_cache and row.goal is not None
        line["verdict"] = report.UNAVAILABLE if cached else report.verdict(line["ratio"], row.goal)
        rows.append(line)
    return {k: bench.Measurement(k, tuple(v)) for k, v in times.items()}, rows


def run_setup(setup: Setup, *, repeats: int, quick: bool = True) -> list[dict]:
    """Time a Setup's callables interleaved; one speedup row per comparison (fastest vs fastest), and one
    row per AgainstStream (rounds of STREAM Triad and the callables, `repeats` rounds)."""
    stream_rows, res = [], None
    if setup.against_stream:
        try:
            stream_executable()
            res, stream_rows = run_against_stream(setup, rounds=repeats, quick=quick)
        except native.NativeUnavailable as exc:  # no C compiler: the other rows are still measured
            stream_rows = [report.unavailable_row(r.name, f"C STREAM not available: {exc}", goal=r.goal,
                                                  kind="fidelity") for r in setup.against_stream]
    if res is None:
        res = bench.compare(setup.fns, repeats=repeats, warmup=2, settle_s=setup.settle_s)
    res = {k: per_item(m, setup.items.get(k, 1)) for k, m in res.items()}
    rows = []
    for c in setup.comparisons:
        base = min(c.baselines, key=lambda k: res[k].median_s)
        best = min(c.candidates, key=lambda k: res[k].median_s)
        picked = [c.note] * bool(c.note) + [f"fastest baseline: {base}"] * (len(c.baselines) > 1)
        note = "; ".join(picked + [f"best: {best}"] * (len(c.candidates) > 1))
        if c.predicted is not None:
            rows.append(report.prediction_row(c.name, res[base], res[best], c.predicted, goal=c.goal,
                                              note=note))
        else:
            rows.append(report.speedup_row(c.name, res[base], res[best], goal=c.goal, note=note))
    return rows + stream_rows


def measure(*, quick: bool, effects=None, progress=None) -> tuple[dict, list[str]]:
    """Section 2 rows (one per effect; 'not available' with the reason when the lesson code is missing)."""
    rows, notes = [], []
    repeats = 5 if quick else 15
    for build, declared in effects or EFFECTS:
        try:
            built = build(quick)  # a Setup to time here, or the rows of an effect measured elsewhere
            rows += built if isinstance(built, list) else run_setup(built, repeats=repeats, quick=quick)
        except Unavailable as exc:
            rows += [report.unavailable_row(name, str(exc), goal=goal) for name, goal in declared]
        except Exception as exc:  # a lesson module that breaks must not take the report down with it
            last = traceback.format_exception_only(exc)[-1].strip()
            rows += [report.unavailable_row(name, f"failed: {last[:200]}", goal=goal)
                     for name, goal in declared]
        if progress:
            progress.update(1)
    notes.append(f"{repeats} interleaved repeats per effect (bench.compare); ratio = baseline median / "
                 "optimized median, per item where batches differ")
    return {"rows": rows, "notes": notes}, []
