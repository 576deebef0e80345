"""Gradio demo for product teams (``python -m apps.demo --server-url URL``); see ``apps/demo/app.py``."""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no phoning home (and no internet here)
