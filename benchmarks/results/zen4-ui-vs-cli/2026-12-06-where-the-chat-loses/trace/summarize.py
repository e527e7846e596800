"""Where a Chrome trace's time goes, per thread and by event (self time): python summarize.py trace.json"""

import collections
import json
import sys

ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
names = {}
for e in ev:
    if e.get("ph") == "M" and e.get("name") == "thread_name":
        names[(e["pid"], e["tid"])] = e["args"]["name"]
    if e.get("ph") == "M" and e.get("name") == "process_name":
        names[(e["pid"], None)] = e["args"]["name"]
xs = [e for e in ev if e.get("ph") == "X" and "dur" in e]
ts = [e["ts"] for e in xs]
span = (max(ts) - min(ts)) / 1e6
print(f"span {span:.1f} s")
# per thread: total of toplevel tasks (wall dur and thread dur)
per_thread = collections.Counter()
per_thread_cpu = collections.Counter()
for e in xs:
    if e.get("cat", "").startswith("toplevel") and e["name"] in (
        "ThreadControllerImpl::RunTask",
        "RunTask",
        "ThreadPool_RunTask",
    ):
        k = (names.get((e["pid"], None), e["pid"]), names.get((e["pid"], e["tid"]), e["tid"]))
        per_thread[k] += e["dur"]
        per_thread_cpu[k] += e.get("tdur", 0)
for k, v in per_thread.most_common(15):
    print(f"{str(k):60s} wall {v / 1e3:8.1f} ms  cpu {per_thread_cpu[k] / 1e3:8.1f} ms")
# self time by name on busiest renderer main thread
by_thread = collections.defaultdict(list)
for e in xs:
    by_thread[(e["pid"], e["tid"])].append(e)
for key in [
    k for k in by_thread if names.get(k) in ("CrRendererMain", "CrGpuMain", "VizCompositorThread", "Compositor")
]:
    es = sorted(by_thread[key], key=lambda e: (e["ts"], -e["dur"]))
    selft = collections.Counter()
    count = collections.Counter()
    stack = []
    for e in es:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            selft[stack[-1]["name"]] -= min(e["dur"], stack[-1]["ts"] + stack[-1]["dur"] - e["ts"])
        selft[e["name"]] += e["dur"]
        count[e["name"]] += 1
        stack.append(e)
    tot = sum(v for v in selft.values())
    print(f"\n== {names.get((key[0], None))} / {names.get(key)}  self total {tot / 1e3:.1f} ms")
    for n, v in selft.most_common(22):
        print(f"  {n:50s} {v / 1e3:8.1f} ms  n={count[n]}")
