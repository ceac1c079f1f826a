"""hwopt: the toolkit of the course Hardware Optimization for ML.

One module per idea (hardware, specs, bench, roofline, probe, ...); lessons and assignments import it.
"""

__version__ = "0.1.0"
