export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1
M=$OUT/machine.txt
echo "start $(date -u +%FT%TZ)" > $M; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $M
python3 -c "import torch,triton,transformers;print(torch.__version__, triton.__version__, transformers.__version__)" >> $M; cat .devcarry/commit >> $M
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_document_blocks.py -k "stacked or model_built" > $OUT/gpu-tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/gpu-tests.log
B="python3 benchmarks/bench_training.py run --preset 4 --paper-steps 1000 --systems attngeom-paper-stacked"
echo "auto $(date -u +%T)" >> $M; timeout 170 $B --stack 2 4 --out $OUT/stacked-auto.json > $OUT/stacked-auto.log 2>&1; echo "rc $?"; tail -4 $OUT/stacked-auto.log
echo "dense $(date -u +%T)" >> $M; timeout 170 $B --stack 2 4 --set attention=dense --out $OUT/stacked-dense.json > $OUT/stacked-dense.log 2>&1; echo "rc $?"; tail -4 $OUT/stacked-dense.log
echo "auto2 $(date -u +%T)" >> $M; timeout 100 $B --stack 2 --out $OUT/stacked-auto2.json > $OUT/stacked-auto2.log 2>&1; echo "rc $?"; tail -3 $OUT/stacked-auto2.log
echo "end $(date -u +%FT%TZ)" >> $M
