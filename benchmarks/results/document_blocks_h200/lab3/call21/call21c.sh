export PYTHONUNBUFFERED=1
R=/tmp/r21c; mkdir -p $R; M=$R/machine-c.txt
[ -d /tmp/prev ] || bash .devcarry/prevtree.sh
echo "start $(date -u +%FT%TZ)" > $M; cat .devcarry/commit >> $M
row() {  # tree tag preset steps
  echo "$2 preset=$3 $(date -u +%T)" >> $M
  (cd $1 && PYTHONPATH=/tmp/site:$1/src:$1/benchmarks timeout 100 python3 benchmarks/bench_training.py run --systems attngeom-paper --preset $3 --paper-steps $4 --out $R/run-$3-$2.json > $R/run-$3-$2.log 2>&1; echo "rc $?")
  grep "attngeom-paper" $R/run-$3-$2.log | tail -1 | tee -a $M
}
row $PWD atomic1 4 1000; row /tmp/prev ordered1 4 1000; row $PWD atomic2 4 1000; row /tmp/prev ordered2 4 1000
cd /tmp/prev; export PYTHONPATH=/tmp/site:/tmp/prev/src:/tmp/prev/benchmarks
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log; mkdir -p /tmp/mps/pipe /tmp/mps/log
one() {  # runs mode
  echo "=== $(date -u +%T) $2 runs=$1" >> $M
  if [ $2 = mps ]; then nvidia-cuda-mps-control -d; E=""; else E="env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY"; fi
  timeout 130 $E python3 benchmarks/bench_training.py concurrent --preset 4 --runs $1 --paper-steps 1000 --out $R/c-4-$1-$2.json 2>&1 | grep '^{' >> $M
  if [ $2 = mps ]; then echo quit | nvidia-cuda-mps-control; sleep 2; fi
}
one 4 mps; one 4 ts
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
cd - >/dev/null; tar -cJf $OUT/call21c.tar.xz -C $R .
