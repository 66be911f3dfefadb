from workloads.runner import main

raise SystemExit(main())
