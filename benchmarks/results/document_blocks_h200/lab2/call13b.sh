export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
M=$OUT/machine.txt
echo "start $(date -u +%FT%TZ)" > $M; cat .devcarry/commit >> $M
B="python3 benchmarks/bench_training.py run --preset 4"
timeout 150 $B --systems attngeom-paper plain-compiled --out $OUT/cli-4-auto-1.json > $OUT/cli-4-auto-1.log 2>&1; echo "rc $?"; tail -5 $OUT/cli-4-auto-1.log
timeout 120 $B --systems attngeom-paper --set attention=dense --out $OUT/cli-4-dense-1.json > $OUT/cli-4-dense-1.log 2>&1; echo "rc $?"; tail -3 $OUT/cli-4-dense-1.log
timeout 120 $B --systems attngeom-paper --set attention=dense --out $OUT/cli-4-dense-2.json > $OUT/cli-4-dense-2.log 2>&1; echo "rc $?"; tail -3 $OUT/cli-4-dense-2.log
timeout 120 $B --systems attngeom-paper --out $OUT/cli-4-auto-2.json > $OUT/cli-4-auto-2.log 2>&1; echo "rc $?"; tail -3 $OUT/cli-4-auto-2.log
echo "end $(date -u +%FT%TZ)" >> $M
