from slurm_gavel.cli import main

raise SystemExit(main())
