"""Grading the assignments (course machinery; nothing in the lessons imports it).

Points are decided outside the student's interpreter, and every grading kernel runs in a sandbox:
- settings: every environment variable of grading, with its default, unit and meaning;
- notebooks: hidden-test regions of grade cells, LMS/Colab notebook names (pure functions);
- judge: the hidden cases of a grade cell, drawn per student from the instructor secret, and the verdict on
  the plain values (JSON) the student's kernel sent back, against the reference solution run here;
- reference: an assignment's reference solution, run in the grading process, and its checks;
- collect: the few lines sent into the student's kernel that evaluate its functions on the cases;
- sandbox: bubblewrap around each grading kernel (no network, own PID namespace, its own folder only);
- sandbox_diagnosis: which of seccomp, AppArmor, user namespaces, /proc masking stops bubblewrap, and the fix;
- kernel: the launcher inside the sandbox (memory, CPU-time and process-count limits, then ipykernel);
- toolkit: the toolkit as grading kernels see it (its tables; stubs for every module that computes);
- intake: only folders and regular files are graded; copies that never follow links; feedback pages only;
- outputs: output caps over every kernel message, student HTML sanitised, output after hidden cases
  withheld from feedback;
- plugins: the nbgrader preprocessors that nbgrader_config.py wires in;
- gradebook: SQLite for one grader, a PostgreSQL server for parallel ones; the records the grader adds;
- course: a course folder and nbgrader's API on it (the repository's nbgrader_config.py);
- submission: checks before nbgrader grades a notebook (missing, invalid, tampered) and of its feedback;
- deadlines: due dates, submission times, extensions and the late-penalty policy autograde applies;
- exchange: nbgrader's collect from the exchange on a hub, taking only what each student made, and when;
- lms: submission times and late markers from an LMS download, and grades in files LMS gradebooks import;
- grade: a class graded submission by submission, each one a score or an explicit failure (the report);
- cluster: how many grading workers, and the Dask cluster that runs them;
- samples: sample submissions (attacks included) and the scores they must get;
- demo: the samples graded end to end.
`python -m hwopt.course.grading grade | demo | secret | sandbox | settings | extend | lms | rubric` runs them
(see __main__).
"""
