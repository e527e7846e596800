"""Auto without shadow judging ('before') against auto with it ('after'), with plain: benchmarks/ab.py's A/B.

python benchmarks/results/zen5-shadow-ab/ab.py TARGET DRAFT CATEGORIES REPEATS [MAX_TOKENS]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab import main  # noqa: E402

from specchat.engine.adaptive import AutoDrafter  # noqa: E402

judge = AutoDrafter._judge_shadow


def before() -> None:
    AutoDrafter._judge_shadow = lambda self, context: None


def after() -> None:
    AutoDrafter._judge_shadow = judge


main({"before": before, "after": after})
