"""float32 reference vs float64 reference: rel_err and max |diff|, raw. python ref64.py SHAPE NSEEDS"""
import sys, torch
from emu import *
shape=sys.argv[1]; n=int(sys.argv[2]); cfg=dict(alpha=2.0,conv=4,beta_mu=1.0)
dims=LONG if shape=="long" else dict(KDA.dims(shape))
for seed in range(n):
    inp=as_f32(make_inputs(dims,seed,**cfg)); a=recurrent_reference(*inp); b=recurrent_reference(*inp,dtype=torch.float64)
    print(shape, seed, " ".join(f"{nm}: rel {float((x.double()-y).norm()/y.norm()):.2e} maxabs {float((x.double()-y).abs().max()):.2e}" for nm,x,y in zip(KDA.output_names,a,b)), flush=True)
