"""Max over seeds of each output's (rel, el) multiple for the given variants: python seeds.py SHAPE SEEDS VARIANTS cfg..."""
import sys
from emu import *
shape=sys.argv[1]; seeds=[int(s) for s in sys.argv[2].split(",")] if "," in sys.argv[2] else list(range(int(sys.argv[2])))
names=sys.argv[3].split(","); cfgs=sys.argv[4:] or [""]
dims = LONG if shape == "long" else dict(KDA.dims(shape)) if shape in KDA.shapes else eval(shape)
for c in cfgs:
    cfg={}
    for kv in filter(None, c.split(",")):
        k,v=kv.split("="); cfg[k]=int(v) if k=="conv" else float(v)
    agg={n:{} for n in names}; orms=[]; srms=[]
    for seed in seeds:
        inp=as_f32(make_inputs(dims,seed,**cfg)); ref=recurrent_reference(*inp); orms.append(float(ref[0].pow(2).mean().sqrt())); srms.append(float(ref[1].pow(2).mean().sqrt()))
        for n in names:
            if n=="ref64":
                r=judge(ref, recurrent_reference(*inp,dtype=torch.float64))
            else:
                r=judge(run_variant(inp,n),ref)
            for o,(a,b) in r.items():
                pa,pb=agg[n].get(o,(0,0) if n in ("exact32","sol","fla","ref64") else (1e9,1e9))
                if n in ("exact32","sol","fla","ref64"): agg[n][o]=(max(pa,a),max(pb,b))
                else: agg[n][o]=(min(pa,a),min(pb,b))
    print(f"== {shape} cfg {c or 'today'} seeds {len(seeds)} (exact: max over seeds; shortcuts: min over seeds) o rms {min(orms):.4f}-{max(orms):.4f} state rms {min(srms):.3f}-{max(srms):.3f}")
    for n in names: print(f"  {n:12s} {fmt(agg[n])}")
