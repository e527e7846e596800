"""`specchat` with constants of specchat.ui.app set first, for the rate experiments: python patched_app.py
NAME=VALUE|NAME=@FILE ... -- ARGS (ARGS as for `python -m specchat`)."""

import sys
from pathlib import Path

import specchat.ui.app as app
from specchat.cli.main import main

split = sys.argv.index("--")
for assignment in sys.argv[1:split]:
    name, value = assignment.split("=")
    assert hasattr(app, name), name
    # NAME=@FILE: the constant is the text of FILE (a script, say); otherwise a number.
    setattr(app, name, Path(value[1:]).read_text() if value.startswith("@") else float(value))
sys.argv = [sys.argv[0], *sys.argv[split + 1 :]]
sys.exit(main())
