export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
R=/tmp/r19b; mkdir -p $R; M=$R/machine.txt; echo "start $(date -u +%FT%TZ)" > $M; cat .devcarry/commit >> $M
B="python3 benchmarks/bench_training.py run --systems attngeom-paper"
row() {
  P=$1; S=$2; T=$3; shift 3
  echo "$T preset=$P $* $(date -u +%T)" >> $M
  timeout 150 $B --preset $P --paper-steps $S "$@" --out $R/run-$P-$T.json > $R/run-$P-$T.log 2>&1; echo "rc $?"
  grep "attngeom-paper" $R/run-$P-$T.log | tail -1 | tee -a $M
}
row 12 300 auto1; row 12 300 off1 --set update_graph=false
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
tar -cJf $OUT/call19b.tar.xz -C $R .
