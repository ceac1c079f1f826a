"""hwopt: the toolkit of the course Hardware Optimization for ML, in layers; each imports only those above it.

- formats, arguments, plots, widgets: the vocabulary of number formats, the one argument checker, the one
  plotting style and the sliders; every layer below uses them.
- data/: the course's data, every row with its source (chips.csv, model_shapes.csv), shipped in the package.
- machine/ (measuring the machine): hardware (what is this machine), specs (the chip table, data/chips.csv),
  bench (timing), probe (live ceilings: GB/s, FLOP/s), card (the machine card).
- cost/ (models of cost): roofline, costs (time and dollars per chip), batching, serving (queueing, chunked
  prefill), footprint (memory capacity: weights + KV cache + activations), phases (prefill and decode: FLOPs,
  bytes, intensity), paging (contiguous vs paged KV-cache allocation), speculative (tokens per target step and
  the speedup of speculative decoding).
- experiments/ (what the lessons run): roofline_points, decode, lowbit_gemv, tiny_decoder, precision,
  classifier, fusion, ort, profiling, prefill_decode (TTFT, decode vs context, KV precision on the tiny
  decoder), fake_quant (any format of formats, fp8/mxfp4/nvfp4 emulated), outliers (outlier channels,
  SmoothQuant, AWQ), speculative (draft and target decoders, speculative greedy decoding), attention (naive vs
  fused vs tiled attention, the N x N score matrix), launch_overhead (per-op overhead, CUDA graphs).
- course/ (course machinery, imported by no lesson): grading (nbgrader, judge, sandbox, a class graded, the
  sample submissions; `python -m hwopt.course.grading`), exercises (what the assignments' visible tests
  share), colab, quiz (the practice quiz's question bank and each student's draw from it), notebook_outputs
  (notebooks are committed without outputs), record (lessons run headless on a device, saved in
  data/recordings/), site (the course as a website).
- recordings: a lesson's headline figures, saved while a run is recorded, and other chips' recorded runs
  read back for comparison.
"""

__version__ = "0.1.0"
