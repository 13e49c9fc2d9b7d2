export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
R=/tmp/r23c; mkdir -p $R; M=$R/machine-c.txt
echo "start $(date -u +%FT%TZ)" > $M
row() {  # tag preset steps [env] timeout
  echo "$1 preset=$2 $4 $(date -u +%T)" >> $M
  env $4 timeout $5 python3 benchmarks/bench_training.py run --systems attngeom-paper --preset $2 --paper-steps $3 --out $R/run-$2-$1.json > $R/run-$2-$1.log 2>&1; echo "rc $?" >> $M
  grep "attngeom-paper" $R/run-$2-$1.log | tail -1 >> $M
}
row default3 12 300 "" 150
row cd3 12 300 TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 300

echo "end $(date -u +%FT%TZ)" >> $M; cat $M
tar -cJf $OUT/call23c.tar.xz -C $R .
