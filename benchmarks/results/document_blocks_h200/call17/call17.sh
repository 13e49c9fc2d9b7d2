export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
M=$OUT/machine.txt
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M; cat .devcarry/commit >> $M
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log; mkdir -p /tmp/mps/pipe /tmp/mps/log
echo "mps2 $(date -u +%T)" >> $M; nvidia-cuda-mps-control -d
timeout 120 python3 benchmarks/bench_training.py concurrent --preset 4 --runs 2 --paper-steps 1000 --out $OUT/c-4-2-mps.json 2>&1 | grep '^{' | tee -a $M
echo quit | nvidia-cuda-mps-control; sleep 2; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
B="python3 benchmarks/bench_training.py run --preset 4 --paper-steps 1000 --systems attngeom-paper-stacked"
for s in "2 dense" "2 auto" "4 dense" "4 auto"; do set -- $s
  echo "stacked-$1 $2 $(date -u +%T)" >> $M
  timeout 110 $B --stack $1 --set attention=$2 --out $OUT/stacked-$1-$2.json > $OUT/stacked-$1-$2.log 2>&1; echo "rc $?"; tail -1 $OUT/stacked-$1-$2.log; grep "attngeom-paper" $OUT/stacked-$1-$2.log | tail -1 >> $M
done
echo "end $(date -u +%FT%TZ)" >> $M
