"""The lessons' experiments: small real models and kernels, measured live, compared with the cost models."""
