"""hwopt: the toolkit of the course Hardware Optimization for ML, in layers; a module imports only from its
own layer and the layers before it (LAYERS, in that order; tests/test_layers.py checks it, and that no
modules import each other in a circle).

1. arguments: the one argument checker.
2. formats (number formats: bits, bytes per weight with block scales, chip-table columns), data/ (the
   course's data, every row with its source: chips.csv, model_shapes.csv, traces/), traces (the recorded
   profiler traces read, and varied for assignment 8's hidden cases), plots (the one plotting style),
   widgets (the sliders), recordings (headline figures of a recorded run, and other chips' runs read back),
   predictions (the learner's prediction, written before a measurement, set beside it after).
3. roofline: the pure maths of the roofline (intensity, ridge point, attainable FLOP/s, time bound, the plot);
   quantization: the codes and scales every format stores (integer grids per tensor, channel or block, fp8,
   MXFP4, NVFP4), computed in one place for the lessons and the kernels, which only pack them.
4. machine/ (measuring the machine): hardware (what is this machine), toolchain (its C and C++ compilers,
   CMake), specs (the chip table and each chip's peak rule), bench (timing), probe (live ceilings: GB/s,
   FLOP/s), card (the machine card), power (energy counters: RAPL, NVML), loadgen (an open- and closed-loop
   load generator for OpenAI-compatible servers: TTFT, TPOT, goodput).
5. cost/ (models of cost): costs (time and dollars per chip), batching, serving (queueing, chunked prefill),
   shapes (the model table), footprint (memory capacity: weights + KV cache + activations), phases (prefill
   and decode: FLOPs, bytes, intensity), paging (contiguous vs paged KV-cache allocation), speculative (tokens
   per target step and the speedup of speculative decoding), moe (experts read per step, expert parallelism's
   bytes), communication (the alpha-beta model and its fit, all-reduce, all-to-all), tensor_parallel (the TP
   degree that fits, the decode bound with all-reduces), pipeline (the bubble), disaggregation (sending a KV
   cache vs prefilling again), energy (J/token, $ per 1M tokens).
6. kernels/ (code that computes fast): lowbit_gemv (the course's C kernel, built on the learner's machine,
   and its loader), ort (ONNX Runtime: export, sessions, graph optimization, quantized graphs), llama_build
   (llama.cpp's llama-server built from source, cached), llama_server (it started, checked and stopped).
7. models/ (model definitions): mlp, classifier (the digits MLP), tiny_decoder (a decoder-only transformer
   with a KV cache, its single-token steps in the C kernel where it builds).
8. experiments/ (what the lessons run and report): roofline_points, decode (decode steps by runtime and
   format), decode_speed (a decoder's tokens/s against its bound), precision, fake_quant (any format of
   formats, fp8/mxfp4/nvfp4 emulated), outliers (outlier channels, SmoothQuant, AWQ), fusion, profiling,
   profile_traces (recording the torch.profiler traces assignment 8 reads),
   prefill_decode (TTFT, decode vs context, KV precision), speculative_decoding (draft and target, greedy
   speculative decoding), attention (naive vs fused vs tiled attention), launch_overhead (per-op overhead,
   CUDA graphs), distributed (groups of worker processes, always stopped), tensor_parallel_block (a
   Megatron-split block measured), pipeline_parallel (stages in processes, the bubble measured), moe_layer (a
   routed MoE layer measured), parallel_summary (lesson 12's summary), serving_engine (lesson 11: the trained
   model in llama-server under load); on the course's trained LLM: llm_accuracy (perplexity and top-1
   agreement per weight format), llm_quantization (W8A8, SmoothQuant, AWQ, GPTQ by perplexity), gptq,
   llm_kv_cache (the KV cache in fewer bits), llm_speculative (speculative decoding with the trained draft or
   prompt lookup).
9. course/ (course machinery, imported by no lesson): grading (nbgrader, judge, sandbox, a class graded, the
   sample submissions, every grading setting; `python -m hwopt.course.grading`), exercises (what the
   assignments' visible tests share), colab, quiz (the practice quiz's bank and each student's draw from it),
   notebook_outputs (notebooks are committed without outputs), record (lessons run headless on a device,
   saved in data/recordings/), site (the course as a website).
10. __main__: the command line (`python -m hwopt`).
"""

__version__ = "0.1.0"

# The layers, first to last: each entry names the top-level modules and subpackages of one layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("arguments",),
    ("formats", "data", "traces", "plots", "widgets", "recordings", "predictions"),
    ("roofline", "quantization"),
    ("machine",),
    ("cost",),
    ("kernels",),
    ("models",),
    ("experiments",),
    ("course",),
    ("__main__",),
)
