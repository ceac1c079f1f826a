"""Course machinery, kept apart from the lessons (no lesson imports it): grading and Colab support."""
