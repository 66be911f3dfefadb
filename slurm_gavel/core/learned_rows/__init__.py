"""Learned rows (``knowledge: learned``): each job's own throughput row learned from its
progress reports within trust bounds, exploration of unmeasured cells, and the re-solve
when rows misjudged the allocation. Plugin: learned_rows_plugin.py; settings:
learned_rows_settings.py; state: job_rows.py (``JobRows``, its JSON in job_rows_doc.py).

Imports the round's interfaces (slurm_gavel.core's own modules), not another
feature's internals, except where tests/test_layering.py names it."""
