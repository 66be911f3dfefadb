"""Development tooling of slurm-gavel, not shipped in the wheel: the local Slurm cluster
(tools/local-cluster), the demo (tools/demo) and the Slurm round benchmark's cluster side.

Standard library only where tools/local-cluster runs it (the docker images run it with the
system python3 and PYTHONPATH at the checkout)."""
