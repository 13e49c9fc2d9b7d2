export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
M=$OUT/machine.txt
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M
python3 -c "import torch,triton;print(torch.__version__, triton.__version__)" >> $M; cat .devcarry/commit >> $M
python3 .devcarry/lab_dropout.py 768 $OUT/lab_dropout.json > $OUT/lab_dropout.log 2>&1; tail -8 $OUT/lab_dropout.log
for a in blocks dense; do
  timeout 170 python3 benchmarks/profile_training.py --layers 12 --set attention=$a --out $OUT/prof-12-$a.json > $OUT/prof-12-$a.log 2>&1; echo "rc $?"; grep -A8 "tokens/s" $OUT/prof-12-$a.log | head -12
done
echo "end $(date -u +%FT%TZ)" >> $M
