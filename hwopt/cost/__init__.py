"""Models of cost: the roofline, time and dollars per chip, batching, serving queues, memory footprint."""
