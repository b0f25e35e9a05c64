from platform_assets.cli import main

raise SystemExit(main())
