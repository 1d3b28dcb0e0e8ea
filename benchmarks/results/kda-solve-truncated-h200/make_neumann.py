"""Writes lazy KDA candidates: the project's solution.py with its 64x64 UT inverse (ten matmuls) replaced by a
truncated Neumann series. usage: make_neumann.py SOLUTION OUT ORDER MIN_K"""
import sys
src, out, order, min_k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = open(src).read()
old = "    t_inv = _inv_unit_lower_64(akk, i_, j_, INV_PRECISION, dt).to(dt)\n"
assert s.count(old) == 1
series = {
    1: "eye - a",
    2: "eye - a + _mm(a, a, INV_PRECISION, dt)",
    3: "_mm(eye - a, eye + _mm(a, a, INV_PRECISION, dt), INV_PRECISION, dt)",
}[order]
new = ("    if K >= NEUMANN_MIN_K:  # LAZY: (I + Akk)^-1 cut to its Neumann series of order %d\n"
       "        eye = (i_ == j_).to(tl.float32)\n"
       "        a = akk.to(tl.float32)\n"
       "        t_inv = (%s).to(dt)\n"
       "    else:\n"
       "        t_inv = _inv_unit_lower_64(akk, i_, j_, INV_PRECISION, dt).to(dt)\n") % (order, series)
s = s.replace(old, new).replace("PREP_GLUON = 1\n", "PREP_GLUON = 1\nNEUMANN_MIN_K = tl.constexpr(%d)\n" % min_k, 1)
open(out, "w").write(s)
