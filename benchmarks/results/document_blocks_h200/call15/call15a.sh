export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
M=$OUT/machine.txt
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M
python3 -c "import torch,triton,transformers;print(torch.__version__, triton.__version__, transformers.__version__)" >> $M; cat .devcarry/commit >> $M; nproc >> $M
for L in 12 4; do
  timeout 220 python3 benchmarks/profile_training.py --layers $L --trace /tmp/trace-$L.json --out $OUT/prof-$L.json > $OUT/prof-$L.log 2>&1; echo "rc $?"
  grep -A2 "tokens/s" $OUT/prof-$L.log | head -3; grep -A12 "device idle" $OUT/prof-$L.log
  ls -la /tmp/trace-$L.json; xz -T8 -3 -c /tmp/trace-$L.json > $OUT/trace-$L.json.xz; ls -la $OUT/trace-$L.json.xz
done
echo "end $(date -u +%FT%TZ)" >> $M
