export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
R=/tmp/r20; mkdir -p $R; L=$R/concurrent-4.log
echo "start $(date -u +%FT%TZ)" > $L; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $L; cat .devcarry/commit >> $L
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log; mkdir -p /tmp/mps/pipe /tmp/mps/log
one() {  # preset runs mode steps
  echo "=== $(date -u +%T) $3 preset=$1 runs=$2" >> $L
  if [ $3 = mps ]; then nvidia-cuda-mps-control -d; E=""; else E="env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY"; fi
  timeout 150 $E python3 benchmarks/bench_training.py concurrent --preset $1 --runs $2 --paper-steps $4 --out $R/c-$1-$2-$3.json 2>&1 | grep '^{' >> $L
  if [ $3 = mps ]; then echo quit | nvidia-cuda-mps-control; sleep 2; fi
}
one 4 1 ts 1000; one 4 2 mps 1000; one 4 2 ts 1000; one 4 1 ts 1000
echo "end $(date -u +%FT%TZ)" >> $L; cat $L
tar -cJf $OUT/call20.tar.xz -C $R .
