from broker.tools.cli import main

raise SystemExit(main())
