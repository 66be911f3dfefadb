from slurm_gavel.cli import main

# Guarded: `simulate --workers` starts its processes with "spawn", which imports this
# module again in each of them (as __mp_main__) when slurm-gavel ran as `python -m`.
if __name__ == "__main__":
    raise SystemExit(main())
