#!/bin/sh
# The install test (registered by tests/install/CMakeLists.txt):
#   install_test.sh CMAKE BUILD_DIR WORK_DIR CC PROG_C VERSION SOVERSION [SKIP]
# Installs BUILD_DIR into a scratch prefix under WORK_DIR and checks what a
# user of the installed copy sees: the files, weft.pc, the soname, the
# exported symbols, and a program built with pkg-config's flags alone,
# linked shared, static, and static with -flto.
# Exits 0 on success, 77 when skipped, 1 on the first failed check.
set -eu

cmake=$1 build=$2 work=$3 cc=$4 prog=$5 version=$6 soversion=$7 skip=${8:-}
if [ -n "$skip" ]; then
  echo "install test skipped: $skip"
  exit 77
fi

# A fresh directory for each run, in the build tree, so that two runs at
# once (two ctest runs in one build) never share files. A passing run
# removes it; a failing one leaves it to be looked at (make clean removes it).
scratch=$(mktemp -d "$work/scratch.XXXXXX")
trap 'if [ $? -eq 0 ]; then rm -rf "$scratch";
      else echo "install test failed; see $scratch" >&2; fi' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

prefix=$scratch/prefix
lib=$prefix/lib
"$cmake" --install "$build" --prefix "$prefix"

for f in include/weft.h lib/libweft.a lib/libweft.so \
         "lib/libweft.so.$soversion" "lib/libweft.so.$version" \
         lib/pkgconfig/weft.pc lib/pkgconfig/weft-static.pc; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done

# The soname carries the ABI version, so programs keep working across
# compatible upgrades and refuse an incompatible one.
soname=$(readelf -d "$lib/libweft.so" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$soname" = "libweft.so.$soversion" ] ||
  fail "soname is '$soname', expected libweft.so.$soversion"

# Only the public API is exported (src/weft.map). nm shows the version node
# (WEFT_0, type A) too and may append @@WEFT_0 to each name: drop both.
exports=$(nm -D --defined-only "$lib/libweft.so" |
  awk '!($2 == "A" && $3 ~ /^WEFT_[0-9_]+$/) { sub(/@.*/, "", $3); print $3 }')
bad=$(printf '%s\n' "$exports" | grep -v '^weft_[^_]' || true)
[ -z "$bad" ] ||
  fail "libweft.so exports non-public symbols: $(printf '%s' "$bad" | tr '\n' ' ')"
for sym in weft_main weft_spawn weft_join weft_version weft_group_fail \
           weft_group_error; do
  printf '%s\n' "$exports" | grep -qx "$sym" || fail "$sym is not exported"
done

# The header alone compiles warning-free in strict ISO C (where <signal.h>
# has no sigset_t, so weft_signal_wait is left out) and with POSIX, and as
# C++ where a C++ compiler is installed.
echo '#include <weft.h>
int main(void) { return (int)(WEFT_MS(1) / WEFT_MS(1)) - 1; }' >"$scratch/h.c"
for std in c99 c11; do
  for posix in "" -D_POSIX_C_SOURCE=200809L; do
    "$cc" -std=$std $posix -Wall -Wextra -Wpedantic -Werror \
      -I"$prefix/include" -c "$scratch/h.c" -o "$scratch/h.o" ||
      fail "weft.h does not compile with -std=$std $posix -Wpedantic"
  done
done
if command -v c++ >/dev/null 2>&1; then
  for std in c++98 c++17; do
    c++ -x c++ -std=$std -Wall -Wextra -Wpedantic -Werror \
      -I"$prefix/include" -c "$scratch/h.c" -o "$scratch/h.o" ||
      fail "weft.h does not compile as C++ (-std=$std -Wpedantic)"
  done
fi

# No GCC bytecode in the installed archive (CMakeLists.txt, WEFT_LTO): it
# would tie every -flto user to this build's compiler version.
if readelf -S "$lib/libweft.a" | grep -q '\.gnu\.lto_'; then
  fail "the installed libweft.a still has LTO bytecode (.gnu.lto_ sections)"
fi

# From here on only pkg-config knows where weft is.
PKG_CONFIG_PATH=$lib/pkgconfig
export PKG_CONFIG_PATH
pcdir=$(pkg-config --variable=pcfiledir weft)
[ "$pcdir" = "$lib/pkgconfig" ] || fail "pkg-config found weft.pc in $pcdir"
pcversion=$(pkg-config --modversion weft)
[ "$pcversion" = "$version" ] || fail "weft.pc says $pcversion, expected $version"

# What prog.c prints; weft_version() must agree with the project's version.
printf 'weft %s\ntask 1: 1\ntask 2: 4\ntask 3: 9\nsum 14\non the pool: 196\n' "$version" \
  > "$scratch/expected"

cd "$scratch"
cflags=$(pkg-config --cflags weft)

# Shared: the plain flags, run with the scratch lib/ on the search path.
# shellcheck disable=SC2046,SC2086 # pkg-config's output is meant to be split
"$cc" -o prog_shared "$prog" $cflags $(pkg-config --libs weft)
readelf -d prog_shared | grep -q "NEEDED.*\[libweft\.so\.$soversion\]" ||
  fail "prog_shared does not load libweft.so.$soversion"
LD_LIBRARY_PATH=$lib ./prog_shared > out_shared || fail "prog_shared exited $?"
diff -u expected out_shared || fail "prog_shared printed the wrong output"

# Static: pkg-config --static adds Libs.private (what libweft.a itself
# needs); -Bstatic around -lweft picks libweft.a while libc stays shared.
libs=
for w in $(pkg-config --static --libs weft); do
  case $w in
    -lweft) libs="$libs -Wl,-Bstatic -lweft -Wl,-Bdynamic" ;;
    *) libs="$libs $w" ;;
  esac
done
# shellcheck disable=SC2086 # the same
"$cc" -o prog_static "$prog" $cflags $libs
if readelf -d prog_static | grep -q 'NEEDED.*libweft'; then
  fail "prog_static still loads libweft.so"
fi
env -u LD_LIBRARY_PATH ./prog_static > out_static || fail "prog_static exited $?"
diff -u expected out_static || fail "prog_static printed the wrong output"

# weft-static.pc names libweft.a itself: its flags alone link statically.
# shellcheck disable=SC2046 # pkg-config's output is meant to be split
"$cc" -o prog_static_pc "$prog" $(pkg-config --cflags --libs weft-static)
if readelf -d prog_static_pc | grep -q 'NEEDED.*libweft'; then
  fail "prog_static_pc (weft-static.pc) still loads libweft.so"
fi
env -u LD_LIBRARY_PATH ./prog_static_pc > out_static_pc ||
  fail "prog_static_pc exited $?"
diff -u expected out_static_pc ||
  fail "prog_static_pc printed the wrong output"
[ "$(pkg-config --modversion weft-static)" = "$version" ] ||
  fail "weft-static.pc's version is not $version"

# The same with -flto, as a user's LTO build links it: the archive's
# machine code is taken as it is.
# shellcheck disable=SC2086 # the same
"$cc" -flto -o prog_static_lto "$prog" $cflags $libs
env -u LD_LIBRARY_PATH ./prog_static_lto > out_static_lto ||
  fail "prog_static_lto exited $?"
diff -u expected out_static_lto || fail "prog_static_lto printed the wrong output"

echo "install test passed (shared, static, static by weft-static.pc, and static with -flto)"
