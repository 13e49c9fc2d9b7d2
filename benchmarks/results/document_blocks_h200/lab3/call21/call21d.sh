export PYTHONUNBUFFERED=1
R=/tmp/r21d; mkdir -p $R; M=$R/machine-d.txt
cd /tmp/prev; export PYTHONPATH=/tmp/site:/tmp/prev/src:/tmp/prev/benchmarks
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log; mkdir -p /tmp/mps/pipe /tmp/mps/log
echo "start $(date -u +%FT%TZ)" > $M
one() {  # runs mode
  echo "=== $(date -u +%T) $2 runs=$1" >> $M
  if [ $2 = mps ]; then nvidia-cuda-mps-control -d; E=""; else E="env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY"; fi
  timeout 120 $E python3 benchmarks/bench_training.py concurrent --preset 4 --runs $1 --paper-steps 1000 --out $R/c-4-$1-$2.json 2>&1 | grep '^{' >> $M
  if [ $2 = mps ]; then echo quit | nvidia-cuda-mps-control; sleep 2; fi
}
one 2 mps; one 1 ts; one 2 ts
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
cd - >/dev/null; tar -cJf $OUT/call21d.tar.xz -C $R .
