export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
R=/tmp/r19; mkdir -p $R; M=$R/machine.txt
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M
python3 -c "import torch,triton,transformers;print(torch.__version__, triton.__version__, transformers.__version__)" >> $M; cat .devcarry/commit >> $M; nproc >> $M
echo "tests $(date -u +%T)" >> $M
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_training_step.py tests/test_training_checkpoints.py > $R/gpu-tests.log 2>&1; echo "tests rc $?" | tee -a $M; tail -3 $R/gpu-tests.log | tee -a $M
B="python3 benchmarks/bench_training.py run --systems attngeom-paper"
row() {  # preset steps tag [--set ...]
  P=$1; S=$2; T=$3; shift 3
  echo "$T preset=$P $* $(date -u +%T)" >> $M
  timeout 150 $B --preset $P --paper-steps $S "$@" --out $R/run-$P-$T.json > $R/run-$P-$T.log 2>&1; echo "rc $?"
  grep "attngeom-paper" $R/run-$P-$T.log | tail -1 | tee -a $M
}
row 4 1000 off1 --set update_graph=false; row 4 1000 auto1; row 4 1000 off2 --set update_graph=false; row 4 1000 auto2
row 4 1000 off3 --set update_graph=false; row 4 1000 auto3
for v in auto off; do
  echo "prof $v $(date -u +%T)" >> $M
  S=""; [ $v = off ] && S="--set update_graph=false"
  timeout 120 python3 benchmarks/profile_training.py --layers 4 $S --out $R/prof-4-$v.json > $R/prof-4-$v.log 2>&1; echo "rc $?"
  grep -A1 "tokens/s" $R/prof-4-$v.log | head -2 | tee -a $M
done
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
tar -cJf $OUT/call19a.tar.xz -C $R .
