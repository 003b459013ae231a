#!/bin/sh
set -eu
# a script long enough to be folded or block-printed by the YAML emitter, with "quotes" and <html> & ampersands
for i in 1 2 3; do
  echo "iteration $i"
done
