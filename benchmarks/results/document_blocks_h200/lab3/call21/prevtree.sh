# a copy of the tree with the code before the atomic dQ (56c2929's src) in /tmp/prev
rm -rf /tmp/prev && mkdir -p /tmp/prev && cp -r benchmarks config pyproject.toml /tmp/prev/ && cp -r .devcarry/prev/src /tmp/prev/src
