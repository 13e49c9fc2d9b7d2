export PYTHONUNBUFFERED=1
R=/tmp/r22; mkdir -p $R; M=$R/machine.txt
bash .devcarry/prevtree.sh
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M; cat .devcarry/commit >> $M
echo "attention $(date -u +%T)" >> $M
PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks timeout 150 python3 benchmarks/document_attention.py --heads 12 --out $R/kernels-new.json > $R/kernels-new.log 2>&1; echo "rc $?" >> $M
python3 -c "
import json; d=json.load(open('$R/kernels-new.json'))
for r in d:
  for n in ('dense','triton-blocks'):
    k=r['kernels'][n]; print(r['heads'], n, k.get('max_abs_error'), k.get('max_abs_grad_error'), round(sum(k['cuda_kernels_ms'].values()),4), k.get('tuned'))
" >> $M 2>&1
row() {  # tree tag preset steps
  echo "$2 preset=$3 $(date -u +%T)" >> $M
  (cd $1 && PYTHONPATH=/tmp/site:$1/src:$1/benchmarks timeout 140 python3 benchmarks/bench_training.py run --systems attngeom-paper --preset $3 --paper-steps $4 --out $R/run-$3-$2.json > $R/run-$3-$2.log 2>&1; echo "rc $?")
  grep "attngeom-paper" $R/run-$3-$2.log | tail -1 >> $M
}
row $PWD small1 12 300; row /tmp/prev before1 12 300; row $PWD small2 12 300; row /tmp/prev before2 12 300
echo "end $(date -u +%FT%TZ)" >> $M; cat $M
tar -cJf $OUT/call22.tar.xz -C $R .
