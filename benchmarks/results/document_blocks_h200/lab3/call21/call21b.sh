export PYTHONUNBUFFERED=1
R=/tmp/r21b; mkdir -p $R; M=$R/machine-b.txt
[ -d /tmp/prev ] || bash .devcarry/prevtree.sh
echo "start $(date -u +%FT%TZ)" > $M; cat .devcarry/commit >> $M
row() {  # tree tag preset steps
  echo "$2 preset=$3 $(date -u +%T)" >> $M
  (cd $1 && PYTHONPATH=/tmp/site:$1/src:$1/benchmarks timeout 140 python3 benchmarks/bench_training.py run --systems attngeom-paper --preset $3 --paper-steps $4 --out $R/run-$3-$2.json > $R/run-$3-$2.log 2>&1; echo "rc $?")
  grep "attngeom-paper" $R/run-$3-$2.log | tail -1 | tee -a $M
}
row $PWD atomic1 12 300; row /tmp/prev ordered1 12 300; row $PWD atomic2 12 300; row /tmp/prev ordered2 12 300
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
tar -cJf $OUT/call21b.tar.xz -C $R .
