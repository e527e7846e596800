"""`specchat` with constants of specchat.ui.app set first, for the rate experiments: python patched_app.py
NAME=VALUE ... -- ARGS (ARGS as for `python -m specchat`)."""

import sys

import specchat.ui.app as app
from specchat.cli.main import main

split = sys.argv.index("--")
for assignment in sys.argv[1:split]:
    name, value = assignment.split("=")
    assert hasattr(app, name), name
    setattr(app, name, float(value))
sys.argv = [sys.argv[0], *sys.argv[split + 1 :]]
sys.exit(main())
