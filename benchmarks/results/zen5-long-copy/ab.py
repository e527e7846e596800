"""Auto drafting at most K_MAX tokens ('short') against auto letting a copy in progress draft up to K_LONG ('long'),
with plain: benchmarks/ab.py's A/B.

    python benchmarks/results/zen5-long-copy/ab.py TARGET DRAFT CATEGORIES REPEATS [MAX_TOKENS]

(the same as benchmarks/ab.py ... --variant short '{"k_long": 15}' --variant long '{"k_long": 31}')
"""

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab import main  # noqa: E402

from specchat.engine import DEFAULT_POLICY  # noqa: E402
from specchat.engine.calibration import K_LONG, K_MAX  # noqa: E402

main({"short": replace(DEFAULT_POLICY, k_long=K_MAX), "long": replace(DEFAULT_POLICY, k_long=K_LONG)})
