export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
R=/tmp/r23; mkdir -p $R; M=$R/machine-a.txt
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M
python3 -c "import torch,triton,transformers;print(torch.__version__, triton.__version__, transformers.__version__)" >> $M 2>&1; cat .devcarry/commit >> $M; nproc >> $M
echo "attention $(date -u +%T)" >> $M
timeout 220 python3 benchmarks/document_attention.py --heads 4 12 --out $R/attention.json > $R/attention.log 2>&1; echo "rc $?" >> $M
row() {  # tag preset steps [env]
  echo "$1 preset=$2 $4 $(date -u +%T)" >> $M
  env $4 timeout $5 python3 benchmarks/bench_training.py run --systems attngeom-paper --preset $2 --paper-steps $3 --out $R/run-$2-$1.json > $R/run-$2-$1.log 2>&1; echo "rc $?" >> $M
  grep "attngeom-paper" $R/run-$2-$1.log | tail -1 >> $M
}
row default1 12 300 "" 150
row cd1 12 300 TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 230
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
tar -cJf $OUT/call23a.tar.xz -C $R .
