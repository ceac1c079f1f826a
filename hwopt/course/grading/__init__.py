"""Grading the assignments (course machinery; nothing in the lessons imports it).

Points are decided outside the student's interpreter, and every grading kernel runs in a sandbox:
- notebooks: hidden-test regions of grade cells, LMS/Colab notebook names (pure functions);
- judge: the hidden cases of a grade cell, drawn per student from the instructor secret, and the verdict on
  the plain values (JSON) the student's kernel sent back, against the reference solution run here;
- collect: the few lines sent into the student's kernel that evaluate its functions on the cases;
- sandbox: bubblewrap around each grading kernel (no network, own PID namespace, its own folder only);
- kernel: the launcher inside the sandbox (memory, CPU-time and process-count limits, then ipykernel);
- plugins: the nbgrader preprocessors that nbgrader_config.py wires in;
- gradebook: SQLite for one grader, a PostgreSQL server for parallel ones (and a private one for tests).
"""
