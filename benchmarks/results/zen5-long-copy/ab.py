"""Auto drafting at most K_MAX tokens ('short') against auto letting a copy in progress draft up to K_LONG ('long'),
with plain: benchmarks/ab.py's A/B.

    python benchmarks/results/zen5-long-copy/ab.py TARGET DRAFT CATEGORIES REPEATS [MAX_TOKENS]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab import main  # noqa: E402

from specchat.engine import speculative  # noqa: E402
from specchat.engine.calibration import K_LONG, K_MAX  # noqa: E402


def cap(k: int):
    def setup() -> None:
        speculative.K_LONG = k  # the loop's cap on auto's draft length

    return setup


main({"short": cap(K_MAX), "long": cap(K_LONG)})
