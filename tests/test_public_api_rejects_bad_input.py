"""Every public function of the toolkit answers bad input with a ValueError naming the argument, at once.

VALID below is the specification: one cheap valid call per public function, class and method of hwopt
(hwopt.course has its own validated API; hwopt.arguments, the checker, has tests/test_arguments.py). The
valid call must succeed. Then each parameter in turn takes bad values while the others stay valid: NaN,
+-inf, negative and zero numbers (where the call does not allow them), 2.5 for an integer, 10**30 for a
count, wrong types ("3", None, True, [], 1 for a flag), and NaN, inf or -1 hidden inside arrays and
mappings; hypothesis draws more of each kind. Every such call must raise ValueError whose message names the
parameter, within CALL_LIMIT_S seconds (a hang fails the test instead of hanging CI). A public function that
is neither in VALID nor in EXCLUDED fails the test, so a new one cannot escape.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import json
import pkgutil
import shutil
import signal
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hwopt
from hwopt import formats, plots, predictions, quantization, recordings, roofline, traces, widgets
from hwopt.cost import (
    batching,
    communication,
    costs,
    disaggregation,
    energy,
    footprint,
    moe,
    paging,
    phases,
    serving,
    speculative,
    tensor_parallel,
)
from hwopt.cost import pipeline as pipeline_cost
from hwopt.experiments import (
    attention,
    decode,
    decode_speed,
    distributed,
    fake_quant,
    fusion,
    gptq,
    launch_overhead,
    llm_accuracy,
    llm_kv_cache,
    llm_quantization,
    llm_speculative,
    model_card,
    moe_layer,
    outliers,
    parallel_summary,
    pipeline_parallel,
    precision,
    prefill_decode,
    profile_traces,
    profiling,
    roofline_points,
    serving_engine,
    tensor_parallel_block,
)
from hwopt.experiments import (
    speculative_decoding as sd,
)
from hwopt.kernels import llama_build, llama_server, lowbit_gemv, ort
from hwopt.machine import bench, card, hardware, loadgen, power, probe, specs, toolchain
from hwopt.models import (
    checkpoint,
    classifier,
    corpus,
    gguf_export,
    llama,
    mlp,
    onnx_export,
    perplexity,
    tiny_decoder,
    tokenizer,
    train,
)

ONE_EVENT = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.5, "dur": 2.0}
CALL_LIMIT_S = 2.0  # a bad value must be refused within this time
VALID_LIMIT_S = 20.0  # the valid call of each function
EXAMPLES = 4  # hypothesis examples per parameter, beyond the fixed bad values
TMP = Path(tempfile.mkdtemp(prefix="bad-input-"))  # in the session's own folder, which is removed at its end
pytestmark = pytest.mark.filterwarnings("ignore::hwopt.machine.bench.NoisyMeasurementWarning")


# ---- the harness -------------------------------------------------------------------------------------------


@dataclass
class Call:
    """A valid call, and what each parameter admits beyond the default rules of bad_values()."""

    fn: Callable
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    zero: frozenset = frozenset()  # 0 is valid
    signed: frozenset = frozenset()  # negative numbers (or arrays holding them) are valid
    bounded: frozenset = frozenset()  # float parameters with a documented maximum: 1e30 is bad
    huge: frozenset = frozenset()  # integers without a maximum: 10**30 is valid
    text: frozenset = frozenset()  # any str is valid (a label, a file name): only a non-str is bad
    opaque: frozenset = frozenset()  # containers of anything (options) or results of another function: only
    #                                   a wrong type is bad, the numbers inside are not attacked
    run_valid: bool = True  # False where the valid call needs minutes or hardware (said in VALID)


def call(fn, *args, zero="", signed="", bounded="", huge="", text="", opaque="", run_valid=True,
         **kwargs) -> Call:
    names = (frozenset(words.split()) for words in (zero, signed, bounded, huge, text, opaque))
    return Call(fn, args, kwargs, *names, run_valid=run_valid)


class Hang(Exception):
    """The call did not return within its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def stop(signum, frame):
        raise Hang(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)
NAN, INF = float("nan"), float("inf")


def kind_of(param: inspect.Parameter, value, c: Call) -> str | None:
    """How to attack a parameter: int, float, choice, text, bool, function, container; None: not at all."""
    annotation = param.annotation if isinstance(param.annotation, str) else ""
    parts = {p.strip() for p in annotation.split("|")} - {"None", ""}
    if param.name in c.text:
        return "text"
    if isinstance(value, bool) or (value is None and parts == {"bool"}):
        return "bool"
    if isinstance(value, FUNCTION_TYPES):
        return "function"
    if isinstance(value, str) or (value is None and parts == {"str"}):
        return "choice"
    if isinstance(value, int | np.integer) or (value is None and parts == {"int"}):
        return "float" if "float" in parts else "int"
    if isinstance(value, float | np.floating) or (value is None and parts == {"float"}):
        return "float"
    if _first_number(value) is not None or isinstance(value, list | tuple | dict) and value:
        return "container"
    return None


def _first_number(value):
    """Path (indices and keys) to the first number inside value, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float | np.integer | np.floating):
        return ()
    if isinstance(value, np.ndarray):
        return ("flat",) if value.size and value.dtype.kind in "iuf" else None
    if isinstance(value, torch.Tensor):
        return ("flat",) if value.numel() and value.dtype != torch.bool else None
    if isinstance(value, dict):
        items = value.items()
    else:
        items = enumerate(value) if isinstance(value, list | tuple) else ()
    for key, item in items:
        inner = _first_number(item)
        if inner is not None:
            return (key, *inner)
    return None


def _replace(value, path, new):
    """A copy of value with the number at path replaced by new (arrays become float where needed)."""
    if not path:
        return new
    key, rest = path[0], path[1:]
    if key == "flat":
        if isinstance(value, torch.Tensor):
            out = value.detach().clone().double() if isinstance(new, float) else value.detach().clone()
            out.view(-1)[0] = new
            return out.to(value.dtype) if value.is_floating_point() else out
        if isinstance(new, float) and value.dtype.kind in "iub":
            out = value.astype(float)
        elif new < 0 and value.dtype.kind in "ub":
            out = value.astype(np.int64)  # -1 does not fit in uint8
        else:
            out = value.copy()
        out.flat[0] = new
        return out
    if isinstance(value, dict):
        return {**value, key: _replace(value[key], rest, new)}
    out = list(value)
    out[key] = _replace(value[key], rest, new)
    return tuple(out) if isinstance(value, tuple) else out


@dataclass(frozen=True)
class Param:
    """One attacked parameter: its name, kind, valid value, and whether None or an int bit width is valid."""

    name: str
    kind: str
    value: object
    none_ok: bool
    int_ok: bool  # a str parameter that also takes an int ('fp16' or 16 bits)


def bad_values(p: Param, c: Call) -> list:
    """The fixed bad values of one parameter."""
    name, kind, value = p.name, p.kind, p.value
    bad = [] if p.none_ok else [None]
    positive_needed = name not in c.signed
    if kind == "int":
        bad += [NAN, INF, -INF, 2.5, "3", True, []]
        bad += [-1] if positive_needed else []
        bad += [0] if positive_needed and name not in c.zero else []
        bad += [] if name in c.huge else [10**30]
    elif kind == "float":
        bad += [NAN, INF, -INF, "3", True, []]
        bad += [-1.0] if positive_needed else []
        bad += [0.0] if positive_needed and name not in c.zero else []
        bad += [1e30] if name in c.bounded else []
    elif kind == "choice":
        bad += ["", "#no such choice#", NAN, True, []] + ([] if p.int_ok else [3])
    elif kind == "text":
        bad += [3, NAN, True, []]
    elif kind == "bool":
        bad += ["yes", 1, NAN]
    elif kind == "function":
        bad += ["3", 3]
    elif kind == "container":
        bad += ["3", True]
        path = None if name in c.opaque else _first_number(value)
        if path is not None:
            leaf = value.flat[0] if path[-1] == "flat" and isinstance(value, np.ndarray) else None
            bad += [_replace(value, path, x) for x in (NAN, INF, -INF)]
            bad += [_replace(value, path, -1)] if positive_needed else []
            if isinstance(leaf, np.integer) or _is_int_leaf(value, path):
                bad += [_replace(value, path, 2.5)]
                bad += [_replace(value, path, 0)] if positive_needed and name not in c.zero else []
                if not isinstance(value, np.ndarray | torch.Tensor):
                    bad += [_replace(value, path, True)]
                    bad += [] if name in c.huge else [_replace(value, path, 10**30)]
    return bad


def _is_int_leaf(value, path) -> bool:
    for key in path:
        if key == "flat":
            if isinstance(value, torch.Tensor):
                return not value.is_floating_point()
            return value.dtype.kind in "iu"
        value = value[key]
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def strategy(p: Param, c: Call):
    """More bad values of one kind, drawn by hypothesis."""
    name, kind, value = p.name, p.kind, p.value
    tiny_text = st.text(alphabet="#@%~", max_size=4)  # never a valid choice, device, file or chip name
    not_finite = st.sampled_from([NAN, INF, -INF])
    if kind == "int":
        options = [st.floats(allow_nan=True), tiny_text, st.booleans()]
        if name not in c.huge:
            options.append(st.integers(min_value=2**64))
        if name not in c.signed:
            options.append(st.integers(max_value=-1 if name in c.zero else 0))
        return st.one_of(options)
    if kind == "float":
        options = [not_finite, tiny_text, st.booleans()]
        if name not in c.signed:
            options.append(st.floats(max_value=-1e-300) if name in c.zero else st.floats(max_value=0.0))
        if name in c.bounded:
            options.append(st.floats(min_value=1e25, allow_infinity=False))
        return st.one_of(options)
    if kind == "choice":
        numbers = st.integers(max_value=0) if p.int_ok else st.integers()
        return st.one_of(tiny_text.filter(bool), numbers, st.floats(allow_nan=True))
    if kind in ("text", "function"):
        return st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans())
    if kind == "bool":
        return st.one_of(st.integers(), tiny_text, st.floats(allow_nan=True))
    path = None if name in c.opaque else _first_number(value)
    if path is None:
        return st.one_of(tiny_text, st.booleans())
    numbers = not_finite if name in c.signed else st.one_of(not_finite, st.floats(max_value=-1e-300))
    return st.one_of(tiny_text, numbers.map(lambda x: _replace(value, path, x)))


def refusal_problem(c: Call, bound: inspect.BoundArguments, name: str, bad) -> str | None:
    """None when fn refuses bad for name with a ValueError naming it in time; else what went wrong."""
    arguments = dict(bound.arguments)
    arguments[name] = bad
    trial = inspect.BoundArguments(bound.signature, arguments)
    shown = repr(bad) if len(repr(bad)) < 80 else repr(bad)[:77] + "..."
    try:
        with time_limit(CALL_LIMIT_S):
            c.fn(*trial.args, **trial.kwargs)
    except ValueError as error:
        return None if name in str(error) else f"{name}={shown}: ValueError not naming {name!r}: {error}"
    except Hang:
        return f"{name}={shown}: still running after {CALL_LIMIT_S} s"
    except Exception as error:  # noqa: BLE001 - the point is to report any other type
        return f"{name}={shown}: {type(error).__name__}: {error}"
    finally:
        plt.close("all")
    return f"{name}={shown}: accepted"


def attacked_parameters(c: Call):
    """(Param, bound call) for each parameter bad values are fed to."""
    signature = inspect.signature(c.fn)
    bound = signature.bind(*c.args, **c.kwargs)
    bound.apply_defaults()
    for name, param in signature.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        value = bound.arguments[name]
        kind = kind_of(param, value, c)
        if kind is not None:
            annotation = param.annotation if isinstance(param.annotation, str) else ""
            none_ok = value is None or param.default is None or "None" in annotation
            int_ok = "int" in {part.strip() for part in annotation.split("|")}
            yield Param(name, kind, value, none_ok, int_ok), bound


# ---- cheap real objects the valid calls need --------------------------------------------------------------


@functools.cache
def measurement() -> bench.Measurement:
    return bench.Measurement("m", (0.001, 0.0012, 0.0011))


def measure_three():
    return {"a": bench.Measurement("a", (0.002, 0.002)), "b": bench.Measurement("b", (0.001, 0.001))}


@functools.cache
def sweep() -> batching.BatchSweep:
    return batching.BatchSweep((1, 2, 4), tuple(bench.Measurement(f"b{b}", (0.001 * b + 0.001,) * 3)
                                                for b in (1, 2, 4)))


@functools.cache
def latency_fit() -> batching.LatencyFit:
    return batching.fit_latency_model([1, 2, 4], [2.0, 3.0, 5.0])


def noop():
    return None


def noop_kwargs(**kwargs):
    return None


def noop_sum(tensor):
    """An all-reduce over a group of one: the tensor is already the sum."""
    return None


def threads_block(n):
    with bench.threads(n):
        pass


@functools.cache
def machine_info() -> hardware.MachineInfo:
    return hardware.MachineInfo("Linux", "x86_64", "AMD EPYC", 2, 2, ["AVX2", "FMA"], 8.0)


def fake_probe(device, precisions, quick):
    return probe.Ceilings(device, 40.0, {"fp32": 2e11})


@functools.cache
def machine_card() -> card.MachineCard:
    return card.machine_card(probe=True, device="cpu", probe_fn=fake_probe, machine=machine_info())


@functools.cache
def ceilings() -> probe.Ceilings:
    return fake_probe("cpu", None, True)


@functools.cache
def serving_stats() -> serving.ServingStats:
    return serving.simulate_dynamic_batching(100.0, 8, 2.0, 1.0, 0.5, n_requests=50)


@functools.cache
def shape() -> footprint.ModelShape:
    return footprint.ModelShape("tiny", 2, 64, 4, 2, 128, 100)


@functools.cache
def moe_shape() -> footprint.ModelShape:
    """A tiny mixture of experts with latent attention, a dense first layer and a sliding window."""
    return footprint.ModelShape("tiny moe", 4, 64, 4, 4, 128, 100, head_dim=16, n_experts=8,
                                experts_per_token=2, n_shared_experts=1, d_ff_expert=32, n_dense_layers=1,
                                kv_lora_rank=16, q_lora_rank=8, rope_head_dim=4, sliding_window=8,
                                n_sliding_layers=2)


@functools.cache
def block_weights():
    return tensor_parallel_block.make_block(32, 4, 64, seed=0)


def fake_times(label: str, *seconds) -> bench.Measurement:
    return bench.Measurement(label, tuple(seconds) or (1e-3, 1.1e-3, 0.9e-3))


@functools.cache
def allreduce_sweep():
    sizes = (1024, 65536, 1 << 20)
    return tensor_parallel_block.AllReduceSweep(
        sizes, tuple(fake_times(f"{n}", 1e-4 + n / 1e9, 1.1e-4 + n / 1e9, 0.9e-4 + n / 1e9) for n in sizes),
        2, "gloo")


@functools.cache
def block_times():
    per_batch = {b: {v: fake_times(f"{v} {b}", *(t * b for t in (1e-3, 1.1e-3, 0.9e-3)))
                     for v in tensor_parallel_block.VARIANTS} for b in (1, 8)}
    return tensor_parallel_block.BlockTimes(2, "gloo", 32, 4, 64, 1e-6, 3.0, per_batch)


@functools.cache
def pipeline_run():
    busy = {1: [[0.01, 0.01, 0.01], [0.01, 0.01, 0.01]], 4: [[0.012, 0.012, 0.012], [0.012, 0.012, 0.012]]}
    spans = {1: fake_times("m 1", 0.021, 0.02, 0.022), 4: fake_times("m 4", 0.016, 0.015, 0.017)}
    return pipeline_parallel.PipelineRun(2, 4, 64, 32, "gloo", busy, spans)


@functools.cache
def moe_small():
    return moe_layer.make_moe(32, 16, 8, 2, seed=0)


@functools.cache
def moe_sweep():
    return moe_layer.measure_moe(moe_small(), (1, 4), repeats=3, trials=10)


@functools.cache
def chips():
    return specs.load_chips()


@functools.cache
def chip():
    return specs.get_chip("NVIDIA T4")


@functools.cache
def stack() -> decode.DecodeStack:
    return decode.make_stack(64, 2)


@functools.cache
def decode_result() -> decode.DecodeResult:
    s = stack()
    paths = {label: decode.DecodePath(label, fmt, fmt, decode.numpy_step(s), s.weight_bytes(fmt))
             for label, fmt in (("fp32 numpy", "fp32"), ("int8 numpy", "int8"))}
    times = {"fp32 numpy": (0.004, 0.004), "int8 numpy": (0.002, 0.002)}
    return decode.DecodeResult(paths, {k: bench.Measurement(k, t) for k, t in times.items()})


@functools.cache
def digits() -> classifier.Digits:
    return classifier.load_digits()


def net() -> torch.nn.Module:
    """A small digits classifier for the calls below."""
    return classifier.make_classifier(16, 1)


@functools.cache
def weight() -> torch.Tensor:
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(0))


@functools.cache
def pipeline() -> profiling.Pipeline:
    return profiling.make_pipeline(n_items=4, n_features=8, hidden=8, batch_size=2, io_ms=0.0)


@functools.cache
def profiled():
    return profiling.run_profiled(noop)[0]


@functools.cache
def recorded_folder() -> Path:
    """A folder holding one chip's recorded run (headline.json, machine card, an executed lesson)."""
    base = TMP / "recordings" / "nvidia-h200"
    base.mkdir(parents=True)
    lessons = {"02_memory_bandwidth": {"memory bandwidth": {"value": 4200.0, "unit": "GB/s"}}}
    (base / recordings.HEADLINE_FILE).write_text(json.dumps({"device": "cuda", "lessons": lessons}))
    (base / "02_memory_bandwidth.ipynb").write_text("{}")
    return base.parent


@functools.cache
def headlines_file() -> Path:
    path = TMP / "headlines.jsonl"
    path.write_text(json.dumps({"name": "speedup", "value": 2.0, "unit": "x"}) + "\n")
    return path


@functools.cache
def onnx_path() -> Path:
    return ort.linear_model(np.eye(4, dtype=np.float32), TMP / "linear.onnx")


@functools.cache
def session():
    return ort.make_session(onnx_path(), threads=1)


@functools.cache
def decoder() -> tiny_decoder.TinyDecoder:
    return tiny_decoder.make_tiny_decoder(vocab_size=32, d_model=16, n_layers=1, n_heads=2)


@functools.cache
def phase_times() -> prefill_decode.PhaseTimes:
    m = bench.Measurement("m", (0.001, 0.001))
    return prefill_decode.PhaseTimes((4, 8), (m, m), (m, m), prefill_decode.shape_of(decoder()), "fp32")


@functools.cache
def context_sweep() -> prefill_decode.ContextSweep:
    m = (bench.Measurement("a", (0.001, 0.001)), bench.Measurement("b", (0.002, 0.002)))
    return prefill_decode.ContextSweep((4, 8), 2, m, 1000, (10, 20), 3)


@functools.cache
def chunked_requests():
    return serving.mixed_requests(20, 10.0, 4, 64, 0.2, 4.0)


@functools.cache
def phase_runs() -> dict:
    return {name: serving.simulate_chunked_prefill(*chunked_requests(), 4, 1.0, 0.1, chunk)
            for name, chunk in (("whole prompts", None), ("chunks of 16", 16))}


@functools.cache
def llm_kv_rows() -> list:
    return [{"variant": "KV fp16", "kv_bytes_per_value": 2.0, "perplexity": 60.0, "top1_agreement": 1.0}]


def kv_rows() -> list:
    return prefill_decode.kv_quantization_error(decoder(), 4, ("int8",), 2)


@functools.cache
def kernel_library():
    return lowbit_gemv.load()


@functools.cache
def square_weight() -> np.ndarray:
    return stack().layers[0]


@functools.cache
def quantized(precision: str = "int4_g32", **kwargs) -> quantization.Quantized:
    return quantization.quantize(square_weight(), precision, axis=0, **kwargs)


@functools.cache
def int8_session():
    return ort.make_session(decode.int8_model_bytes(stack()), threads=1)


@functools.cache
def path_comparison() -> lowbit_gemv.PathComparison:
    times = {"int8 avx512-vnni": (0.001, 0.001), "int8 avx2": (0.002, 0.002)}
    measurements = {k: bench.Measurement(k, t) for k, t in times.items()}
    return lowbit_gemv.PathComparison("avx512-vnni", "avx2", measurements)


@functools.cache
def chain_prediction() -> fusion.ChainPrediction:
    return fusion.chain_roofs(1 << 20, 20.0, 1e9)


def chain_rows() -> list[dict]:
    results = {"compiled": bench.Measurement("compiled", (0.003, 0.003)),
               "compiled, out given": bench.Measurement("compiled, out given", (0.002, 0.002))}
    return fusion.report_rows(results, 1 << 20, {"compiled": 3, "compiled, out given": 3}, 20.0)


SMALL_PAIR = {"vocab_size": 32, "d_model": 16, "draft_layers": 1, "extra_layers": 1, "n_heads": 2}


@functools.cache
def draft_and_target():
    return sd.make_draft_and_target(**SMALL_PAIR)


@functools.cache
def speculative_run() -> sd.SpeculativeRun:
    draft, target = draft_and_target()
    return sd.speculative_generate(draft, target, torch.tensor([[1, 2, 3]]), 6, 2)


@functools.cache
def step_costs() -> sd.StepCosts:
    return sd.StepCosts(*(bench.Measurement(k, (t,) * 3) for k, t in
                                   (("draft", 0.001), ("target", 0.004), ("verify", 0.005))), draft_len=2)


def generation_timings() -> dict:
    return {"target greedy": bench.Measurement("target greedy", (0.02, 0.02)),
            "speculative": bench.Measurement("speculative", (0.01, 0.01))}


@functools.cache
def qkv():
    return attention.attention_inputs(8, 2, 4)


@functools.cache
def attention_points() -> list:
    times = {"naive": bench.Measurement("naive", (0.002, 0.002)),
             "sdpa": bench.Measurement("sdpa", (0.001, 0.001))}
    return [attention.AttentionPoint(64, 2, 8, times, {"naive": 70_000, "sdpa": 2_000})]


def add_times() -> dict:
    return {n: bench.Measurement(str(n), (1e-6 + n * 1e-9,) * 3) for n in (1, 100, 10_000)}


# ---- the course's model: small real objects -------------------------------------------------------------


@functools.cache
def small_config() -> llama.LlamaConfig:
    return llama.LlamaConfig(vocab_size=tokenizer.VOCAB_SIZE, d_model=64, n_layers=1, n_heads=4, n_kv_heads=2,
                             hidden=128, max_seq_len=64)


@functools.cache
def small_llama() -> llama.Llama:
    torch.manual_seed(0)
    return llama.Llama(small_config()).eval()


@functools.cache
def source_folder() -> Path:
    """A standard library of two modules."""
    folder = TMP / "stdlib"
    (folder / "pkg").mkdir(parents=True, exist_ok=True)
    (folder / "alpha.py").write_text("def alpha():\n    return 1\n")
    (folder / "pkg" / "__init__.py").write_text("X = 2\n")
    return folder


def documents() -> list:
    return corpus.documents(source_folder())


@functools.cache
def validation_file() -> Path:
    corpus.write_validation(documents(), TMP / "validation.txt")
    return TMP / "validation.txt"


@functools.cache
def course_tokenizer():
    return tokenizer.load(checkpoint.WEIGHTS_DIR / "tokenizer.json")


def tiny_training() -> train.TrainConfig:
    return train.TrainConfig(size="tiny", steps=2, batch_size=2, seq_len=16, warmup_steps=1, eval_every=2,
                             eval_windows=1, checkpoint_every=2)


@functools.cache
def finished_run() -> Path:
    train.train(tiny_training(), TMP / "run", progress=False, train_stream=torch.arange(1, 400))
    return TMP / "run"


@functools.cache
def onnx_file() -> Path:
    return onnx_export.export(small_llama(), TMP / "small.onnx")


@functools.cache
def gguf_file() -> Path:
    return gguf_export.write(small_llama(), TMP / "small.gguf", "Q8_0")


def load_result() -> loadgen.LoadResult:
    records = tuple(loadgen.RequestRecord(0.0, 0.0, (0.1 * i, 0.1 * i + 0.02), 0.1 * i + 0.02, 2)
                    for i in range(1, 4))
    return loadgen.LoadResult(records, "closed", users=2, label="two users")


def chunked_result() -> serving_engine.ChunkedPrefill:
    return serving_engine.ChunkedPrefill(((16, 16),), 64, (load_result(),), (30.0,))


@functools.cache
def saved_run() -> Path:
    return serving_engine.save({"loops": serving_engine.LoopComparison(load_result(), load_result())},
                               TMP / "serving_run.json")


def format_rows() -> list:
    return [{"precision": "fp32", "bytes_per_weight": 4.0, "perplexity": 10.0, "top1_agreement": 1.0}]


@functools.cache
def course_draft():
    return llm_accuracy.load("draft")[0]


def short_prompt() -> torch.Tensor:
    return torch.tensor([[5, 6, 7, 5, 6]])


def slice_row() -> dict:
    return {"tokens": 1024, "seq_len": 512, "eval_set": "validation", "available_tokens": 4096}


def calibration_tokens() -> torch.Tensor:
    return torch.arange(32).view(2, 16) % 100


@functools.cache
def small_inputs() -> dict:
    return llm_quantization.group_inputs(small_llama(), calibration_tokens())


def within(module: str, calls: dict) -> dict:
    """The calls of one module, keyed 'module.name'."""
    return {f"{module}.{name}": c for name, c in calls.items()}


# ---- the specification: one valid call per public function ------------------------------------------------

VALID: dict[str, Callable[[], Call]] = {
    **within("plots", {
        "color": lambda: call(plots.color, 3, zero="i"),
        "axes": lambda: call(plots.axes, "size (MB)", "time (ms)", title="t", logx=True, figsize=(4.0, 3.0),
                             text="xlabel ylabel title"),
        "band": lambda: call(plots.band, plots.axes("x (s)", "y (s)"), [1.0, 2.0], [1.0, 2.0], [0.5, 1.5],
                             [1.5, 2.5], label="l", color="red", signed="x median low high",
                             text="label color"),
        "measurement_band": lambda: call(plots.measurement_band, plots.axes("x (s)", "y (s)"), [1.0],
                                         [measurement()], unit="ms", text="label color", signed="x"),
        "finish": lambda: call(plots.finish, plots.axes("x (s)", "y (s)"), legend=True),
    }),
    **within("roofline", {
        "time_s": lambda: call(roofline.time_s, 1e9, 1e6, 1e12, 100.0, zero="flop bytes_moved"),
        "flops_bytes_elementwise": lambda: call(roofline.flops_bytes_elementwise, 1024, n_inputs=2,
                                                n_outputs=1, flops_per_element=1.0,
                                                bytes_per_element=4.0),
        "flops_bytes_gemv": lambda: call(roofline.flops_bytes_gemv, 64, 32, bytes_per_weight=1.0,
                                         batch_size=2, bytes_per_activation=4.0),
        "flops_bytes_gemm": lambda: call(roofline.flops_bytes_gemm, 8, 16, 32, bytes_per_element=2.0),
        "flops_bytes_attention_decode": lambda: call(roofline.flops_bytes_attention_decode, 128, 64, 8,
                                                     bytes_per_element=2.0, n_kv_heads=2),
        "intensity_elementwise": lambda: call(roofline.intensity_elementwise, n_inputs=2, n_outputs=1,
                                              flops_per_element=2.0, bytes_per_element=4.0),
        "intensity_gemv": lambda: call(roofline.intensity_gemv, 64, 64, 0.5, batch_size=4,
                                       bytes_per_activation=2.0),
        "intensity_gemm": lambda: call(roofline.intensity_gemm, 8, 8, 8, 4.0),
        "intensity_attention_decode": lambda: call(roofline.intensity_attention_decode, 128, 64, 8, 2.0,
                                                   n_kv_heads=8),
        "ridge_point": lambda: call(roofline.ridge_point, 1e12, 100.0),
        "attainable_flops": lambda: call(roofline.attainable_flops, np.array([0.5, 20.0]), 1e12, 100.0),
        "bound": lambda: call(roofline.bound, 3.0, 1e12, 100.0),
        "Ceiling": lambda: call(roofline.Ceiling, "roof", 1e12, 100.0, True, text="label"),
        "KernelPoint": lambda: call(roofline.KernelPoint, "k", 2.0, 1e9, text="label"),
        "plot_roofline": lambda: call(roofline.plot_roofline, [("roof", 1e12, 100.0)],
                                      [("k", 2.0, 1e9)], title="t", text="title"),
        "ElementwiseRoofs": lambda: call(roofline.ElementwiseRoofs, 1e-3, 2e-3,
                                         zero="memory_s transcendental_s"),
        "elementwise_roofs": lambda: call(roofline.elementwise_roofs, 1e6, 20.0, 1e5, 1e9,
                                          zero="n_bytes n_transcendentals"),
        "transcendental_ridge_bytes": lambda: call(roofline.transcendental_ridge_bytes, 20.0, 1e9),
    }),
    **within("cost.batching", {
        "batch_latency_ms": lambda: call(batching.batch_latency_ms, 4, 1.0, 0.5, zero="overhead_ms"),
        "LatencyFit": lambda: call(batching.LatencyFit, 1.0, 0.5, 0.1, 0.05,
                                   zero="overhead_ms per_item_ms rms_error_ms max_relative_error"),
        "LatencyFit.latency_ms": lambda: call(latency_fit().latency_ms, [1.0, 8.0], zero="batch_size"),
        "fit_latency_model": lambda: call(batching.fit_latency_model, [1, 2, 4], [2.0, 3.0, 5.0],
                                          relative=False),
        "predicted_latency_ms": lambda: call(batching.predicted_latency_ms, 1e6, 4, 1e12, 100.0, 2.0),
        "batch1_regime": lambda: call(batching.batch1_regime, 1e6, "last-level cache", 32 * 2**20,
                                      text="cache_name"),
        "batch1_verdict": lambda: call(batching.batch1_verdict, 1e6, 0.1, 20.0, "L3 cache", 32 * 2**20,
                                       text="cache_name"),
        "fit_verdict": lambda: call(batching.fit_verdict, latency_fit(), sweep(), 0.2),
        "BatchSweep.latency_table_ms": lambda: call(sweep().latency_table_ms, 2),
        "BatchSweep": lambda: call(batching.BatchSweep, (1, 2), (measurement(), measurement())),
        "BatchSweep.knee": lambda: call(sweep().knee, 0.9),
        "BatchSweep.largest_within": lambda: call(sweep().largest_within, 3.0),
        "measure_batch_sweep": lambda: call(batching.measure_batch_sweep, mlp.make_mlp(8, 1),
                                            (1, 2), device="cpu", repeats=2, warmup=0, progress=False,
                                            zero="warmup"),
        "compare_batch_sizes": lambda: call(batching.compare_batch_sizes, mlp.make_mlp(8, 1), (1, 4),
                                            device="cpu", repeats=2),
        "plot_batch_sweep": lambda: call(batching.plot_batch_sweep, sweep(), latency_fit(), 3.0),
        "sweep_table": lambda: call(batching.sweep_table, sweep(), [1.0, 2.0, 4.0]),
        "budget_report": lambda: call(batching.budget_report, sweep(), 3.0),
        "budget_explorer": lambda: call(batching.budget_explorer, sweep(), latency_fit()),
    }),
    **within("cost.costs", {
        "skipped": lambda: call(costs.skipped, "fp8_e4m3", chips()[:6]),
        "inference_definition": lambda: call(costs.inference_definition, 1e9, 4, "fp16"),
        "beyond_the_bound": lambda: call(costs.beyond_the_bound, 1e9, 1, "fp16", chip(), 1e9, 0.5,
                                         "KV cache bytes per step", zero="extra_bytes",
                                         bounded="utilisation", text="extra_label"),
        "cost_per_million_usd": lambda: call(costs.cost_per_million_usd, 1e-3, 3.6),
        "estimate": lambda: call(costs.estimate, 1e9, 4, "fp16", chips()[:6], 1e6, zero="extra_bytes"),
        "best_chip": lambda: call(costs.best_chip, costs.estimate(1e9, 1, "fp16", chips()[:6])),
        "cost_report": lambda: call(costs.cost_report, 1e9, 4, "fp16", chips()[:6], top=3),
        "plot_costs": lambda: call(costs.plot_costs, costs.estimate(1e9, 1, "fp16", chips()), title="t",
                                   text="title"),
        "chip_rows": lambda: call(costs.chip_rows, chips()[:6], "fp32"),
        "chip_table": lambda: call(costs.chip_table, chips()[:6], "fp32"),
        "plot_chip_map": lambda: call(costs.plot_chip_map, chips()[:6], "fp32", (40.0, 2e11, "here")),
        "cost_explorer": lambda: call(costs.cost_explorer, chips()[:6]),
    }),
    **within("cost.shapes", {
        "ModelShape": lambda: call(footprint.ModelShape, "tiny", 2, 64, 4, 2, 128, 100, True, False,
                                   256, "https://example.org", 16, 4, 2, 1, 32, 1, 8, 4, 2, 16, 1, 1.5, 0.5,
                                   "https://example.org/card", text="name source_url params_source_url",
                                   zero="head_dim n_shared_experts n_dense_layers kv_lora_rank q_lora_rank "
                                        "rope_head_dim"),
        "ModelShape.mlp_params": lambda: call(shape().mlp_params, 32),
        "load_shapes": lambda: call(footprint.load_shapes, footprint.SHAPES_CSV),
        "get_shape": lambda: call(footprint.get_shape, "Llama-3-8B", footprint.SHAPES_CSV),
    }),
    **within("cost.footprint", {
        "kv_values_per_token_layer": lambda: call(footprint.kv_values_per_token_layer, shape()),
        "activation_precision": lambda: call(footprint.activation_precision, "int4"),
        "kv_precision_for": lambda: call(footprint.kv_precision_for, "fp16", "int8"),
        "weights_bytes": lambda: call(footprint.weights_bytes, shape(), "int8"),
        "kv_cache_bytes": lambda: call(footprint.kv_cache_bytes, shape(), 2, 128, "fp16"),
        "activation_bytes": lambda: call(footprint.activation_bytes, shape(), 2, 128, "fp16",
                                         naive_attention=False, token_budget=64),
        "MemoryBreakdown": lambda: call(footprint.MemoryBreakdown, 1.0, 0.5, 0.25,
                                        zero="weights_gb activations_gb kv_cache_gb"),
        "MemoryBreakdown.as_dict": lambda: call(footprint.MemoryBreakdown(1.0, 0.5, 0.25).as_dict),
        "memory_breakdown": lambda: call(footprint.memory_breakdown, shape(), 2, 128, "fp16",
                                         kv_precision="int8", naive_attention=True, token_budget=64),
        "fits": lambda: call(footprint.fits, footprint.MemoryBreakdown(1.0, 0.5, 0.25), 16.0, 0.1,
                             zero="reserve_fraction"),
        "max_batch_size": lambda: call(footprint.max_batch_size, shape(), 128, 1.0, "fp16",
                                       reserve_fraction=0.1, naive_attention=True, limit=1024,
                                       token_budget=64, zero="reserve_fraction"),
        "oom_fix": lambda: call(footprint.oom_fix, shape(), 2, 128, 1.0, "fp16"),
        "plot_memory": lambda: call(footprint.plot_memory, shape(), 2, 128, "fp16", 1.0, True),
        "memory_explorer": lambda: call(footprint.memory_explorer, {"T4": 16.0}, [shape()]),
    }),
    **within("cost.phases", {
        "matmul_params": lambda: call(phases.matmul_params, shape()),
        "active_matmul_params": lambda: call(phases.active_matmul_params, moe_shape()),
        "kv_bytes_per_token": lambda: call(phases.kv_bytes_per_token, shape(), "int8"),
        "PhaseCost": lambda: call(phases.PhaseCost, "decode", 1e9, 1e9, 1, 0.5, zero="kv_bytes"),
        "PhaseCost.time_s": lambda: call(phases.PhaseCost("decode", 1e9, 1e9, 1, 0.5).time_s, 1e12, 10.0),
        "PhaseCost.bound": lambda: call(phases.PhaseCost("decode", 1e9, 1e9, 1, 0.5).bound, 1e12, 10.0),
        "prefill_cost": lambda: call(phases.prefill_cost, shape(), 16, 2, "fp16", "int8"),
        "decode_cost": lambda: call(phases.decode_cost, shape(), 16, 2, "fp16", "int8"),
        "decode_tokens_per_s_bound": lambda: call(phases.decode_tokens_per_s_bound, shape(), 16, 20.0, 2,
                                                  "fp16", "int8"),
        "kv_crossover_context": lambda: call(phases.kv_crossover_context, shape(), 2, "fp16", "int8"),
        "kv_report": lambda: call(phases.kv_report, shape(), "fp16", (1, 16)),
        "phase_table": lambda: call(phases.phase_table, [shape()], 16, 32, 2, "fp16", 1e12, 20.0),
        "serving_step_costs": lambda: call(phases.serving_step_costs, shape(), 20.0, 1e12, "fp16", 64,
                                           "int8"),
    }),
    **within("cost.moe", {
        "expected_distinct_experts": lambda: call(moe.expected_distinct_experts, 32, 2, 8),
        "simulate_distinct_experts": lambda: call(moe.simulate_distinct_experts, 8, 2, 4, trials=20,
                                                  popularity=[1.0] * 8, seed=1, zero="seed", huge="seed"),
        "weight_bytes_read": lambda: call(moe.weight_bytes_read, moe_shape(), 4, "int8"),
        "expert_parallel_bytes": lambda: call(moe.expert_parallel_bytes, moe_shape(), 4, 2, "bf16"),
    }),
    **within("cost.communication", {
        "AlphaBeta": lambda: call(communication.AlphaBeta, 1e-5, 10.0, zero="latency_s"),
        "AlphaBeta.time_s": lambda: call(communication.AlphaBeta(1e-5, 10.0).time_s, 1e6, zero="n_bytes"),
        "fit_alpha_beta": lambda: call(communication.fit_alpha_beta, [1e3, 1e5, 1e6], [1e-4, 2e-4, 1e-3],
                                       zero="sizes_bytes"),
        "allreduce_time_s": lambda: call(communication.allreduce_time_s, 1e6, 4, 100.0, 1e-6,
                                         zero="n_bytes latency_s"),
        "all_to_all_time_s": lambda: call(communication.all_to_all_time_s, 1e6, 4, 100.0, 1e-6,
                                          zero="n_bytes latency_s"),
    }),
    **within("cost.tensor_parallel", {
        "degrees": lambda: call(tensor_parallel.degrees, shape(), 8),
        "sizing_table": lambda: call(tensor_parallel.sizing_table, [shape()], specs.get_chip("h100 sxm"), 128,
                                     2, ("bf16", "int8")),
        "memory_per_chip_bytes": lambda: call(tensor_parallel.memory_per_chip_bytes, shape(), 2, 128, 2,
                                              "bf16", "int8"),
        "smallest_tp": lambda: call(tensor_parallel.smallest_tp, shape(), specs.get_chip("h100 sxm"), 128, 2,
                                    "bf16", "int8", reserve_fraction=0.1, max_tp=4, zero="reserve_fraction"),
        "decode_bound": lambda: call(tensor_parallel.decode_bound, shape(), specs.get_chip("h100 sxm"), 2,
                                     128, 2, "bf16", "int8", act_precision="fp16", latency_s=1e-6,
                                     link_gbs=50.0, zero="latency_s"),
        "plot_tp_scaling": lambda: call(tensor_parallel.plot_tp_scaling, shape(), specs.get_chip("h100 sxm"),
                                        128, 2, "bf16", 1.0, 4, zero="latency_us"),
        "tp_explorer": lambda: call(tensor_parallel.tp_explorer, [shape()], [specs.get_chip("h100 sxm")],
                                    opaque="shapes chips"),
    }),
    **within("cost.pipeline", {
        "bubble_fraction": lambda: call(pipeline_cost.bubble_fraction, 4, 8),
        "pipeline_time_s": lambda: call(pipeline_cost.pipeline_time_s, 1e-3, 4, 8),
        "measured_bubble": lambda: call(pipeline_cost.measured_bubble, [0.4, 0.3], 0.5, zero="busy_s"),
    }),
    **within("cost.disaggregation", {
        "kv_transfer_s": lambda: call(disaggregation.kv_transfer_s, shape(), 128, 50.0, "fp8_e4m3", 1e-5,
                                      zero="latency_s"),
        "prefill_s": lambda: call(disaggregation.prefill_s, shape(), 128, specs.get_chip("h100 sxm"), "bf16",
                                  "fp8_e4m3"),
        "breakeven_link_gbs": lambda: call(disaggregation.breakeven_link_gbs, shape(),
                                           specs.get_chip("h100 sxm"), "bf16", "fp8_e4m3"),
        "compare": lambda: call(disaggregation.compare, shape(), specs.get_chip("h100 sxm"), [16, 128], 50.0,
                                "bf16", "fp8_e4m3", 1e-5, zero="latency_s"),
        "plot_handoff": lambda: call(disaggregation.plot_handoff, {"link": disaggregation.compare(
            shape(), specs.get_chip("h100 sxm"), [16, 128], 50.0)}, "t", text="title", opaque="rows_by_link"),
    }),
    **within("cost.energy", {
        "joules_per_token": lambda: call(energy.joules_per_token, 700.0, 1000.0),
        "usd_per_million_tokens": lambda: call(energy.usd_per_million_tokens, 2.0, 1000.0, 8),
        "electricity_usd_per_million_tokens": lambda: call(energy.electricity_usd_per_million_tokens, 0.5,
                                                           0.2),
        "token_costs": lambda: call(energy.token_costs, 1000.0, 4, 700.0, 2.0, "a price", text="price_note"),
    }),
    **within("machine.power", {
        "Meter": lambda: call(power.Meter, "counter", lambda: 1.0, 100.0, text="name"),
        "Meter.joules_between": lambda: call(power.Meter("counter", lambda: 1.0, 100.0).joules_between, 1.0,
                                             2.0, zero="start_j end_j"),
        "rapl_meters": lambda: call(power.rapl_meters, str(TMP), text="root"),
        "nvml_meters": lambda: call(power.nvml_meters, "libno-such-nvml.so", text="library"),
        "meters": lambda: call(power.meters),
        "absent_reason": lambda: call(power.absent_reason),
        "measure": lambda: call(power.measure, noop, [power.Meter("counter", lambda: 1.0)]),
    }),
    **within("cost.paging", {
        "request_lengths": lambda: call(paging.request_lengths, 20, 10.0, 16, 0, zero="seed"),
        "held_tokens": lambda: call(paging.held_tokens, [5, 17, 3], "paged", 32, 8),
        "allocate": lambda: call(paging.allocate, [5, 17, 3], 64, "paged", 32, 8),
        "compare_policies": lambda: call(paging.compare_policies, [5, 17, 3], 64, 32, 8),
        "paging_report": lambda: call(paging.paging_report, [5, 17, 3], 64, 32, 8),
        "plot_policies": lambda: call(paging.plot_policies, paging.compare_policies([5, 17, 3], 64, 32, 8)),
        "paging_explorer": lambda: call(paging.paging_explorer, 131072.0, 50.0, 100, 0, zero="seed",
                                        bounded="kv_bytes_per_token"),
    }),
    **within("cost.serving", {
        "mixed_requests": lambda: call(serving.mixed_requests, 20, 10.0, 4, 64, 0.2, 4.0, 0,
                                       zero="long_fraction seed", bounded="long_fraction"),
        "simulate_chunked_prefill": lambda: call(serving.simulate_chunked_prefill, [0.0, 5.0], [8, 200],
                                                 [20, 5], 4, 1.0, 0.1, 16, 0.5, 0.2,
                                                 zero="arrivals weight_read_ms kv_read_per_seq_ms "
                                                      "step_overhead_ms"),
        "mixed_step_ms": lambda: call(serving.mixed_step_ms, 4, 16, 1.0, 0.1, 0.5, 0.2,
                                      zero="decoding prefill_tokens weight_read_ms kv_read_per_seq_ms "
                                           "step_overhead_ms"),
        "tokens_at_ridge": lambda: call(serving.tokens_at_ridge, 1.0, 0.01, 4, 0.1,
                                        zero="weight_read_ms decoding kv_read_per_seq_ms"),
        "PhaseLatencyStats.percentile": lambda: call(phase_runs()["whole prompts"].percentile, "tpot", 99.0,
                                                     zero="q", bounded="q"),
        "chunked_prefill_explorer": lambda: call(serving.chunked_prefill_explorer, 1.0, 0.1,
                                                 chunked_requests(), 4, 0.5, 0.2,
                                                 zero="weight_read_ms kv_read_per_seq_ms step_overhead_ms",
                                                 opaque="requests"),
        "plot_phase_latencies": lambda: call(serving.plot_phase_latencies, phase_runs()),
        "arrivals_ms": lambda: call(serving.arrivals_ms, 100.0, 50, 1, zero="seed"),
        "simulate_dynamic_batching": lambda: call(serving.simulate_dynamic_batching, 100.0, 8, 2.0, 1.0,
                                                  0.5, n_requests=50, seed=0, batch_ms=[1.0] * 8,
                                                  zero="max_wait_ms overhead_ms per_item_ms seed"),
        "plot_latency_histogram": lambda: call(serving.plot_latency_histogram, serving_stats(),
                                               label="l", text="label"),
        "serving_report": lambda: call(serving.serving_report, 100.0, 8, 2.0, 1.0, 0.5, 0, batch_ms=[1.0] * 8,
                                       zero="max_wait_ms overhead_ms per_item_ms seed"),
        "output_lengths": lambda: call(serving.output_lengths, 20, 5.0, 0, zero="seed"),
        "simulate_generation": lambda: call(serving.simulate_generation, [3, 1, 4, 1, 5], 2, 1.0, 0.5,
                                            continuous=True, zero="step_overhead_ms step_per_item_ms"),
        "serving_explorer": lambda: call(serving.serving_explorer, 1.0, 0.5, 0,
                                         zero="overhead_ms per_item_ms seed"),
    }),
    **within("machine.bench", {
        "Measurement": lambda: call(bench.Measurement, "m", (0.001, 0.002), 2, "cpu", text="label",
                                    zero="times_s"),
        "resolve_device": lambda: call(bench.resolve_device, "cpu"),
        "sync": lambda: call(bench.sync, "cpu"),
        "threads": lambda: call(threads_block, 1),
        "compare": lambda: call(bench.compare, {"a": noop, "b": noop}, device="cpu", warmup=1,
                                repeats=2, number=3, clock=time.perf_counter, settle_s=0.001,
                                zero="warmup settle_s"),
        "time_fn": lambda: call(bench.time_fn, noop, label="x", device="cpu", warmup=1, repeats=2,
                                number=3, clock=time.perf_counter, zero="warmup", text="label"),
        "speedup": lambda: call(bench.speedup, measurement(), measurement()),
        "quantile": lambda: call(bench.quantile, [1.0, 3.0, 2.0], 0.25, signed="values", zero="q",
                                 bounded="q"),
        "plot_measurements": lambda: call(bench.plot_measurements, measure_three(), unit="us"),
    }),
    **within("machine.specs", {
        "Chip.peaks": lambda: call(chip().peaks),
        "Chip.peak_column": lambda: call(chip().peak_column, "int8"),
        "Chip.has_peak_column": lambda: call(chip().has_peak_column, "int8"),
        "Chip.peak": lambda: call(chip().peak, "int4"),
        "Chip.peak_flops": lambda: call(chip().peak_flops, "fp16"),
        "Chip.ridge_point": lambda: call(chip().ridge_point, "fp32"),
        "Chip.ceiling": lambda: call(chip().ceiling, "fp32", label="T4", text="label"),
        "Chip.to_dict": lambda: call(chip().to_dict),
        "load_chips": lambda: call(specs.load_chips, str(specs.CHIPS_CSV)),
        "get_chip": lambda: call(specs.get_chip, "h100 sxm", str(specs.CHIPS_CSV)),
        "chips_by_kind": lambda: call(specs.chips_by_kind, "cpu", str(specs.CHIPS_CSV)),
        "closest_chips": lambda: call(specs.closest_chips, 40.0, 2e11, 2, precision="fp32",
                                      path=str(specs.CHIPS_CSV)),
        "table": lambda: call(specs.table, chips()[:4], "fp16"),
        "compare_bandwidth": lambda: call(specs.compare_bandwidth, chip(), specs.get_chip("h100 sxm")),
        "datasheet_share": lambda: call(specs.datasheet_share, 20.0, chip(), "this machine", text="label"),
    }),
    **within("machine.card", {
        "spec_for_device_name": lambda: call(card.spec_for_device_name, "Tesla T4", chips(),
                                             text="device_name"),
        "format_flops": lambda: call(card.format_flops, 1.3e11, "OP/s", zero="flops", text="unit"),
        "widest_simd": lambda: call(card.widest_simd, ["AVX2", "FMA"]),
        "MachineCard.ridge_points": lambda: call(machine_card().ridge_points),
        "MachineCard.ceilings": lambda: call(machine_card().ceilings),
        "MachineCard.to_dict": lambda: call(machine_card().to_dict),
        "MachineCard.to_json": lambda: call(machine_card().to_json, 2, zero="indent"),
        "MachineCard.render": lambda: call(machine_card().render),
        "machine_card": lambda: call(card.machine_card, probe=True, device="cpu", precisions=["fp32"],
                                     quick=True, n_closest=2, probe_fn=fake_probe,
                                     machine=machine_info(), zero="n_closest"),
    }),
    **within("machine.hardware", {
        "MachineInfo.simd_meaning": lambda: call(machine_info().simd_meaning),
        "MachineInfo.to_dict": lambda: call(machine_info().to_dict),
        "MachineInfo.summary": lambda: call(machine_info().summary),
        "simd_from_flags": lambda: call(hardware.simd_from_flags, ["avx2", "fma"]),
        "parse_cpuinfo": lambda: call(hardware.parse_cpuinfo, "processor : 0\nflags : avx2 fma\n",
                                      text="text"),
        "parse_meminfo": lambda: call(hardware.parse_meminfo, "MemTotal: 1024 kB\n", text="text"),
        "parse_sysctl": lambda: call(hardware.parse_sysctl, "hw.memsize: 1024\n", text="text"),
        "read_text": lambda: call(hardware.read_text, "/proc/self/status", text="path"),
        "run_sysctl": lambda: call(hardware.run_sysctl),
        "cuda_gpus": lambda: call(hardware.cuda_gpus),
        "last_level_cache": lambda: call(hardware.last_level_cache, "cpu"),
        "mps_available": lambda: call(hardware.mps_available),
        "torch_info": lambda: call(hardware.torch_info),
        "ort_info": lambda: call(hardware.ort_info),
        "cpu_info": lambda: call(hardware.cpu_info),
        "machine": lambda: call(hardware.machine),
        "simd_meaning": lambda: call(hardware.simd_meaning, ["AVX2", "FMA"], "x86_64", text="arch"),
    }),
    **within("machine.probe", {
        "cache_sizes_bytes": lambda: call(probe.cache_sizes_bytes, probe.CPU_CACHE_DIR, text="root"),
        "last_level_cache_bytes": lambda: call(probe.last_level_cache_bytes, probe.CPU_CACHE_DIR,
                                               text="root"),
        "default_array_mb": lambda: call(probe.default_array_mb, "cpu"),
        "triad_bytes": lambda: call(probe.triad_bytes, 1024, "fp32"),
        "memory_bandwidth_gbs": lambda: call(probe.memory_bandwidth_gbs, "cpu", size_mb=1.0, repeats=2,
                                             precision="fp32", clock=time.perf_counter,
                                             bounded="size_mb"),
        "matmul_flops": lambda: call(probe.matmul_flops, "fp32", "cpu", 32, quick=True,
                                     budget_s=0.5, clock=time.perf_counter, bounded="budget_s"),
        "Ceilings.peak_flops": lambda: call(ceilings().peak_flops, "fp32"),
        "Ceilings.ridge_point": lambda: call(ceilings().ridge_point, "fp32"),
        "Ceilings.to_ceiling": lambda: call(ceilings().to_ceiling, "fp32", label="here", text="label"),
        "Ceilings.to_dict": lambda: call(ceilings().to_dict),
        "Ceilings.method": lambda: call(ceilings().method),
        "Ceilings.provenance": lambda: call(ceilings().provenance, 1.8e9),
        # The valid call measures bandwidth on arrays 4x the last-level cache and matmuls for seconds (see
        # tests/machine/test_probe.py); the bad values are refused before any measuring.
        "probe": lambda: call(probe.probe, "cpu", ["fp32"], True, threads=1, progress=False,
                              run_valid=False),
        "ceilings": lambda: call(probe.ceilings, "cpu", ["fp32"], quick=True, fresh=False, max_age_s=60.0,
                                 zero="max_age_s", bounded="max_age_s", run_valid=False),
    }),
    **within("models.classifier", {
        "load_digits": lambda: call(classifier.load_digits, 0.25, 1, zero="seed"),
        "make_classifier": lambda: call(classifier.make_classifier, 16, 1, 0, zero="seed"),
        "train": lambda: call(classifier.train, net(), digits(), 1, 0.01, 512, 0, zero="seed"),
        "train_digits_classifier": lambda: call(classifier.train_digits_classifier, 8, 1, 1, 0,
                                                zero="seed"),
        "predict_labels": lambda: call(classifier.predict_labels, net(), digits().x_test[:8],
                                       signed="x"),
        "accuracy": lambda: call(classifier.accuracy, net(), digits().x_test[:8],
                                 digits().y_test[:8], signed="x", zero="y"),
        "agreement": lambda: call(classifier.agreement, net(), net(), digits().x_test[:8],
                                  signed="x"),
    }),
    **within("experiments.decode", {
        "weights_gb": lambda: call(decode.weights_gb, 7e9, 2.0),
        "tokens_per_s_estimate": lambda: call(decode.tokens_per_s_estimate, 7e9, 2.0, 100.0),
        "size_and_speed_report": lambda: call(decode.size_and_speed_report, 7e9, 2.0, 100.0),
        "DecodeStack": lambda: call(decode.DecodeStack, stack().layers, stack().x,
                                    signed="layers x"),
        "DecodeStack.weight_bytes": lambda: call(stack().weight_bytes, "int4_g32"),
        "layers_for_working_set": lambda: call(decode.layers_for_working_set, 64, 1e6, 0.5),
        "make_stack": lambda: call(decode.make_stack, 64, 2, 0, zero="seed"),
        "reference": lambda: call(decode.reference, stack()),
        "relative_error": lambda: call(decode.relative_error, [1.0, 2.0], [1.0, 2.5],
                                       signed="y y_ref"),
        "numpy_step": lambda: call(decode.numpy_step, stack()),
        "torch_step": lambda: call(decode.torch_step, stack(), "cpu", "bf16"),
        "int8_model_bytes": lambda: call(decode.int8_model_bytes, stack()),
        "nbits_model_bytes": lambda: call(decode.nbits_model_bytes, stack(), 8, 32, 4,
                                          zero="accuracy_level"),
        "nbits_format": lambda: call(decode.nbits_format, 4, 32),
        "ort_step": lambda: call(decode.ort_step, int8_session(), stack()),
        "storage_precisions": lambda: call(decode.storage_precisions, 64),
        "prediction_table": lambda: call(decode.prediction_table, stack(), 20.0),
        "decode_paths": lambda: call(decode.decode_paths, stack(), "cpu", 1),
        "check_paths": lambda: call(decode.check_paths, decode_result().paths, stack()),
        "DecodeResult.achieved_gbs": lambda: call(decode_result().achieved_gbs, "int8 numpy"),
        "DecodeResult.speedup": lambda: call(decode_result().speedup, "int8 numpy", "fp32 numpy"),
        "DecodeResult.best": lambda: call(decode_result().best, "int8"),
        "DecodeResult.fastest_on": lambda: call(decode_result().fastest_on, "cpu"),
        "DecodeResult.vs_prediction": lambda: call(decode_result().vs_prediction, 20.0),
        "DecodeResult.table": lambda: call(decode_result().table),
        "time_paths": lambda: call(decode.time_paths, decode_result().paths, "cpu", 2, 0.0,
                                   zero="settle_s"),
        "int8_verdict": lambda: call(decode.int8_verdict, decode_result(), 20.0, ("AVX2",)),
        "memory_or_compute": lambda: call(decode.memory_or_compute, 10.0, 20.0, 0.5),
        "speed_explorer": lambda: call(decode.speed_explorer, 20.0, chips()[:4]),
    }),
    **within("experiments.fusion", {
        "Chain": lambda: call(fusion.Chain, torch.ones(4), 0.5, signed="bias scale", zero="scale"),
        "chain_inputs": lambda: call(fusion.chain_inputs, 4, 8, "cpu", 0, zero="seed"),
        "cache_bytes": lambda: call(fusion.cache_bytes, "cpu"),
        "chain_shape": lambda: call(fusion.chain_shape, "cpu", cache_multiple=4.0, cols=1024),
        "gelu_elements_per_s": lambda: call(fusion.gelu_elements_per_s, "cpu", 4096, repeats=2,
                                            clock=time.perf_counter),
        "ChainPrediction": lambda: call(fusion.ChainPrediction, roofline.ElementwiseRoofs(1e-3, 2e-3), 1e-3,
                                        zero="other_memory_s"),
        "chain_roofs": lambda: call(fusion.chain_roofs, 1 << 20, 20.0, 1e9, fused=False, n_passes=9),
        "bound_sentence": lambda: call(fusion.bound_sentence, chain_prediction(), 20.0, 1e9),
        "passes": lambda: call(fusion.passes, 4, 1, fused=True, zero="extra_inputs"),
        "bytes_moved": lambda: call(fusion.bytes_moved, 1024, fused=False, n_ops=4, extra_inputs=1,
                                    bytes_per_element=2.0, zero="extra_inputs"),
        "predicted_speedup": lambda: call(fusion.predicted_speedup, 4, 1, zero="extra_inputs"),
        "predicted_time_ms": lambda: call(fusion.predicted_time_ms, 1e6, 20.0, zero="n_bytes"),
        "fusion_prediction": lambda: call(fusion.fusion_prediction, 16.0, 4, 20.0, 1,
                                          bounded="size_mb", zero="extra_inputs"),
        "plot_fusion_prediction": lambda: call(fusion.plot_fusion_prediction, 16.0, 4, 20.0, 1,
                                               bounded="size_mb", zero="extra_inputs"),
        "first_call_s": lambda: call(fusion.first_call_s, noop, "cpu"),
        "max_abs_error": lambda: call(fusion.max_abs_error, torch.ones(3), torch.zeros(3),
                                      signed="candidate reference"),
        "fusion_explorer": lambda: call(fusion.fusion_explorer, 20.0),
        "report_rows": lambda: call(fusion.report_rows, measure_three(), 1024, {"a": 9, "b": 3}, 20.0,
                                    "b", gelus_per_s=1e9, fused_labels=["b"]),
        "format_report": lambda: call(fusion.format_report,
                                      fusion.report_rows(measure_three(), 1024, {"a": 9, "b": 3},
                                                         20.0), opaque="rows"),
        "fresh_output_sentence": lambda: call(fusion.fresh_output_sentence, chain_rows(), "compiled",
                                              "compiled, out given", opaque="rows"),
        "fusion_verdict": lambda: call(fusion.fusion_verdict, chain_rows(), "compiled", "compiled, out given",
                                       opaque="rows"),
    }),
    **within("kernels.lowbit_gemv", {
        "runnable_paths": lambda: call(lowbit_gemv.runnable_paths, ["AVX2", "FMA"], "x86_64", text="arch"),
        "best_path": lambda: call(lowbit_gemv.best_path, ["AVX2", "FMA"], "x86_64", text="arch"),
        "path_flags": lambda: call(lowbit_gemv.path_flags, "avx2"),
        "build": lambda: call(lowbit_gemv.build, None, lowbit_gemv.PORTABLE_FLAGS, TMP, text="cc"),
        "open_library": lambda: call(lowbit_gemv.open_library, lowbit_gemv.build()),
        "unavailable_reason": lambda: call(lowbit_gemv.unavailable_reason),
        "kernel_path": lambda: call(lowbit_gemv.kernel_path, kernel_library()),
        "path_report": lambda: call(lowbit_gemv.path_report, kernel_library()),
        "quantize_weight": lambda: call(lowbit_gemv.quantize_weight, square_weight(), "int4", signed="w"),
        "pack_int8": lambda: call(lowbit_gemv.pack_int8, lowbit_gemv.quantize_weight(square_weight(),
                                                                                       "int8")),
        "pack_int4": lambda: call(lowbit_gemv.pack_int4, lowbit_gemv.quantize_weight(square_weight(),
                                                                                       "int4")),
        "emulate": lambda: call(lowbit_gemv.emulate, stack(), "int4"),
        "step_fn": lambda: call(lowbit_gemv.step_fn, stack(), "int8", 1, kernel_library()),
        "gemv_f32": lambda: call(lowbit_gemv.gemv_f32, square_weight(), stack().x, stack().x, 1,
                                 kernel_library(), signed="w x bias"),
        "default_threads": lambda: call(lowbit_gemv.default_threads),
        "PathComparison.speedup": lambda: call(path_comparison().speedup, "int8"),
        "PathComparison.verdict": lambda: call(path_comparison().verdict),
        "compare_paths": lambda: call(lowbit_gemv.compare_paths, stack(), "avx2", ("int8",), 1, 2),
    }),
    **within("kernels.ort", {
        "quiet_exporter": lambda: call(ort.quiet_exporter),
        "temp_dir": lambda: call(ort.temp_dir, "hwopt-test-", text="prefix"),
        "remove_temp_dirs": lambda: call(ort.remove_temp_dirs),
        "remove_stale_temp_dirs": lambda: call(ort.remove_stale_temp_dirs, TMP, text="folder"),
        # The valid call runs the dynamo exporter for seconds (tests/test_ort.py); bad values are refused
        # before it starts.
        "export_onnx": lambda: call(ort.export_onnx, torch.nn.Linear(4, 2), (torch.zeros(1, 4),),
                                    TMP / "export.onnx", dynamic_batch=True, input_names=["x"],
                                    signed="example_inputs", run_valid=False),
        "file_size_bytes": lambda: call(ort.file_size_bytes, onnx_path()),
        "session_options": lambda: call(ort.session_options, threads=1, opt_level="basic",
                                        optimized_model_path=TMP / "opt.onnx", allow_spinning=False),
        "providers_for": lambda: call(ort.providers_for, "cuda", ["CPUExecutionProvider"]),
        "make_session": lambda: call(ort.make_session, onnx_path(), threads=1, opt_level="all",
                                     device="cpu", providers=["CPUExecutionProvider"]),
        "run": lambda: call(ort.run, session(), np.ones((2, 4), dtype=np.float32)),
        "Predictor": lambda: call(ort.Predictor, session()),
        "runs_on": lambda: call(ort.runs_on, session()),
        "optimized_graph": lambda: call(ort.optimized_graph, onnx_path(), "extended", threads=1),
        "node_counts": lambda: call(ort.node_counts, onnx_path()),
        "new_node_types": lambda: call(ort.new_node_types, ort.node_counts(onnx_path()),
                                       ort.node_counts(onnx_path())),
        "quantize_dynamic": lambda: call(ort.quantize_dynamic, onnx_path(), weight_type="quint8",
                                         reduce_range=True, per_channel=False,
                                         out_path=TMP / "dynamic.onnx"),
        "ArrayCalibrationReader": lambda: call(ort.ArrayCalibrationReader, "x", np.ones((4, 4)), 2,
                                               signed="data", text="input_name"),
        "ArrayCalibrationReader.get_next": lambda: call(ort.ArrayCalibrationReader("x",
                                                                                  np.ones((4, 4))).get_next),
        "ArrayCalibrationReader.rewind": lambda: call(ort.ArrayCalibrationReader("x",
                                                                                np.ones((4, 4))).rewind),
        "quantize_static": lambda: call(ort.quantize_static, onnx_path(), np.ones((4, 4), np.float32),
                                        batch_size=2, per_channel=False, reduce_range=False,
                                        out_path=TMP / "static.onnx", signed="calibration_data"),
        "linear_model": lambda: call(ort.linear_model, np.eye(4, dtype=np.float32), TMP / "l.onnx",
                                     signed="weight", zero="weight"),
        "int8_saturation_probe": lambda: call(ort.int8_saturation_probe, 16, 2, 0, 1, zero="seed"),
        "matmul_integer_weights": lambda: call(ort.matmul_integer_weights,
                                               quantized("int8", per_channel=True, symmetric=False)),
        "matmul_nbits_weights": lambda: call(ort.matmul_nbits_weights, quantized("int4_g32")),
        "decode_step_model": lambda: call(ort.decode_step_model,
                                          [quantized("int8_g32"), quantized("int4", block=16)], 0,
                                          zero="accuracy_level"),
        "tensorrt_available": lambda: call(ort.tensorrt_available, ["CPUExecutionProvider"]),
        "tensorrt_status": lambda: call(ort.tensorrt_status, ["CPUExecutionProvider"], gpu=False,
                                        tensorrt_package=False),
        # Without TensorRT the valid calls cannot run; bad values are refused before the provider check.
        "tensorrt_fp16_session": lambda: call(ort.tensorrt_fp16_session, onnx_path(), cache_dir=TMP,
                                              available=["TensorrtExecutionProvider"], run_valid=False),
        "tensorrt_fp16_check": lambda: call(ort.tensorrt_fp16_check, onnx_path(), np.ones((2, 4)),
                                            np.ones((2, 4)), tolerance=0.01,
                                            available=["TensorrtExecutionProvider"], run_valid=False,
                                            signed="x reference"),
    }),
    **within("experiments.precision", {
        "bytes_per_weight": lambda: call(precision.bytes_per_weight, "int4"),
        "torch_int8_api": lambda: call(precision.torch_int8_api),
        "quantization_error": lambda: call(precision.quantization_error, weight(), 8, signed="w"),
        "error_summary": lambda: call(precision.error_summary, weight(), 8, signed="w"),
        "linear_layers": lambda: call(precision.linear_layers, net()),
        "quantize_model_weights": lambda: call(precision.quantize_model_weights, net(), 4,
                                               per_channel=True, symmetric=True, keep=["0"],
                                               keep_bits=8),
        "model_size_bytes": lambda: call(precision.model_size_bytes, net(), 4, keep=["0"],
                                         keep_bits=8, per_channel=True),
        "accuracy_vs_bits": lambda: call(precision.accuracy_vs_bits, net(), digits(), (8, 4),
                                         per_channel=False, symmetric=True, keep=()),
        "layer_sensitivity": lambda: call(precision.layer_sensitivity, net(), digits(), 2,
                                          per_channel=False, symmetric=True),
        "in_dtype": lambda: call(precision.in_dtype, net(), "bf16", "cpu"),
        "torch_dynamic_int8": lambda: call(precision.torch_dynamic_int8, net()),
        "compare_variants": lambda: call(precision.compare_variants, {"a": net(), "b": net()},
                                         digits(), sizes_bytes={"a": 100.0}, timed=["a"],
                                         batch_size=16, reference="b", device="cpu", repeats=2),
        "format_variants": lambda: call(precision.format_variants, precision.compare_variants(
{"a": net()}, digits(), batch_size=16, repeats=2), opaque="rows"),
        "half_precision_verdict": lambda: call(precision.half_precision_verdict, 1e11, 1e9,
                                               "bf16", text="precision"),
        "int8_saturation_verdict": lambda: call(precision.int8_saturation_verdict, 0.08, 0.02,
                                                True, zero="max_error_signed max_error_reduced"),
        "plot_error_map": lambda: call(precision.plot_error_map, weight(), 4, per_channel=True,
                                       symmetric=False, accuracy_value=0.9, signed="w",
                                       zero="accuracy_value"),
        "plot_accuracy_cliff": lambda: call(precision.plot_accuracy_cliff,
                                            {"per-tensor": {8: 0.97, 4: 0.6}}, 0.98,
                                            zero="reference"),
        "precision_explorer": lambda: call(precision.precision_explorer, net(), digits(), "2"),
    }),
    **within("experiments.fake_quant", {
        "relative_rmse": lambda: call(fake_quant.relative_rmse, weight() * 1.1, weight(),
                                      signed="approx exact"),
        "predicted_relative_rmse": lambda: call(fake_quant.predicted_relative_rmse, weight(), "nvfp4", 32,
                                                signed="x"),
        "format_errors": lambda: call(fake_quant.format_errors, weight(), ["int4_g32", "mxfp4"], signed="w"),
        "plot_value_grids": lambda: call(fake_quant.plot_value_grids, ("mxfp4", "fp8_e4m3")),
        "plot_error_vs_bits": lambda: call(fake_quant.plot_error_vs_bits,
                                           [{"precision": "int4_g32", "bits_per_weight": 5.0,
                                             "relative_rmse": 0.1}]),
        "plot_format_error_map": lambda: call(fake_quant.plot_format_error_map, weight(), "mxfp4", 16,
                                              signed="w"),
        "format_explorer": lambda: call(fake_quant.format_explorer, weight(), signed="w"),
    }),
    **within("experiments.outliers", {
        "heavy_tailed_weights": lambda: call(outliers.heavy_tailed_weights, 8, 16, 4.0, 0, zero="seed",
                                             bounded="df"),
        "with_outlier_channels": lambda: call(outliers.with_outlier_channels, net(), "2", 2, 10.0, 0,
                                              zero="seed", bounded="factor"),
        "layer_inputs": lambda: call(outliers.layer_inputs, net(), digits().x_test[:4], signed="x"),
        "outlier_channels": lambda: call(outliers.outlier_channels, weight(), 6.0, signed="x",
                                         bounded="threshold"),
        "quantize_activations": lambda: call(outliers.quantize_activations, weight(), 8, True, signed="x"),
        "smoothing_scales": lambda: call(outliers.smoothing_scales, weight(), weight(), 0.5, signed="x w",
                                         zero="alpha", bounded="alpha"),
        "w8a8_output": lambda: call(outliers.w8a8_output, weight(), weight(), "smoothquant", 0.5, 8,
                                    signed="x w", zero="alpha", bounded="alpha"),
        "w8a8_model": lambda: call(outliers.w8a8_model, net(), digits().x_test[:8], "smoothquant", 0.5, 8,
                                   signed="calibration_x", zero="alpha", bounded="alpha"),
        "awq_search": lambda: call(outliers.awq_search, weight(), weight(), "int4_g32", 4, signed="x w"),
        "weight_only_model": lambda: call(outliers.weight_only_model, net(), "mxfp4", digits().x_test[:8], 3,
                                          signed="awq_x"),
        "accuracy_vs_outliers": lambda: call(outliers.accuracy_vs_outliers, net(), digits(), "2", (1.0, 10.0),
                                             2, 32),
        "plot_accuracy_vs_outliers": lambda: call(outliers.plot_accuracy_vs_outliers,
                                                  {"per-tensor": {1.0: 0.97, 100.0: 0.6}}, 0.98,
                                                  zero="reference"),
    }),
    **within("experiments.profiling", {
        "Pipeline": lambda: call(profiling.Pipeline, pipeline().model, pipeline().raw, 2, 0.5,
                                 "cpu", 1, bounded="io_ms", zero="io_ms raw"),
        "make_pipeline": lambda: call(profiling.make_pipeline, 4, 8, 8, 2, 0.0, "cpu", 0, 1,
                                      zero="io_ms seed", bounded="io_ms"),
        "read_item": lambda: call(profiling.read_item, pipeline(), 1, zero="i"),
        "preprocess_item": lambda: call(profiling.preprocess_item, pipeline().raw[0], zero="raw"),
        "preprocess_batch": lambda: call(profiling.preprocess_batch, pipeline().raw, zero="raw"),
        "run_pipeline": lambda: call(profiling.run_pipeline, pipeline(), prefetch=True,
                                     batched=True, workers=2),
        "slow_pipeline": lambda: call(profiling.slow_pipeline, pipeline()),
        "fixed_pipeline": lambda: call(profiling.fixed_pipeline, pipeline(), 2),
        "profiler_activities": lambda: call(profiling.profiler_activities, "cpu"),
        "run_profiled": lambda: call(profiling.run_profiled, noop, "cpu"),
        "time_by_category_ms": lambda: call(profiling.time_by_category_ms, profiled(), 5.0,
                                            zero="wall_ms"),
        "hotspot": lambda: call(profiling.hotspot, {"data": 3.0, "compute": 1.0},
                                zero="times_ms"),
        "key_averages_table": lambda: call(profiling.key_averages_table, profiled(), 3),
        "save_trace": lambda: call(profiling.save_trace, profiled(), "trace", TMP / "traces",
                                   text="name"),
        "plot_time_by_category": lambda: call(profiling.plot_time_by_category,
                                              {"slow": {"data": 3.0, "compute": 1.0}},
                                              zero="by_pipeline"),
        "amdahl": lambda: call(profiling.amdahl, {"data": 3.0, "compute": 1.0}, "data", 4.0,
                               zero="times_ms"),
        "overall_speedup": lambda: call(profiling.overall_speedup, {"data": 3.0, "compute": 1.0},
                                        "data", 4.0, zero="times_ms"),
        "plot_amdahl": lambda: call(profiling.plot_amdahl, {"data": 3.0, "compute": 1.0},
                                    "data", 4.0, zero="times_ms"),
        "amdahl_explorer": lambda: call(profiling.amdahl_explorer, {"data": 3.0, "compute": 1.0},
                                        zero="times_ms"),
        "nsys_available": lambda: call(profiling.nsys_available),
        "nsys_command": lambda: call(profiling.nsys_command, "train.py", "report",
                                     text="script output"),
        # Needs NVIDIA Nsight Systems on PATH; bad values are refused before it is looked for.
        "run_nsys": lambda: call(profiling.run_nsys, "train.py", "report", 60.0,
                                 bounded="timeout_s", text="script output", run_valid=False),
        "nsys_stats_command": lambda: call(profiling.nsys_stats_command, "report", text="output"),
        "write_pipeline_script": lambda: call(profiling.write_pipeline_script, TMP / "p.py"),
    }),
    **within("traces", {
        "ns": lambda: call(traces.ns, 1.5, zero="us", signed="us"),
        "check_events": lambda: call(traces.check_events, "events", [ONE_EVENT], text="name", zero="events"),
        "trace_names": lambda: call(traces.trace_names, TMP / "traces"),
        "load_events": lambda: call(traces.load_events, "pipeline_fixed"),
        "variant": lambda: call(traces.variant, [ONE_EVENT], shift_us=-3.5, scale=2.0, drop_every=0,
                                tid=7, order_seed=0, zero="events drop_every order_seed", signed="shift_us",
                                bounded="scale"),
    }),
    **within("experiments.profile_traces", {
        "record": lambda: call(profile_traces.record, "pipeline_fixed",
                               {"n_items": 2, "batch_size": 1, "hidden": 4, "seed": 0}, 1),
        "trim": lambda: call(profile_traces.trim, {"traceEvents": [ONE_EVENT]}, {"name": "one"}, zero="trace",
                             opaque="recorded"),
        "provenance": lambda: call(profile_traces.provenance, "one", "pipeline_fixed",
                                   {"n_items": 2, "batch_size": 1, "hidden": 4, "seed": 0}, text="name"),
        "write_traces": lambda: call(profile_traces.write_traces, TMP / "traces", ["pipeline_fixed"], False),
    }),
    **within("experiments.roofline_points", {
        "matmul_sweep": lambda: call(roofline_points.matmul_sweep, (16, 32), "cpu",
                                     "fp32", False),
        "predicted_matmul_flops": lambda: call(roofline_points.predicted_matmul_flops, 256,
                                               1e12, 100.0, 2.0),
        "plot_matmul_sweep": lambda: call(roofline_points.plot_matmul_sweep, (16, 32),
                                          {"cpu": [1e9, 2e9]}, [2e9, 3e9]),
        "gemm_point": lambda: call(roofline_points.gemm_point, 256, 1e11, 4.0),
        "gemv_point": lambda: call(roofline_points.gemv_point, 64, 64, 1e-5, 1.0, "g", 2,
                                   text="label"),
        "triad_point": lambda: call(roofline_points.triad_point, 20.0),
        "intensity_table": lambda: call(roofline_points.intensity_table,
                                        [roofline_points.triad_point(20.0)], 1e12, 20.0),
    }),
    **within("experiments.distributed", {
        "backend_for": lambda: call(distributed.backend_for, "cpu", 2),
        "free_port": lambda: call(distributed.free_port),
        "loopback_interface": lambda: call(distributed.loopback_interface),
        "run": lambda: call(distributed.run, distributed.describe, 2, device="cpu", timeout_s=30.0, threads=1,
                            bounded="timeout_s", run_valid=False),  # starts processes: tests/experiments
        "describe": lambda: call(distributed.describe, distributed.Group(0, 1, "gloo", "cpu", 1), 0.0,
                                 zero="sleep_s", bounded="sleep_s"),
    }),
    **within("experiments.tensor_parallel_block", {
        "make_block": lambda: call(tensor_parallel_block.make_block, 32, 4, 64, 0, "cpu", zero="seed",
                                   huge="seed"),
        "shard": lambda: call(tensor_parallel_block.shard, block_weights(), 1, 2, zero="rank"),
        "block": lambda: call(tensor_parallel_block.block, torch.randn(2, 3, 32), block_weights(), noop_sum,
                              signed="x"),
        "measure_allreduce": lambda: call(tensor_parallel_block.measure_allreduce, 2, (1024, 4096), repeats=3,
                                          device="cpu", timeout_s=30.0, bounded="timeout_s", run_valid=False),
        "check_split": lambda: call(tensor_parallel_block.check_split, 2, d_model=32, n_heads=4, d_ff=64,
                                    batch=1, seq_len=2, seed=0, device="cpu", timeout_s=30.0, zero="seed",
                                    huge="seed", bounded="timeout_s", run_valid=False),
        "measure_block": lambda: call(tensor_parallel_block.measure_block, 2, (1, 2), d_model=32, n_heads=4,
                                      d_ff=64, repeats=3, seed=0, device="cpu", timeout_s=30.0, zero="seed",
                                      huge="seed", bounded="timeout_s", run_valid=False),
        "AllReduceSweep.table": lambda: call(allreduce_sweep().table),
        "AllReduceSweep.plot": lambda: call(allreduce_sweep().plot),
        "BlockTimes.message_bytes": lambda: call(block_times().message_bytes, 8),
        "BlockTimes.median_s": lambda: call(block_times().median_s, 8, "split"),
        "BlockTimes.predicted_s": lambda: call(block_times().predicted_s, 8,
                                               communication.AlphaBeta(1e-4, 1.0)),
        "BlockTimes.ratio": lambda: call(block_times().ratio, 1, communication.AlphaBeta(1e-4, 1.0)),
        "BlockTimes.report": lambda: call(block_times().report, communication.AlphaBeta(1e-4, 1.0)),
        "BlockTimes.plot": lambda: call(block_times().plot, communication.AlphaBeta(1e-4, 1.0)),
        "BlockTimes.verdict": lambda: call(block_times().verdict, communication.AlphaBeta(1e-4, 1.0)),
    }),
    **within("experiments.pipeline_parallel", {
        "make_stack": lambda: call(pipeline_parallel.make_stack, 2, 16, 0, "cpu", zero="seed", huge="seed"),
        "run_stack": lambda: call(pipeline_parallel.run_stack, pipeline_parallel.make_stack(2, 16),
                                  torch.randn(3, 16), signed="x", opaque="layers"),
        "measure_pipeline": lambda: call(pipeline_parallel.measure_pipeline, 2, (1, 2), n_layers=2,
                                         width=16, batch=4, repeats=3, seed=0, device="cpu", timeout_s=30.0,
                                         zero="seed", huge="seed", bounded="timeout_s", run_valid=False),
        "PipelineRun.measured_bubble": lambda: call(pipeline_run().measured_bubble, 4),
        "PipelineRun.predicted_bubble": lambda: call(pipeline_run().predicted_bubble, 4),
        "PipelineRun.report": lambda: call(pipeline_run().report),
        "PipelineRun.plot": lambda: call(pipeline_run().plot),
    }),
    **within("experiments.moe_layer", {
        "make_moe": lambda: call(moe_layer.make_moe, 32, 16, 8, 2, 0, zero="seed", huge="seed"),
        "route": lambda: call(moe_layer.route, moe_small(), torch.randn(3, 32), signed="x"),
        "forward": lambda: call(moe_layer.forward, moe_small(), torch.randn(3, 32), signed="x"),
        "count_distinct": lambda: call(moe_layer.count_distinct, moe_small(), 4, 10, 0, zero="seed",
                                       huge="seed"),
        "measure_moe": lambda: call(moe_layer.measure_moe, moe_small(), (1, 2), repeats=3, trials=5, seed=0,
                                    device="cpu", zero="seed", huge="seed"),
        "MoELayer.step_bytes": lambda: call(moe_small().step_bytes, 2, zero="distinct_experts"),
        "MoESweep.expected": lambda: call(moe_sweep().expected, 4),
        "MoESweep.step_bytes": lambda: call(moe_sweep().step_bytes, 4),
        "MoESweep.slowdown": lambda: call(moe_sweep().slowdown, 4),
        "MoESweep.report": lambda: call(moe_sweep().report),
        "MoESweep.plot": lambda: call(moe_sweep().plot),
    }),
    **within("experiments.parallel_summary", {
        "lesson_summary": lambda: call(parallel_summary.lesson_summary, allreduce_sweep(), block_times(),
                                       pipeline_run(), moe_sweep(), None, 100),
    }),
    **within("experiments.prefill_decode", {
        "shape_of": lambda: call(prefill_decode.shape_of, decoder()),
        "model_format": lambda: call(prefill_decode.model_format, decoder()),
        "kv_cache_nbytes": lambda: call(prefill_decode.kv_cache_nbytes, decoder()(torch.zeros(1, 3,
                                        dtype=torch.long))[1], opaque="caches"),
        "phase_steps": lambda: call(prefill_decode.phase_steps, decoder(), (4, 8), "cpu"),
        "measure_phases": lambda: call(prefill_decode.measure_phases, decoder(), (4, 8), "cpu", 1),
        "predicted_phases": lambda: call(prefill_decode.predicted_phases, phase_times(), 1e12, 20.0),
        "phase_report": lambda: call(prefill_decode.phase_report, phase_times(), 1e12, 20.0),
        "plot_phases": lambda: call(prefill_decode.plot_phases, phase_times(), 1e12, 20.0),
        "batch_for_kv_share": lambda: call(prefill_decode.batch_for_kv_share, decoder(), 16, 1.0,
                                           bounded="share"),
        "kv_passes_per_step": lambda: call(prefill_decode.kv_passes_per_step, decoder(), "cpu"),
        "ContextSweep.predicted_slowdowns": lambda: call(context_sweep().predicted_slowdowns),
        "ContextSweep.measured_slowdowns": lambda: call(context_sweep().measured_slowdowns),
        "ContextSweep.slowdown_ratio": lambda: call(context_sweep().slowdown_ratio),
        "predicted_slowdowns": lambda: call(prefill_decode.predicted_slowdowns, decoder(), (4, 8), 2, "cpu"),
        "context_steps": lambda: call(prefill_decode.context_steps, decoder(), (4, 8), 2, "cpu"),
        "decode_vs_context": lambda: call(prefill_decode.decode_vs_context, decoder(), (4, 8), 2, "cpu", 1),
        "context_report": lambda: call(prefill_decode.context_report, context_sweep(), 20.0, 1e11),
        "plot_decode_vs_context": lambda: call(prefill_decode.plot_decode_vs_context, context_sweep()),
        "quantize_kv": lambda: call(prefill_decode.quantize_kv, torch.randn(2, 3, 8), "int8",
                                    signed="tensor"),
        "kv_quantization_error": lambda: call(prefill_decode.kv_quantization_error, decoder(), 4, ("int8",),
                                              2, "cpu", 0, zero="seed"),
        "kv_precision_table": lambda: call(prefill_decode.kv_precision_table, kv_rows(), opaque="rows"),
        "serving_costs": lambda: call(prefill_decode.serving_costs, phase_times(), context_sweep()),
        "lesson_summary": lambda: call(prefill_decode.lesson_summary, phase_times(), context_sweep(),
                                       llm_kv_rows(), phase_runs(), opaque="kv_rows"),
    }),
    **within("machine.toolchain", {
        "c_compiler": lambda: call(toolchain.c_compiler, "gcc", text="cc"),
        "cxx_compiler": lambda: call(toolchain.cxx_compiler, "g++", text="cxx"),
        "cmake": lambda: call(toolchain.cmake, "cmake", text="path"),
        "cache_dir": lambda: call(toolchain.cache_dir),
    }),
    **within("models.mlp", {
        "make_mlp": lambda: call(mlp.make_mlp, 8, 2, in_features=4, out_features=3, seed=0, zero="seed"),
    }),
    **within("models.tiny_decoder", {
        "Block": lambda: call(tiny_decoder.Block, 16, 2),
        "TinyDecoder": lambda: call(tiny_decoder.TinyDecoder, 32, 16, 1, 2, 64),
        "make_tiny_decoder": lambda: call(tiny_decoder.make_tiny_decoder, 32, 16, 1, 2, 0,
                                          "cpu", zero="seed"),
        "weight_bytes_per_token": lambda: call(tiny_decoder.weight_bytes_per_token, decoder()),
        "generate": lambda: call(tiny_decoder.generate, decoder(),
                                 torch.tensor([[1, 2, 3]]), 4, zero="prompt"),
        "kv_bytes_read": lambda: call(tiny_decoder.kv_bytes_read, decoder(), 16, zero="context_len"),
        "check_new_tokens": lambda: call(tiny_decoder.check_new_tokens, decoder(), 4, 3, 1,
                                         zero="prompt_len minimum"),
        "TinyDecoder.gemv_runner": lambda: call(decoder().gemv_runner),
        "causal_mask_after": lambda: call(tiny_decoder.causal_mask_after, 3, 2, "cpu", zero="past"),
        "truncate_caches": lambda: call(tiny_decoder.truncate_caches,
                                        decoder()(torch.tensor([[1, 2, 3]]))[1], 2, zero="length",
                                        opaque="caches"),
    }),
    **within("experiments.decode_speed", {
        "measure_decode": lambda: call(decode_speed.measure_decode, decoder(), 4, 3, "cpu", 1),
        "estimated_tokens_per_s": lambda: call(decode_speed.estimated_tokens_per_s, decoder(),
                                               20.0, 16, zero="context_len"),
        "decode_steps": lambda: call(decode_speed.decode_steps, decoder(), 4, 3, "cpu"),
        "gemvs_alone": lambda: call(decode_speed.gemvs_alone, decoder(), 2),
        "decode_bytes_read": lambda: call(decode_speed.decode_bytes_read, decoder(), 4, 3),
        "compare_kernels": lambda: call(decode_speed.compare_kernels, decoder(), 20.0, 4, 3, 1),
        "bound_report": lambda: call(decode_speed.bound_report, decoder(), 1000.0, 20.0, 16,
                                     zero="context_len"),
    }),
    **within("cost.speculative", {
        "expected_tokens_per_step": lambda: call(speculative.expected_tokens_per_step, 0.7, 4,
                                                 zero="acceptance draft_len", bounded="acceptance"),
        "simulate_tokens_per_step": lambda: call(speculative.simulate_tokens_per_step, 0.7, 4, 100, 0,
                                                 zero="acceptance draft_len seed", bounded="acceptance"),
        "predicted_speedup": lambda: call(speculative.predicted_speedup, 0.7, 4, 0.2, 1.5,
                                          zero="acceptance draft_len cost_ratio",
                                          bounded="acceptance cost_ratio verify_ratio"),
        "best_draft_len": lambda: call(speculative.best_draft_len, 0.7, 0.2, 8,
                                       zero="acceptance cost_ratio", bounded="acceptance cost_ratio"),
        "acceptance_rate": lambda: call(speculative.acceptance_rate, [1, 4, 0], 4,
                                        zero="accepted_per_step"),
        "plot_speedup": lambda: call(speculative.plot_speedup, 0.7, 0.2, 4,
                                     zero="acceptance cost_ratio draft_len", bounded="acceptance cost_ratio"),
        "speedup_summary": lambda: call(speculative.speedup_summary, 0.7, 4, 0.2,
                                        zero="acceptance cost_ratio draft_len",
                                        bounded="acceptance cost_ratio"),
        "speculative_explorer": lambda: call(speculative.speculative_explorer, 0.2, zero="cost_ratio",
                                             bounded="cost_ratio"),
    }),
    **within("experiments.speculative_decoding", {
        "make_draft_and_target": lambda: call(sd.make_draft_and_target, 32, 16, 1, 1, 2, 0.5, 0,
                                              "cpu", zero="difference seed", bounded="difference"),
        "speculative_generate": lambda: call(sd.speculative_generate, *draft_and_target(),
                                             torch.tensor([[1, 2, 3]]), 6, 2, zero="prompt"),
        "checked_run": lambda: call(sd.checked_run, *draft_and_target(), torch.tensor([[1, 2, 3]]),
                                    6, 2, zero="prompt"),
        "random_prompt": lambda: call(sd.random_prompt, 32, 4, 0, "cpu", zero="seed"),
        "acceptance_by_difference": lambda: call(sd.acceptance_by_difference, [0.0, 1.0], 2, 4,
                                                 zero="differences", **SMALL_PAIR),
        "measure_step_costs": lambda: call(sd.measure_step_costs, *draft_and_target(), 2, 4, "cpu",
                                           1),
        "compare_generation": lambda: call(sd.compare_generation, *draft_and_target(),
                                           torch.tensor([[1, 2, 3]]), 4, 2, "cpu", 1, zero="prompt"),
        "predicted_over_measured": lambda: call(sd.predicted_over_measured, speculative_run(),
                                                step_costs(), generation_timings(), opaque="timings"),
        "speedup_report": lambda: call(sd.speedup_report, speculative_run(), step_costs(),
                                       generation_timings(), opaque="timings"),
    }),
    **within("experiments.attention", {
        "score_matrix_bytes": lambda: call(attention.score_matrix_bytes, 1024, 4, 1, 4),
        "attention_inputs": lambda: call(attention.attention_inputs, 8, 2, 4, 1, 0, "cpu", zero="seed"),
        "naive_attention": lambda: call(attention.naive_attention, *qkv(), signed="q k v", zero="q k v"),
        "sdpa": lambda: call(attention.sdpa, *qkv(), signed="q k v", zero="q k v"),
        "tiled_attention": lambda: call(attention.tiled_attention, *qkv(), 4, signed="q k v", zero="q k v"),
        "max_abs_difference": lambda: call(attention.max_abs_difference, *qkv(), signed="q k v",
                                           zero="q k v"),
        "peak_memory_bytes": lambda: call(attention.peak_memory_bytes, noop, "cpu"),
        "AttentionPoint.speedup": lambda: call(attention_points()[0].speedup, "sdpa"),
        "measure_attention": lambda: call(attention.measure_attention, [8, 16], 2, 4, ["naive", "sdpa"],
                                          "cpu", 1, opaque="variants"),
        "fresh_memory_gbs": lambda: call(attention.fresh_memory_gbs, 1 << 16, "cpu", 1),
        "predicted_naive_extra_s": lambda: call(attention.predicted_naive_extra_s, 1024, 4, 20.0, 2.0),
        "attention_table": lambda: call(attention.attention_table, attention_points(), 20.0, 2.0),
        "attention_sentence": lambda: call(attention.attention_sentence, attention_points()),
        "plot_attention": lambda: call(attention.plot_attention, attention_points()),
    }),
    **within("experiments.launch_overhead", {
        "time_per_call": lambda: call(launch_overhead.time_per_call, [1, 64], "cpu", 1),
        "fit_overhead": lambda: call(launch_overhead.fit_overhead, [1, 100, 10_000], [2e-6, 2.1e-6, 1.2e-5],
                                     zero="elements seconds"),
        "fit_measurements": lambda: call(launch_overhead.fit_measurements, add_times(),
                                         opaque="measurements"),
        "plot_overhead": lambda: call(launch_overhead.plot_overhead, add_times(),
                                      launch_overhead.fit_measurements(add_times()), opaque="measurements"),
        "count_ops": lambda: call(launch_overhead.count_ops, noop),
        "decode_step": lambda: call(launch_overhead.decode_step, decoder(), 4, "cpu"),
        "overhead_share": lambda: call(launch_overhead.overhead_share, 100, 5e-6, 1e-3, zero="overhead_s"),
        "step_report": lambda: call(launch_overhead.step_report, decoder(),
                                    launch_overhead.fit_measurements(add_times()), "decode", "cpu", 1,
                                    text="label"),
        "cuda_graph": lambda: call(launch_overhead.cuda_graph, noop, "cuda", run_valid=False),
        "compare_graph": lambda: call(launch_overhead.compare_graph, decoder(), 4, "cuda", 1,
                                      run_valid=False),
    }),
    **within("quantization", {
        "levels": lambda: call(quantization.levels, 4, symmetric=False),
        "blocked": lambda: call(quantization.blocked, "int4", 16),
        "round_to_float": lambda: call(quantization.round_to_float, weight(), "E4M3", signed="x"),
        "representable_values": lambda: call(quantization.representable_values, "fp8_e5m2"),
        "quantize": lambda: call(quantization.quantize, weight(), 4, block=8, per_channel=True,
                                 symmetric=False, axis=-1, signed="x axis", zero="axis"),
        "fake_quantize": lambda: call(quantization.fake_quantize, weight(), "mxfp4", block=8,
                                      per_channel=False, symmetric=True, axis=0, signed="x axis",
                                      zero="axis"),
        "round_to_scales": lambda: call(quantization.round_to_scales, weight(), torch.full((8, 1), 0.1),
                                        "int4", signed="x"),
        "Quantized.dequantize": lambda: call(quantization.quantize(weight(), "nvfp4").dequantize),
        "Quantized.steps": lambda: call(quantization.quantize(weight(), "int4_g32").steps),
        "Quantized.numpy": lambda: call(quantization.quantize(weight(), 4, symmetric=False).numpy),
    }),
    **within("models.llama", {
        "LlamaConfig": lambda: call(llama.LlamaConfig, vocab_size=300, d_model=64, n_layers=1, n_heads=4,
                                    n_kv_heads=2, hidden=128, max_seq_len=64, zero="head_dim"),
        "LlamaConfig.to_dict": lambda: call(small_config().to_dict),
        "rope_frequencies": lambda: call(llama.rope_frequencies, small_config()),
        "KVCache": lambda: call(llama.KVCache, small_config(), 2, 16, "cpu"),
        "KVCache.truncate": lambda: call(llama.KVCache(small_config()).truncate, 0, zero="length"),
        "Llama": lambda: call(llama.Llama, small_config()),
        "Llama.parameter_count": lambda: call(small_llama().parameter_count, True),
        "Llama.new_cache": lambda: call(small_llama().new_cache, 1, 16),
        "Llama.rotary": lambda: call(small_llama().rotary, 0, 8, torch.float32, "cpu", zero="start"),
        "Llama.generate": lambda: call(small_llama().generate, torch.tensor([[1, 2, 3]]), 2, temperature=0.0,
                                       seed=0, zero="tokens temperature seed"),
    }),
    **within("models.corpus", {
        "stdlib_root": lambda: call(corpus.stdlib_root),
        "documents": lambda: call(corpus.documents, str(source_folder())),
        "is_validation": lambda: call(corpus.is_validation, "json", text="module"),
        "split": lambda: call(corpus.split, documents()),
        "calibration_documents": lambda: call(corpus.calibration_documents, documents(), 100, 10_000),
        "manifest": lambda: call(corpus.manifest, documents(), []),
        "write_validation": lambda: call(corpus.write_validation, documents(), TMP / "written.txt"),
        "read_validation": lambda: call(corpus.read_validation, validation_file()),
        "write_manifest": lambda: call(corpus.write_manifest, {"source": "x"}, TMP / "manifest.json"),
    }),
    **within("models.tokenizer", {
        "train": lambda: call(tokenizer.train, ["def f():\n    return 1\n"] * 3, 300),
        "load": lambda: call(tokenizer.load, checkpoint.WEIGHTS_DIR / "tokenizer.json"),
        "encode_documents": lambda: call(tokenizer.encode_documents, course_tokenizer(), ["a = 1\n"],
                                         zero="eos_id"),
    }),
    **within("models.perplexity", {
        "windows": lambda: call(perplexity.windows, torch.arange(50), 8, 2, zero="stream"),
        "mean_loss": lambda: call(perplexity.mean_loss, small_llama(), torch.arange(50), 8, max_windows=2,
                                  batch_size=2, progress=False, zero="stream"),
        "unigram_perplexity": lambda: call(perplexity.unigram_perplexity, torch.arange(10), torch.arange(10),
                                           10, zero="train_stream stream"),
    }),
    **within("models.checkpoint", {
        "resolve": lambda: call(checkpoint.resolve, "draft"),
        "read_config": lambda: call(checkpoint.read_config, checkpoint.WEIGHTS_DIR / "draft"),
        "hf_config": lambda: call(checkpoint.hf_config, small_config(), "bfloat16"),
        "save": lambda: call(checkpoint.save, small_llama(), TMP / "saved"),
        "read_weights": lambda: call(checkpoint.read_weights, checkpoint.WEIGHTS_DIR / "draft"),
        "load": lambda: call(checkpoint.load, "draft", "cpu"),
    }),
    **within("models.train", {
        "TrainConfig": lambda: call(train.TrainConfig, size="tiny", steps=2, seq_len=32, bounded="lr",
                                    zero="warmup_steps weight_decay seed threads"),
        "prepare": lambda: call(train.prepare, str(source_folder()), TMP / "prepared"),
        "learning_rate": lambda: call(train.learning_rate, 5, tiny_training(), zero="step"),
        "batch": lambda: call(train.batch, torch.arange(200), 1, tiny_training(), zero="stream step"),
        "train": lambda: call(train.train, tiny_training(), TMP / "trained", False, False,
                              train_stream=torch.arange(400), zero="train_stream"),
        "publish": lambda: call(train.publish, finished_run(), TMP / "published"),
        "plot_loss_curve": lambda: call(train.plot_loss_curve,
                                        json.loads((finished_run() / "log.json").read_text()), opaque="log"),
    }),
    **within("models.onnx_export", {
        "export": lambda: call(onnx_export.export, small_llama(), str(TMP / "exported.onnx")),
        "logits": lambda: call(onnx_export.logits, onnx_file(), torch.tensor([[1, 2, 3]]), threads=1,
                               zero="tokens"),
    }),
    **within("models.gguf_export", {
        "quantize_q4_k": lambda: call(gguf_export.quantize_q4_k, np.ones((1, 256), dtype=np.float32),
                                      signed="rows", zero="rows"),
        "write": lambda: call(gguf_export.write, small_llama(), str(TMP / "written.gguf"), "Q8_0",
                              text="name chat_template"),
        "read": lambda: call(gguf_export.read, str(gguf_file())),
        "load": lambda: call(gguf_export.load, str(gguf_file()), "cpu"),
        "cached": lambda: call(gguf_export.cached, "draft", "Q4_0"),
    }),
    **within("experiments.llm_accuracy", {
        "load": lambda: call(llm_accuracy.load, "draft", "cpu"),
        "evaluation_stream": lambda: call(llm_accuracy.evaluation_stream, checkpoint.WEIGHTS_DIR / "draft",
                                          course_tokenizer(), "validation"),
        "quantize_weights": lambda: call(llm_accuracy.quantize_weights, small_llama(), "int4_g32"),
        "measure": lambda: call(llm_accuracy.measure, small_llama(), torch.arange(18).view(2, 9), None, 2,
                                False, zero="windows"),
        "evaluate": lambda: call(llm_accuracy.evaluate, "draft", "fp32", seq_len=32, max_windows=1,
                                 batch_size=1, device="cpu", cache=False, progress=False),
        "table": lambda: call(llm_accuracy.table, "draft", ["fp32"], seq_len=32, max_windows=1, cache=False,
                              progress=False),
        "plot_frontier": lambda: call(llm_accuracy.plot_frontier, format_rows()),
        "evaluate_variant": lambda: call(llm_accuracy.evaluate_variant, "draft", "fp32 again",
                                         lambda net: (net, 4.0), seq_len=32, max_windows=1, batch_size=1,
                                         device="cpu", cache=False, progress=False, text="variant"),
        "describe_slice": lambda: call(llm_accuracy.describe_slice, [slice_row()]),
        "frontier": lambda: call(llm_accuracy.frontier, format_rows()),
    }),
    **within("experiments.llm_kv_cache", {
        "quantized_kv": lambda: call(llm_kv_cache.quantized_kv, small_llama(), "int4", "per-channel"),
        "kv_bytes_per_value": lambda: call(llm_kv_cache.kv_bytes_per_value, "int8", 64, "per-token"),
        "evaluate_kv": lambda: call(llm_kv_cache.evaluate_kv, "draft", "int8", "per-channel", seq_len=32,
                                    max_windows=1, cache=False, progress=False),
        "kv_table": lambda: call(llm_kv_cache.kv_table, [{**slice_row(), **llm_kv_rows()[0]}], opaque="rows"),
    }),
    **within("experiments.llm_speculative", {
        "prompt_lookup": lambda: call(llm_speculative.prompt_lookup, [1, 2, 3, 1, 2], 2, 2, zero="history"),
        "speculative_generate": lambda: call(llm_speculative.speculative_generate, course_draft(),
                                             short_prompt(), 4, 2, "draft", course_draft(), 2, zero="prompt"),
        "checked_run": lambda: call(llm_speculative.checked_run, course_draft(), short_prompt(), 4, 2,
                                    "prompt-lookup", None, zero="prompt"),
        "validation_prompt": lambda: call(llm_speculative.validation_prompt, "draft", 8, 0, zero="offset"),
        "step_costs": lambda: call(llm_speculative.step_costs, course_draft(), course_draft(), 8, 2, 1),
        "compare_generation": lambda: call(llm_speculative.compare_generation, course_draft(), course_draft(),
                                           short_prompt(), 2, 1, 1, zero="prompt"),
        "Run.acceptance_by_position": lambda: call(llm_speculative.speculative_generate(
            course_draft(), short_prompt(), 4, 2, "prompt-lookup").acceptance_by_position),
    }),
    **within("experiments.gptq", {
        "hessian": lambda: call(gptq.hessian, weight(), signed="x"),
        "gptq_quantize": lambda: call(gptq.gptq_quantize, weight(), gptq.hessian(weight()), "int4", 8,
                                      0.01, signed="w h"),
    }),
    **within("experiments.llm_quantization", {
        "calibration_windows": lambda: call(llm_quantization.calibration_windows, "draft", 1),
        "group_inputs": lambda: call(llm_quantization.group_inputs, small_llama(), calibration_tokens(),
                                     zero="tokens"),
        "outlier_rows": lambda: call(llm_quantization.outlier_rows, small_inputs(), 6.0, signed="inputs"),
        "outlier_report": lambda: call(llm_quantization.outlier_report,
                                       llm_quantization.outlier_rows(small_inputs()), 6.0, zero="rows"),
        "plot_outliers": lambda: call(llm_quantization.plot_outliers,
                                      llm_quantization.outlier_rows(small_inputs()), zero="rows"),
        "w8a8": lambda: call(llm_quantization.w8a8, small_llama(), "smoothquant", calibration_tokens(), 0.5,
                             8, zero="alpha calibration"),
        "weight_only": lambda: call(llm_quantization.weight_only, small_llama(), "int4_g32", "gptq",
                                    calibration_tokens(), 4, zero="calibration"),
        "evaluate_w8a8": lambda: call(llm_quantization.evaluate_w8a8, "draft", "per-token", 0.5, 8,
                                      seq_len=32, max_windows=1, cache=False, progress=False, zero="alpha"),
        "evaluate_weight_only": lambda: call(llm_quantization.evaluate_weight_only, "draft", "int4_g128",
                                             "rtn", 4, seq_len=32, max_windows=1, cache=False,
                                             progress=False),
    }),
    **within("experiments.model_card", {
        "measure": lambda: call(model_card.measure, 4, False, run_valid=False),
        "render": lambda: call(model_card.render,
                               json.loads((checkpoint.WEIGHTS_DIR / "MODEL_CARD.json").read_text()),
                               opaque="facts"),
    }),
    **within("machine.loadgen", {
        "percentile": lambda: call(loadgen.percentile, [1.0, 3.0], 50, zero="q"),
        "poisson_arrivals_s": lambda: call(loadgen.poisson_arrivals_s, 2.0, 3, seed=0, zero="seed"),
        "LoadResult.values_ms": lambda: call(load_result().values_ms, "itl"),
        "LoadResult.percentile_ms": lambda: call(load_result().percentile_ms, "ttft", 90, zero="q"),
        "LoadResult.goodput": lambda: call(load_result().goodput, 250.0, 30.0),
        "LoadResult.describe": lambda: call(load_result().describe),
        "LoadResult.table": lambda: call(load_result().table),
        "comparison_table": lambda: call(loadgen.comparison_table, {"a": load_result()}, 250.0, 30.0,
                                         opaque="results"),
        "plot_latency_cdfs": lambda: call(loadgen.plot_latency_cdfs, {"a": load_result()}, "e2e",
                                          opaque="results"),
        # No server answers: every bad value must be refused before a request is sent.
        "run_load": lambda: call(loadgen.run_load, "http://127.0.0.1:9/v1", ["x"], users=1, n_requests=1,
                                 max_tokens=2, timeout_s=1.0, progress=False, label="l", run_valid=False,
                                 text="base_url model label", bounded="timeout_s", zero="seed"),
    }),
    **within("kernels.llama_build", {
        "build_info": lambda: call(llama_build.build_info, "/bin/true", text="binary"),
        "built_binary": lambda: call(llama_build.built_binary),
        # Builds llama.cpp where it is not built yet (minutes): bad values are refused before that.
        "server_binary": lambda: call(llama_build.server_binary, 1, False, run_valid=False),
        "unavailable_reason": lambda: call(llama_build.unavailable_reason),
    }),
    **within("kernels.llama_server", {
        "ggml_type": lambda: call(llama_server.ggml_type, "int8_g32", text="argument"),
        "check_gguf": lambda: call(llama_server.check_gguf, str(gguf_file()), text="argument"),
        "port_in_use": lambda: call(llama_server.port_in_use, llama_server.free_port(), text="host"),
        "free_port": lambda: call(llama_server.free_port, text="host"),
        "ServerOptions": lambda: call(llama_server.ServerOptions, threads=1, parallel=2, ctx_per_slot=64,
                                      batch_size=64, ubatch_size=32, kv_precision="int8_g32", draft_max=4,
                                      poll=0, zero="poll"),
        "command": lambda: call(llama_server.command, "/bin/true", str(gguf_file()), 8080,
                                llama_server.ServerOptions(), text="binary host"),
        "LlamaServer": lambda: call(llama_server.LlamaServer, str(gguf_file()), port=8080,
                                    startup_timeout_s=5.0, bounded="startup_timeout_s"),
        "LlamaServer.check": lambda: call(llama_server.LlamaServer(gguf_file()).check),
        "LlamaServer.stop": lambda: call(llama_server.LlamaServer(gguf_file()).stop),
        "LlamaServer.log_tail": lambda: call(llama_server.LlamaServer(gguf_file()).log_tail, 5),
        # A server never started: the valid call needs the engine (tests/kernels/test_llama_server.py).
        "LlamaServer.request": lambda: call(llama_server.LlamaServer(gguf_file()).request, "/health",
                                            {"n_predict": 1}, 5.0, run_valid=False, text="path",
                                            opaque="body", bounded="timeout_s"),
        "LlamaServer.complete": lambda: call(llama_server.LlamaServer(gguf_file()).complete, "x", 2, 5.0,
                                             run_valid=False, text="prompt", bounded="timeout_s"),
    }),
    **within("experiments.serving_engine", {
        "unavailable_reason": lambda: call(serving_engine.unavailable_reason),
        "model_file": lambda: call(serving_engine.model_file, "draft", "int8_g32"),
        "trained_server": lambda: call(serving_engine.trained_server, "draft", "int4_g32"),
        "prompt": lambda: call(serving_engine.prompt, 8, 0, zero="offset"),
        "shape": lambda: call(serving_engine.shape, "draft"),
        "ChunkedPrefill.worst_gap_ms": lambda: call(chunked_result().worst_gap_ms, 0, zero="i"),
        "ChunkedPrefill.long_ttft_ms": lambda: call(chunked_result().long_ttft_ms, 0, zero="i"),
        "ChunkedPrefill.plot_timeline": lambda: call(chunked_result().plot_timeline, 0, zero="i"),
        "ChunkedPrefill.report": lambda: call(chunked_result().report),
        "ChunkedPrefill.plot": lambda: call(chunked_result().plot),
        "slo_explorer": lambda: call(serving_engine.slo_explorer, {"a": load_result()}, opaque="runs"),
        "lesson_summary": lambda: call(serving_engine.lesson_summary, {"unmeasured": 1}, opaque="run"),
        "save": lambda: call(serving_engine.save, {"loops": serving_engine.LoopComparison(
            load_result(), load_result())}, str(TMP / "saved.json"), text="path", opaque="run"),
        "load_run": lambda: call(serving_engine.load_run, str(saved_run()), text="path"),
        # Each starts llama-server (tests/experiments/test_serving_engine.py): bad values are refused first.
        "slots_sweep": lambda: call(serving_engine.slots_sweep, (1, 2), 4, run_valid=False),
        "prefix_caching": lambda: call(serving_engine.prefix_caching, 16, 4, 2, run_valid=False),
        "chunked_prefill": lambda: call(serving_engine.chunked_prefill, ((16, 16),), 1, 32, 4,
                                        run_valid=False),
        "speculative_decoding": lambda: call(serving_engine.speculative_decoding, 2, 1, 4, run_valid=False),
        "kv_cache": lambda: call(serving_engine.kv_cache, ("fp16",), 16, 4, run_valid=False),
        "weight_formats": lambda: call(serving_engine.weight_formats, ("fp16",), 16, 4, run_valid=False),
        "open_vs_closed": lambda: call(serving_engine.open_vs_closed, 1, 2, 1.5, 4, run_valid=False,
                                       bounded="load_factor"),
    }),
    **within("formats", {
        "Format.describe": lambda: call(formats.get("int4_g32").describe),
        "Format.with_block": lambda: call(formats.get("int4_g128").with_block, 32),
    }),
    **within("predictions", {
        "verdict": lambda: call(predictions.verdict, 2.0, 3.0, "the speedup", "x",
                                signed="prediction measured", zero="prediction measured", text="what unit"),
    }),
    **within("recordings", {
        "headline": lambda: call(recordings.headline, "memory bandwidth", 40.0, "GB/s", signed="value",
                                 zero="value", text="name unit"),
        "read_headlines": lambda: call(recordings.read_headlines, headlines_file()),
        "available": lambda: call(recordings.available, recorded_folder()),
        "load": lambda: call(recordings.load, "nvidia-h200", recorded_folder()),
        "load_folder": lambda: call(recordings.load_folder, recorded_folder() / "nvidia-h200"),
        "compare": lambda: call(recordings.compare, "02_memory_bandwidth", {"memory bandwidth": 40.0},
                                recorded_folder(), text="lesson", signed="figures"),
        "Recording.notebook": lambda: call(recordings.load("nvidia-h200", recorded_folder()).notebook,
                                           "02_memory_bandwidth", text="lesson"),
        "cell_sha256": lambda: call(recordings.cell_sha256,
                                    {"cells": [{"cell_type": "code", "source": "x"}]}),
        "changed_cells": lambda: call(recordings.changed_cells, ["a", "b"], ["a", "c"]),
        "lesson_staleness": lambda: call(recordings.lesson_staleness, recorded_folder() / "nvidia-h200",
                                         "02_memory_bandwidth", text="lesson"),
        "stale": lambda: call(recordings.stale, recorded_folder() / "nvidia-h200"),
        "regenerate_command": lambda: call(recordings.regenerate_command,
                                           recordings.load("nvidia-h200", recorded_folder()), ["02_x"],
                                           opaque="recording"),
    }),
    **within("widgets", {
        "int_slider": lambda: call(widgets.int_slider, "n", 1, 8, 4, step=1, unit="items",
                                   continuous_update=True, signed="min max value", text="label unit"),
        "float_slider": lambda: call(widgets.float_slider, "x", 0.0, 2.0, 1.0, step=0.5, unit="ms",
                                     readout_format=".2f", signed="min max value",
                                     text="label unit readout_format"),
        "log_slider": lambda: call(widgets.log_slider, "size", 0.1, 100.0, 1.0, unit="MB", steps_per_decade=5,
                                   text="label unit"),
        "dropdown": lambda: call(widgets.dropdown, "batch", [1, 2, 4], 2, unit="items", text="label unit",
                                 opaque="options"),
        "toggle": lambda: call(widgets.toggle, "precision", ["fp32", "fp16"], "fp16", text="label",
                               opaque="options"),
        "explore": lambda: call(widgets.explore, noop_kwargs, horizontal=True, x=[1, 2]),
    }),
}

# Public callables not fed bad values, each with the reason.
EXCLUDED: dict[str, str] = {
    "experiments.profile_traces.main": "the command line: records every trace into the package's data folder",
    "experiments.speculative_decoding.SpeculativeRun": "a result of speculative_generate",
    "experiments.speculative_decoding.StepCosts": "a result of measure_step_costs",
    "experiments.llm_speculative.Run": "a result of llm_speculative.speculative_generate",
    # The model's own layers: built by Llama from a checked LlamaConfig, run (and traced for ONNX) on every
    # step; Llama.generate and the evaluation functions check what reaches them.
    "models.llama.Llama.forward": "every decode step and the ONNX trace; generate and measure check inputs",
    "models.llama.KVCache.update": "every layer of every decode step, called by Attention.forward",
    "models.llama.rotate": "RoPE inside every attention layer (traced for ONNX)",
    "models.llama.RMSNorm": "a layer Llama builds from a checked LlamaConfig",
    "models.llama.RMSNorm.forward": "traced with the model",
    "models.llama.Attention": "a layer Llama builds from a checked LlamaConfig",
    "models.llama.Attention.forward": "traced with the model",
    "models.llama.MLP": "a layer Llama builds from a checked LlamaConfig",
    "models.llama.MLP.forward": "traced with the model",
    "models.llama.Block": "a layer Llama builds from a checked LlamaConfig",
    "models.llama.Block.forward": "traced with the model",
    "models.corpus.Document": "a result of corpus.documents",
    "models.train.main": "the command line: argparse checks the options' types, TrainConfig their values",
    "experiments.model_card.main": "the command line (python -m hwopt.experiments.model_card)",
    "experiments.attention.AttentionPoint": "a result of attention.measure_attention",
    "experiments.launch_overhead.OverheadFit": "a result of launch_overhead.fit_overhead",
    "formats.Format": "the vocabulary of formats (hwopt/formats.py, tests/test_formats.py), not user input",
    "formats.Encoding": "the float encodings of formats (hwopt/formats.py, tests/test_fake_quant.py)",
    "quantization.Quantized": "a result of quantization.quantize",
    "experiments.precision.runs_on": "takes any predictor and answers '-' for what it cannot place "
                                      "(tests/test_precision.py)",
    "formats.get": "the format checker itself (tests/test_formats.py): it names the argument it is told",
    "formats.name": "formats.get's name (tests/test_formats.py): it names the argument it is told",
    "formats.bytes_per_weight": "formats.get under another name (tests/test_formats.py)",
    "formats.torch_dtype": "formats.get with a torch dtype's name (tests/test_formats.py): it names the "
                           "argument it is told",
    # Results the toolkit builds and returns; the functions that take one back check its type.
    "cost.costs.ChipEstimate": "a result of costs.estimate",
    "cost.serving.ServingStats": "a result of serving.simulate_dynamic_batching",
    "cost.serving.GenerationStats": "a result of serving.simulate_generation",
    "cost.serving.PhaseLatencyStats": "a result of serving.simulate_chunked_prefill",
    "cost.paging.Allocation": "a result of paging.allocate",
    "cost.tensor_parallel.DecodeBound": "a result of tensor_parallel.decode_bound",
    "cost.disaggregation.Handoff": "a result of disaggregation.compare",
    "machine.power.EnergyReading": "a result of power.measure",
    "experiments.distributed.Group": "what distributed.run hands each task, built inside the worker",
    "experiments.distributed.Group.barrier": "runs inside a worker of distributed.run, on its process group",
    "experiments.distributed.Group.sync": "runs inside a worker of distributed.run, on its device",
    "experiments.tensor_parallel_block.BlockWeights": "a result of tensor_parallel.make_block and shard",
    "experiments.tensor_parallel_block.AllReduceSweep": "a result of tensor_parallel.measure_allreduce",
    "experiments.tensor_parallel_block.BlockTimes": "a result of tensor_parallel.measure_block",
    "experiments.pipeline_parallel.PipelineRun": "a result of pipeline_parallel.measure_pipeline",
    "experiments.moe_layer.MoELayer": "a result of moe_layer.make_moe",
    "experiments.moe_layer.MoESweep": "a result of moe_layer.measure_moe",
    "experiments.prefill_decode.PhaseTimes": "a result of prefill_decode.measure_phases",
    "experiments.prefill_decode.ContextSweep": "a result of prefill_decode.decode_vs_context",
    "machine.specs.Chip": "a row of hwopt/data/chips.csv, checked by specs.load_chips",
    "machine.card.MachineCard": "a result of card.machine_card",
    "recordings.Figure": "a result of recordings.read_headlines and recordings.load",
    "recordings.Recording": "a result of recordings.load",
    "machine.hardware.GPUInfo": "a result of hardware.cuda_gpus",
    "machine.hardware.MachineInfo": "a result of hardware.machine",
    "machine.probe.Ceilings": "a result of probe.probe",
    "models.classifier.Digits": "a result of classifier.load_digits",
    "experiments.decode.DecodePath": "a result of decode.decode_paths",
    "experiments.decode.DecodeResult": "a result of decode.time_paths",
    "kernels.lowbit_gemv.PathComparison": "a result of lowbit_gemv.compare_paths",
    "kernels.lowbit_gemv.KernelPath": "a row of lowbit_gemv.PATHS, the kernel's instruction paths",
    "machine.loadgen.RequestRecord": "a result of loadgen.run_load",
    "machine.loadgen.LoadResult": "a result of loadgen.run_load",
    "kernels.llama_server.LlamaServer.start": "starts the engine (tests/kernels/test_llama_server.py); "
                                              "LlamaServer checks its arguments when made",
    # Lesson 11's results, their reports and plots (tests/experiments/test_serving_engine.py).
    **{f"experiments.serving_engine.{name}": "a result of serving_engine's experiment of that name"
       for name in ("SlotsSweep", "SlotsSweep.fit", "SlotsSweep.report", "SlotsSweep.plot", "PrefixCaching",
                    "PrefixCaching.report", "PrefixCaching.plot", "ChunkedPrefill", "SpeculativeRun",
                    "SpeculativeRun.report", "FormatRun", "FormatRun.report", "FormatRun.plot",
                    "LoopComparison", "LoopComparison.report", "LoopComparison.plot")},
    # Tensor code that torch traces (torch.compile, ONNX export, the decode loop): a check there would break
    # the trace or slow every step; the functions that feed them check the inputs.
    "experiments.fusion.chain": "traced by torch.compile and the ONNX exporter; chain_inputs checks inputs",
    "experiments.fusion.Chain.forward": "traced by torch.compile and the ONNX exporter",
    "experiments.fusion.chain_into": "the chain that lesson 5 compiles with torch.compile and times",
    "experiments.fusion.chain_eager_into": "timed by lesson 5 in the loop; chain_inputs checks the inputs",
    "models.tiny_decoder.Block.forward": "runs every decode step; generate and measure_decode check",
    "models.tiny_decoder.TinyDecoder.forward": "every decode step; generate and measure_decode check",
    "models.tiny_decoder.project": "every projection of every decode step (inside Block.forward); the "
                                        "kernel choice is checked where a model's kernel is set",
}


# ---- the tests --------------------------------------------------------------------------------------------


def public_callables() -> set[str]:
    """'module.name' and 'module.Class.method' of every public function, class and method, course excepted."""
    found = set()
    for info in pkgutil.walk_packages(hwopt.__path__, "hwopt."):
        if info.name.startswith(("hwopt.course", "hwopt.arguments")) or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        short = info.name.removeprefix("hwopt.")
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != info.name:
                continue
            if inspect.isfunction(obj):
                found.add(f"{short}.{name}")
            elif inspect.isclass(obj) and not issubclass(obj, BaseException):
                found.add(f"{short}.{name}")
                found |= {f"{short}.{name}.{m}" for m, f in vars(obj).items()
                          if not m.startswith("_") and inspect.isfunction(f)}
    return found


def test_every_public_function_is_specified_or_excluded_with_a_reason():
    public = public_callables()
    missing = sorted(public - set(VALID) - set(EXCLUDED))
    assert not missing, f"add a valid call to VALID (or a reason to EXCLUDED) for: {missing}"
    stale = sorted((set(VALID) | set(EXCLUDED)) - public)
    assert not stale, f"no such public callable any more: {stale}"
    assert not set(VALID) & set(EXCLUDED)


SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def explore(c: Call, bound, name: str, bad_strategy) -> list[str]:
    """Problems hypothesis finds with more bad values of one parameter ([] when none)."""

    @SETTINGS
    @given(bad_strategy)
    def refuses(bad):
        problem = refusal_problem(c, bound, name, bad)
        assert problem is None, problem

    try:
        refuses()
    except AssertionError as error:
        return [str(error).splitlines()[0]]
    return []


@pytest.mark.parametrize("qualname", sorted(VALID))
def test_bad_input_raises_value_error_naming_the_argument(qualname):
    c = VALID[qualname]()
    try:
        if c.run_valid:
            with time_limit(VALID_LIMIT_S):
                c.fn(*c.args, **c.kwargs)
        problems = []
        for p, bound in attacked_parameters(c):
            for bad in bad_values(p, c):
                problem = refusal_problem(c, bound, p.name, bad)
                problems += [problem] if problem else []
            problems += explore(c, bound, p.name, strategy(p, c))
    finally:
        plt.close("all")
    assert not problems, f"{qualname}:\n  " + "\n  ".join(dict.fromkeys(problems))


@pytest.fixture(scope="module", autouse=True)
def _remove_temporary_files():
    yield
    shutil.rmtree(TMP, ignore_errors=True)
    ort.remove_temp_dirs()  # the folders the valid call of ort.temp_dir made
