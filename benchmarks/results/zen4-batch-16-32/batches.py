"""r(n) for every batch size from 14 to 33 on this machine, as calibration times them (logits for every position,
after the timing text), 7 rounds, sizes in a rotating order, each ratio the median over rounds.

    python3 benchmarks/results/zen4-batch-16-32/batches.py TARGET.gguf
"""

import statistics
import sys

from specchat.engine.calibration import TIMING_TEXT, decode_seconds
from specchat.engine.llama_backend import LlamaModel

target = LlamaModel(sys.argv[1])
context = target.tokenize(TIMING_TEXT)
probe = (context * 2)[:40]
target.eval_prefix(context)
decode_seconds(target, probe[:1])
sizes = list(range(14, 34))
ratios = {n: [] for n in sizes}
t1s = []
for i in range(7):
    order = sizes[i % len(sizes) :] + sizes[: i % len(sizes)]
    for n in order:
        t1 = decode_seconds(target, probe[:1])
        t1s.append(t1)
        ratios[n].append(decode_seconds(target, probe[:n]) / t1)
print(f"t1 median {statistics.median(t1s) * 1000:.1f} ms")
for n in sizes:
    r = statistics.median(ratios[n])
    print(f"r({n}) = {r:.2f}  ({r / n:.3f} a token; rounds {min(ratios[n]):.2f}-{max(ratios[n]):.2f})")
