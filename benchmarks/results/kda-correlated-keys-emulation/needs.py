"""atol each exact variant needs at the problem's rtol (max over seeds), and rel_err (max over seeds), per output.
python needs.py SHAPE NSEEDS cfg"""
import sys
from emu import *
shape=sys.argv[1]; n=int(sys.argv[2]); c=sys.argv[3] if len(sys.argv)>3 else ""
cfg={}
for kv in filter(None,c.split(",")):
    k,v=kv.split("="); cfg[k]=int(v) if k=="conv" else float(v)
dims = LONG if shape == "long" else dict(KDA.dims(shape)) if shape in KDA.shapes else eval(shape)
names=sys.argv[4].split(",") if len(sys.argv)>4 else ["exact32","sol","fla"]
res={}
for seed in range(n):
    inp=as_f32(make_inputs(dims,seed,**cfg)); ref=recurrent_reference(*inp)
    for nm in names:
        out=run_variant(inp,nm)
        for oname,o,r in zip(KDA.output_names,out,ref):
            tol=KDA.tolerance_for(oname); od,rd=o.double(),r.double()
            need=float(((od-rd).abs()-tol.rtol*rd.abs()).max()); rel=float((od-rd).norm()/rd.norm())
            p=res.get((nm,oname),(0,0,-1)); res[(nm,oname)]=(max(p[0],rel),max(p[1],need),seed if need>p[1] else p[2])
print(f"== {shape} cfg {c or 'today'} {n} seeds: max rel_err, max atol need (seed)")
for (nm,oname),(rel,need,s) in res.items(): print(f"  {nm:8s} {oname:12s} rel {rel:.2e}  atol need {need:.2e} (seed {s})")
