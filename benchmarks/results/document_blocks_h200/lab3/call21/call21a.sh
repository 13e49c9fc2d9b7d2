export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
R=/tmp/r21; mkdir -p $R; M=$R/machine-a.txt
bash .devcarry/prevtree.sh
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M
python3 -c "import torch,triton,transformers;print(torch.__version__, triton.__version__, transformers.__version__)" >> $M; cat .devcarry/commit >> $M; nproc >> $M
echo "tests $(date -u +%T)" >> $M
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_document_blocks.py > $R/gpu-tests.log 2>&1; echo "tests rc $?" | tee -a $M; tail -3 $R/gpu-tests.log | tee -a $M
echo "lab3 $(date -u +%T)" >> $M
timeout 120 python3 benchmarks/results/document_blocks_h200/lab3/lab_fused_backward.py $R/lab3.json > $R/lab3.log 2>&1; echo "lab rc $?" | tee -a $M; tail -4 $R/lab3.log | cut -c1-600
prof() {  # tree tag
  echo "prof $2 $(date -u +%T)" >> $M
  (cd $1 && PYTHONPATH=/tmp/site:$1/src:$1/benchmarks timeout 130 python3 benchmarks/profile_training.py --layers 12 --out $R/prof-12-$2.json > $R/prof-12-$2.log 2>&1; echo "rc $?")
  grep -A1 "tokens/s" $R/prof-12-$2.log | head -2 | tee -a $M
}
prof $PWD atomic; prof /tmp/prev ordered
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
tar -cJf $OUT/call21a.tar.xz -C $R .
