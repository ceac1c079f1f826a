"""Kernels: code that computes fast (the C kernel lowbit_gemv and its loader, ONNX Runtime sessions)."""
