export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
M=$OUT/machine.txt
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M
python3 -c "import torch,triton;print(torch.__version__, triton.__version__)" >> $M; cat .devcarry/commit >> $M
python3 .devcarry/lab_dropout.py 768 $OUT/lab_dropout.json > $OUT/lab_dropout.log 2>&1; grep -v "^    0.00" $OUT/lab_dropout.log | head -40
B="python3 benchmarks/bench_training.py run --preset 12 --paper-steps 300"
timeout 240 $B --systems attngeom-paper plain-compiled --out $OUT/cli-12-auto.json > $OUT/cli-12-auto.log 2>&1; echo "rc $?"; tail -6 $OUT/cli-12-auto.log
timeout 200 $B --systems attngeom-paper --set attention=dense --out $OUT/cli-12-dense.json > $OUT/cli-12-dense.log 2>&1; echo "rc $?"; tail -4 $OUT/cli-12-dense.log
echo "end $(date -u +%FT%TZ)" >> $M
