"""The Gradio app: chat with the live token overlay, stats, settings and the models view."""

import os

# Before Gradio is imported anywhere: it reads this at import, and the app must make no requests off this machine.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

# For every event of the app, which shows its own progress (a status line, the header, the Models view's progress
# line): Gradio's "full" progress mounts a spinner on each output while the event is pending, and the spinner's spring
# animation finishes its cycle at every frame the browser can draw for seconds after it is gone, into whatever runs
# next (an answer after Clear, a load's calibration, a comparison's first mode), taking CPU from llama.cpp's threads.
SPINNER_HIDDEN = {"show_progress": "hidden"}
