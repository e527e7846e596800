"""Batch costs through llama-cpp-python (specchat's backend), as llama-bench's pp/tg: logits for the last token only
(and, apart, for all), at an empty cache or after a 256-token prefix."""

import statistics
import sys
import time

from specchat.engine.llama_backend import BackendConfig, LlamaModel

path = sys.argv[1]
m = LlamaModel(path, BackendConfig(n_ctx=2048))
toks = m.tokenize("def reverse(head):\n    prev = None\n    while head:\n        nxt = head.next\n" * 40, add_bos=False)
prefix = toks[:256]
res = {}
for _rep in range(7):
    for n in (1, 2, 4, 8, 16, 17, 32):
        for all_logits in (False, True):
            m.rollback(0)
            m.decode(prefix)
            t = time.perf_counter()
            m.decode(toks[256 : 256 + n], all_logits=all_logits, copy=False)
            res.setdefault((n, all_logits), []).append(time.perf_counter() - t)
t1 = statistics.median(res[(1, False)])
for (n, a), v in sorted(res.items()):
    print(f"n={n:2d} all_logits={a!s:5} {statistics.median(v) * 1000:7.1f} ms  r={statistics.median(v) / t1:5.2f}")
