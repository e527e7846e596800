"""The Gradio app: chat with the live token overlay, stats, settings and the models view."""

import os

# Before Gradio is imported anywhere: it reads this at import, and the app must make no requests off this machine.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
