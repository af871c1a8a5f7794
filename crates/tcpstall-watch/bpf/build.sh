#!/bin/sh
# Compiles the watch programs into stripped CO-RE objects: into this directory (the
# committed objects), or into the directory given. Needs clang-19 (or $CLANG) and the
# libbpf headers (Debian: clang-19 libbpf-dev). build.rs runs this when clang is there.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
clang=${CLANG:-clang-19}
strip=${LLVM_STRIP:-llvm-strip-19}
cd "$here"
for program in watch fix; do
    # The source directory is mapped to ".", so the objects do not depend on the checkout.
    "$clang" -O2 -g -target bpf -D__TARGET_ARCH_x86 -ffile-prefix-map="$here"=. -I. \
        -c "$program.bpf.c" -o "$out/$program.bpf.o"
    # -g keeps the BTF that CO-RE relocations need; the DWARF is not needed.
    "$strip" -g "$out/$program.bpf.o"
done
