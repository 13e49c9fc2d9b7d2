export PYTHONUNBUFFERED=1
NEW=/tmp/site:$PWD/src:$PWD/benchmarks; PREV=/tmp/site:$PWD/.devcarry/prev/src:$PWD/benchmarks
M=$OUT/machine.txt
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M
cat .devcarry/commit >> $M
P="python3 benchmarks/profile_training.py --layers 12"
PYTHONPATH=$NEW timeout 150 $P --out $OUT/prof-12-hash.json > $OUT/prof-12-hash.log 2>&1; echo "rc $?"; grep -A9 "tokens/s" $OUT/prof-12-hash.log | head -10
PYTHONPATH=$PREV timeout 150 $P --out $OUT/prof-12-torch.json > $OUT/prof-12-torch.log 2>&1; echo "rc $?"; grep -A9 "tokens/s" $OUT/prof-12-torch.log | head -10
PYTHONPATH=$NEW timeout 190 python3 benchmarks/bench_training.py run --preset 12 --paper-steps 300 --systems attngeom-paper --out $OUT/cli-12-hash.json > $OUT/cli-12-hash.log 2>&1; echo "rc $?"; tail -3 $OUT/cli-12-hash.log
echo "end $(date -u +%FT%TZ)" >> $M
