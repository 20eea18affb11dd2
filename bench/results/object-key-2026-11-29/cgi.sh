#!/bin/bash
BIN=$1; TAG=$2; N=${3:-10000}; MODE=${4:-image}
for n in $N $((2*N)); do
  MIMALLOC_PURGE_DELAY=10000 MIMALLOC_ARENA_PURGE_MULT=10 valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file=/tmp/x/cg/$TAG.$MODE.$n.out $BIN $n 32 $MODE > /dev/null 2>/tmp/x/cg/$TAG.$MODE.$n.log
done
a=$(grep -o "summary: .*" /tmp/x/cg/$TAG.$MODE.$N.out); b=$(grep -o "summary: .*" /tmp/x/cg/$TAG.$MODE.$((2*N)).out)
python3 -c "
a='$a'.split()[1:]; b='$b'.split()[1:]
print('$TAG $MODE per write (Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw):', ' '.join(f'{(int(y)-int(x))/$N:.0f}' for x,y in zip(a,b)))"
