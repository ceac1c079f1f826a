"""The course's data, every row with its source: chips.csv (the chip table, machine.specs),
model_shapes.csv (published model shapes, cost.footprint) and traces/ (torch.profiler traces the course
recorded, each saying how, where and when: experiments.profile_traces). Shipped inside the package, so an
installed toolkit reads the same files as a clone of the course."""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
