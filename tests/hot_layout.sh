#!/bin/sh
# The hot code lies together: every function marked WEFT__HOT in src/*.c,
# and the context switch, is placed by the linker in one run of .text
# (internal.h says why). Checked on a linked test program, where the run is
# what the final link made of each object's .text.hot:
#
#   hot_layout.sh NM PROGRAM SRCDIR
#
# Fails when the functions are spread out: their span, first byte to last,
# is more than their sizes added up plus the alignment padding between
# them (16 bytes each at most, 64 allowed). Prints the span and how many
# pages it covers. Exits 77 (skipped) when nm cannot read PROGRAM.
set -u
nm=$1 prog=$2 src=$3

names=$(sed -n 's/^\(static \)\{0,1\}WEFT__HOT .*[ *]\([a-z_0-9]*\)(.*/\2/p' \
  "$src"/*.c | sort -u | tr "\n" " ")
[ -n "$names" ] || { echo "no WEFT__HOT function in $src/*.c"; exit 1; }
syms=$("$nm" -S --defined-only "$prog" 2>/dev/null) || {
  echo "skipped: $nm cannot read $prog"
  exit 77
}

# (awk here may be mawk: no strtonum, so hex() reads the addresses.)
printf '%s\n%s\n' "$names weft__ctx_jump" "$syms" | awk '
  function hex(x,    i, v) {
    v = 0; x = tolower(x)
    for (i = 1; i <= length(x); i++)
      v = v * 16 + index("0123456789abcdef", substr(x, i, 1)) - 1
    return v
  }
  NR == 1 { n = split($0, w, " "); for (i = 1; i <= n; i++) want[w[i]] = 1
            next }
  # GCC names its specialised copies f.constprop.0, f.isra.0, and with LTO
  # f.lto_priv.0 and an alias f.localalias (f.cold is the cold part, which
  # belongs elsewhere). Every copy counts, an address once.
  NF == 4 { f = $4
            while (sub(/\.(constprop|isra|part|lto_priv)\.[0-9]+$/, "", f) ||
                   sub(/\.localalias$/, "", f)) ; }
  NF == 4 && (f in want) && !($1 in at) {
    seen[f] = 1; at[$1] = 1; a = hex($1); s = hex($2)
    if (!k++ || a < lo) lo = a
    if (a + s > hi) hi = a + s
    total += s
  }
  END {
    for (f in want) if (!(f in seen)) missing = missing " " f
    if (k < 2) { print "fewer than two hot functions found in the program"
                 exit 1 }
    span = hi - lo
    printf "%d hot functions, %d bytes, span %d bytes (%d..%d pages)\n",
           k, total, span, int(span / 4096) + 1, int(span / 4096) + 2
    if (missing != "") print "not in the program (inlined or unused):" missing
    if (span > total + 64 * k) {
      print "FAIL: the hot functions are spread over more than their size"
      exit 1
    }
  }' 2>&1
