"""The course's performance report: the toolkit and lessons measured against this machine's limits."""
