M=~/.cache/spec-test-models
T=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; D=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
CAL=${CAL:-$HOME/.cache/specchat/calibration-e37850567bd79dc3.json}
for pol in "$@"; do
 for rs in 1.0 1.2 0.85; do
  for carry in "" --carry-costs; do
   out=$(python3 replay.py $T $D --recording ${REC:-results/replay-greedy-2nd.json} --auto-only --calibration $CAL --r-scale $rs $carry --policy-json "$pol" 2>&1 | grep "^  " | sed 's/: auto replayed /=/' | tr -d ' \n' | sed 's/x/ /g')
   echo "$pol rs=$rs ${carry:-fresh} | $out"
  done
 done
done
