export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
M=$OUT/machine.txt
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M
python3 -c "import torch,triton,transformers;print(torch.__version__, triton.__version__, transformers.__version__)" >> $M; cat .devcarry/commit >> $M; nproc >> $M
B="python3 benchmarks/bench_training.py run --systems attngeom-paper"
row() {  # preset steps update_graph tag
  echo "$4 preset=$1 update_graph=$3 $(date -u +%T)" >> $M
  timeout 150 $B --preset $1 --paper-steps $2 --set update_graph=$3 --out $OUT/run-$1-$3-$4.json > $OUT/run-$1-$3-$4.log 2>&1; echo "rc $?"
  grep "attngeom-paper" $OUT/run-$1-$3-$4.log | tail -1 | tee -a $M
}
row 4 1000 false a; row 4 1000 true a; row 4 1000 false b; row 4 1000 true b
row 12 300 true a; row 12 300 false a
echo "prof $(date -u +%T)" >> $M
timeout 150 python3 benchmarks/profile_training.py --layers 4 --set update_graph=true --trace /tmp/trace-ug.json --out $OUT/prof-4-ug.json > $OUT/prof-4-ug.log 2>&1; echo "rc $?"
grep -A2 "tokens/s" $OUT/prof-4-ug.log | head -3; grep -A12 "device idle" $OUT/prof-4-ug.log
xz -T8 -3 -c /tmp/trace-ug.json > $OUT/trace-4-ug.json.xz; ls -la $OUT
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
