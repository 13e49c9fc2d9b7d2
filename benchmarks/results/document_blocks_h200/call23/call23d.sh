export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
R=/tmp/r23d; mkdir -p $R; M=$R/machine-d.txt
echo "start $(date -u +%FT%TZ)" > $M; ls -d /tmp/torchinductor_* >> $M 2>&1; du -sh /tmp/torchinductor_* >> $M 2>&1
rm -rf /tmp/torchinductor_* ~/.triton/cache
row() {  # tag preset steps [env] timeout
  echo "$1 preset=$2 $4 $(date -u +%T)" >> $M
  env $4 timeout $5 python3 benchmarks/bench_training.py run --systems attngeom-paper --preset $2 --paper-steps $3 --out $R/run-$2-$1.json > $R/run-$2-$1.log 2>&1; echo "rc $? $(date -u +%T)" >> $M
  grep "attngeom-paper" $R/run-$2-$1.log | tail -1 >> $M
}
row cdcold 12 300 TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 470
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
tar -cJf $OUT/call23d.tar.xz -C $R .
