#!/bin/bash
# cg.sh BIN TAG N: callgrind with cache sim at N and 2N ops, 4 PGs, new objects
BIN=$1; TAG=$2; N=${3:-20000}
for n in $N $((2*N)); do
  MIMALLOC_PURGE_DELAY=10000 MIMALLOC_ARENA_PURGE_MULT=10 valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file=/tmp/x/cg/$TAG.$n.out $BIN $n 4 > /dev/null 2>/tmp/x/cg/$TAG.$n.log
done
a=$(grep -o "summary: .*" /tmp/x/cg/$TAG.$N.out); b=$(grep -o "summary: .*" /tmp/x/cg/$TAG.$((2*N)).out)
grep "^events:" /tmp/x/cg/$TAG.$N.out
python3 -c "
a='$a'.split()[1:]; b='$b'.split()[1:]
print('$TAG per write:', ' '.join(f'{(int(y)-int(x))/$N:.0f}' for x,y in zip(a,b)))"
