"""Measuring the machine: what hardware this is, the chip table, timing, live ceilings, the machine card."""
