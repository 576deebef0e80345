"""``python -m apps.demo --server-url http://127.0.0.1:8000 [--port 7860]``."""

from apps.demo.app import main

raise SystemExit(main())
