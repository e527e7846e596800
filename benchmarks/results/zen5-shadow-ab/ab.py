"""Auto without shadow judging ('before') against auto with it ('after'), with plain: benchmarks/ab.py's A/B.

    python benchmarks/results/zen5-shadow-ab/ab.py TARGET DRAFT CATEGORIES REPEATS [MAX_TOKENS]

(the same as benchmarks/ab.py ... --variant before '{"judge_shadow": false}' --variant after '{}')
"""

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ab import main  # noqa: E402

from specchat.engine import DEFAULT_POLICY  # noqa: E402

main({"before": replace(DEFAULT_POLICY, judge_shadow=False), "after": DEFAULT_POLICY})
