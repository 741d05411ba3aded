#!/bin/bash
# usage: chk.sh url-or-repo...
for u in "$@"; do
  r=$(echo "$u" | sed -E 's#https://github.com/([^/]+/[^/]+).*#\1#')
  hit=$(grep -i -- "$r" /work/scratch/used_sources.txt /work/scratch/s33/claimed.txt | tr '\n' ' ')
  echo "$u -> ${hit:-FREE}"
done
