#!/usr/bin/env python3
"""Op-coverage fixtures for tpuc-frontend-fx's numerics tests.

Small models exercising many ATen ops, exported with torch.export (as-is and after
run_decompositions), plus aot_autograd forward/backward graphs captured without
decompositions (they keep backward ops such as convolution_backward). Each model folder has
export.pt2 / core.pt2 (or train_fwd.pt2 / train_bwd.pt2), input_N.npy and expected_N.npy;
manifest.json lists them in the format of tests/fixtures/manifest.json.

Archives are rewritten with deflate compression and without data/sample_inputs to keep the
folder small (this also exercises the importer's compressed-entry path).

Usage: .venv/bin/python make_op_fixtures.py [--out DIR] (default: this folder).
Reruns give identical files; add new cases at the end so earlier inputs keep their seeds.
Needs torch 2.15; reuses tests/fixtures/make_fixtures.py for the training capture.
"""
import torch, torch.nn as nn, torch.nn.functional as F, numpy as np, json, os, io, sys
torch.manual_seed(0)
import argparse
_ap = argparse.ArgumentParser(); _ap.add_argument('--out', default=os.path.dirname(os.path.abspath(__file__)))
OUT=_ap.parse_known_args()[0].out
class M(nn.Module):
    def __init__(s, f, params=None):
        super().__init__(); s.f=f
        if params:
            for k,v in params.items(): setattr(s,k,v)
    def forward(s,*a): return s.f(s,*a)
def P(*shape): return nn.Parameter(torch.randn(*shape))
cases = {}
def case(name, f, args, params=None, dyn=None):
    cases[name]=(f,args,params,dyn)
x=torch.randn(2,3,8,8); y=torch.randn(4,6)
case('elem', lambda s,a,b: (a*2+1, a/3, a-b, torch.pow(a,2), torch.rsqrt(a.abs()+1), torch.sigmoid(a), torch.tanh(b), torch.exp(a).log1p(), a.clamp(-0.5,0.5), torch.where(a>0,a,0.0), a//2, torch.remainder(a,1.5), torch.maximum(a,b), a.neg().abs().sqrt(), torch.erf(a), a.floor(), a.ceil(), a.round(), a.sign(), torch.fmod(a,0.7), torch.reciprocal(a+3), F.hardtanh(a), F.silu(a), F.gelu(a), F.leaky_relu(a,0.1), F.softplus(a), F.elu(a), torch.sin(a)+torch.cos(b), torch.atan2(a,b)), (torch.randn(4,6), torch.randn(4,6)))
case('intops', lambda s,a,b: (a+b, a*3, a//3, a%3, torch.div(a,b,rounding_mode='floor'), torch.div(a,b,rounding_mode='trunc'), a/b, a+1.5, a.sum(), a.float().mean(), a&b, a|b, ~a, a>b, (a==b).any(), a.max(dim=1), a.argmax(1), a.cumsum(0), torch.bitwise_xor(a,b), a.abs(), -a), (torch.randint(-10,10,(4,5)), torch.randint(1,10,(4,5))))
case('promo', lambda s,a,b,c: (a+b, a*c, b+c, b*2.5, c+True, a+torch.tensor(2.0,dtype=torch.float64), b+torch.tensor(3), b.float()/2, b/2, torch.tensor(1.5)*b, c & (a>0), a.half()+1, a.to(torch.bfloat16)*a.to(torch.bfloat16)), (torch.randn(3,4), torch.randint(0,5,(3,4),dtype=torch.int32), torch.rand(3,4)>0.5))
case('shape', lambda s,a: (a.view(-1,8), a.reshape(6,-1), a.permute(0,2,3,1), a.transpose(1,3), a.flatten(1), a[:,1], a[:,:,2:6:2], a[...,-3:], a.unsqueeze(0), a[:,0:1].squeeze(1), a.squeeze(0), a.expand(2,3,8,8), a[:,:1].expand(-1,5,-1,-1), torch.cat([a,a],1), torch.stack([a,a],0), a.split(3,2)[1], a.chunk(2,3)[0], a.narrow(2,1,3), a.repeat(1,2,1,1), a.flip(2), a.roll(1,3), torch.tile(a[0,0],(2,1)), a.t() if a.dim()==2 else a.mT, a.contiguous(), a.unbind(1)[2], a.movedim(1,-1), a.select(3,-1)), (x,))
case('reduce', lambda s,a: (a.sum(1), a.sum((0,2),keepdim=True), a.mean(-1), a.amax(1), a.amin((2,3)), a.max(), a.min(1).values, a.prod(3), a.var(1), a.std(2,keepdim=True), a.var(1,correction=0), a.logsumexp(2), a.norm(dim=1), torch.all(a>-3), torch.any(a>2,1), a.argmin(2), a.cumsum(1), a.cumprod(3), torch.softmax(a,1), torch.log_softmax(a,3), a.topk(3,3), a.sort(2), a.sort(1,descending=True), a.argsort(3)), (x,))
case('index', lambda s,a,i,j: (a[i], a[:,j], a.gather(1, j.unsqueeze(0).expand(4,-1)[:, :3]), a.index_select(1,j), torch.embedding(a,i), a.scatter(1, torch.zeros(4,2,dtype=torch.long), 5.0), a.scatter_add(0, torch.ones(2,6,dtype=torch.long), torch.ones(2,6)), a.index_put((i,), torch.ones(3,6)), a.masked_fill(a>0, -1.0), torch.where(a>0, a, torch.zeros(()) ), a[i, j[:3]], a[None, 1:3], a[a[:,0]>100] if False else a.clone()), (torch.randn(4,6), torch.tensor([0,2,3]), torch.tensor([1,5,0,2])))
case('creation', lambda s,a: (torch.arange(5), torch.arange(1,7,2), torch.arange(0,1,0.25), torch.full((2,3),7), torch.full((2,3),1.5), torch.zeros(3,dtype=torch.int32), torch.ones_like(a), torch.full_like(a,3), torch.zeros_like(a,dtype=torch.bool), torch.eye(3), a.new_zeros(2), a.new_ones(2,2), torch.tensor(3.0)*a, torch.linspace(0,1,5), torch.tril(torch.ones(4,4)), torch.triu(a)), (torch.randn(4,4),))
case('nn', lambda s,a: (F.conv2d(a,s.w,s.b,stride=2,padding=1), F.conv2d(a,s.wg,None,groups=3,dilation=2), F.max_pool2d(a,3,2,1), F.max_pool2d(a,3,2,0,ceil_mode=True), F.avg_pool2d(a,2), F.avg_pool2d(a,3,2,1), F.avg_pool2d(a,3,2,1,count_include_pad=False,ceil_mode=True), F.adaptive_avg_pool2d(a,1), F.batch_norm(a,s.rm,s.rv,s.bw,s.bb,False,0.1,1e-3), F.layer_norm(a,(8,8)), F.group_norm(a,3,s.bw,s.bb), F.pad(a,(1,2,0,1)), F.pad(a,(1,1,1,1),value=2.0), F.conv_transpose2d(a,s.wt,stride=2,padding=1,output_padding=1), F.interpolate(a,scale_factor=2,mode='nearest'), F.interpolate(a,size=(5,7),mode='bilinear',align_corners=False), F.conv1d(a.flatten(2),s.w1,padding=2), F.dropout(a,0.5,False), F.hardswish(a), F.relu6(a), F.instance_norm(a)), (x,), dict(w=P(4,3,3,3),b=P(4),wg=P(6,1,3,3),rm=torch.randn(3)*0.1,rv=torch.rand(3)+0.5,bw=P(3),bb=P(3),wt=P(3,5,3,3),w1=P(4,3,5)))
case('linalg', lambda s,a,b: (a@b, torch.bmm(a.unsqueeze(0).expand(2,-1,-1), b.unsqueeze(0).expand(2,-1,-1)), torch.matmul(a, b[:,0]), torch.matmul(a[None,None], b), torch.addmm(s.bias, a, b, beta=0.5, alpha=2.0), F.linear(a, b.t(), None), torch.einsum('ij,jk->ik',a,b), torch.baddbmm(torch.ones(2,3,5),a.expand(2,3,4),b.expand(2,4,5)), torch.outer(a[0],b[0]), torch.addmv(b[0,:3], a, b[:,0])), (torch.randn(3,4),torch.randn(4,5)), dict(bias=P(5)))
case('sdpa', lambda s,q,k,v,m: (F.scaled_dot_product_attention(q,k,v), F.scaled_dot_product_attention(q,k,v,is_causal=True), F.scaled_dot_product_attention(q,k,v,attn_mask=m), F.scaled_dot_product_attention(q,k,v,attn_mask=m.float()*-1e9, scale=0.3), F.scaled_dot_product_attention(q,k[:,:2],v[:,:2],enable_gqa=True)), (torch.randn(2,4,5,8),torch.randn(2,4,7,8),torch.randn(2,4,7,6),torch.rand(5,7)>0.3))

x2=torch.randn(3,5)
case('elem2', lambda s,a,b: (torch.div(a,b,rounding_mode='floor'), torch.div(a,b,rounding_mode='trunc'), torch.remainder(a,b), torch.fmod(a,b), torch.pow(a.abs(),b), torch.pow(2.0,b), torch.pow(a,3), a**0.5, a**-1, a**-2, torch.clamp(a,b-0.5,b+0.5), torch.where(a>0,1.0,-1.0), a.masked_fill(b>0,3), torch.lerp(a,b,0.3), torch.lerp(a,b,0.7), torch.addcmul(a,a,b,value=0.5), torch.addcdiv(a,a,b.abs()+1,value=2), torch.logit(torch.sigmoid(a)), torch.trunc(a*3), torch.exp2(a), torch.log2(a.abs()+1), torch.sinh(a), torch.cosh(a), torch.atan(a), torch.asin(torch.tanh(a)), torch.acos(torch.tanh(b)), torch.isnan(a/ (b*0)), torch.isinf(a/(b*0)), torch.nan_to_num(a/(b*0)), F.softplus(a,beta=2,threshold=1), F.mish(a), F.celu(a,0.5), F.selu(a), F.hardsigmoid(a), a.sign(), torch.fmax(a,b), torch.logical_xor(a>0,b>0), torch.logical_or(a>0,b), (a*10).round(), torch.rsub(a,2) if False else 2-a, torch.rsub(a,b,alpha=2)), (torch.randn(6,7), torch.randn(6,7)))
case('half', lambda s,a: (torch.softmax(a.half(),-1), torch.softmax(a.bfloat16(),-1).float(), F.layer_norm(a.bfloat16(),(7,)), a.bfloat16().sum(1), a.half().mean(0), torch.log_softmax(a,1,dtype=torch.float64), (a.half()+a.half()*2).float(), a.to(torch.float64).exp()), (torch.randn(6,7),))
case('reduce2', lambda s,a,i: (a.cummax(1), a.cummin(0), torch.aminmax(a), torch.std_mean(a,1), torch.var_mean(a,0,correction=0), torch.count_nonzero(a>0.5,1), a.argmax(), a.argmin(keepdim=True,dim=1), i.prod(1), i.sum(dtype=torch.float32), i.float().mean(1,keepdim=True), a.amax((0,1),keepdim=True), a.max(1,keepdim=True), a.sum(-1,keepdim=True), i.cumsum(1), a.norm(p=1,dim=1), a.norm(p=float('inf')), torch.linalg.vector_norm(a,3,dim=0), torch.logsumexp(a,(0,1))), (torch.randn(5,6), torch.randint(-3,4,(5,6))))
case('shape2', lambda s,a: (a.unflatten(1,(2,-1)), a.movedim((0,1),(2,0)), F.pixel_shuffle(a.reshape(1,8,2,2),2), F.pixel_unshuffle(a.reshape(1,2,4,4),2), a.roll(2), a.roll((1,-1),(0,2)), F.pad(a,(1,2,2,1),mode='reflect'), F.pad(a,(2,1,0,1),mode='replicate'), F.pad(a,(1,1,1,1),mode='circular'), torch.as_strided(a.contiguous(),(3,3),(2,1),1), a.unfold(2,2,1), torch.hstack([a,a]), torch.vstack([a[0],a[1]]), a.split([1,3],1)[1], a.narrow(2,-3,2), a.new_full((2,2),5), a.flip(0,2), a.swapaxes(0,2), a.expand(2,2,4,4)[1], a.reshape(-1), torch.cat([a, a.half()],0).float() ), (torch.randn(2,4,4),))
case('index2', lambda s,a,i,j: (a[i,:,j], a[:,i][:, :, j] if False else a[:, i, :][..., j], a[i][:, None], a.index_put((i,j.remainder(4)), torch.ones(5), accumulate=True), a.index_put((i,), torch.full((3,4,5),2.0)), a.masked_fill(a>0.5,0.0), torch.scatter_reduce(a,1,torch.zeros(3,2,5,dtype=torch.long),torch.ones(3,2,5),'sum',include_self=False), torch.scatter_reduce(a,1,torch.ones(3,2,5,dtype=torch.long),torch.full((3,2,5),3.0),'amax'), torch.scatter_reduce(a,2,torch.ones(3,4,2,dtype=torch.long),torch.full((3,4,2),2.0),'mean'), torch.scatter_reduce(a,2,torch.ones(3,4,2,dtype=torch.long),torch.full((3,4,2),2.0),'prod',include_self=False), torch.index_add(a,0,torch.tensor([0,2,0]),torch.ones(3,4,5),alpha=2), torch.slice_scatter(a,torch.zeros(3,4,2),2,1,5,2), torch.select_scatter(a,torch.zeros(3,5),1,-1), a.gather(2, torch.tensor([[[0,4],[1,1],[2,3],[4,0]]]).expand(3,4,2)), a[:, -1], a[..., 1:-1:2], a[-2:]), (torch.randn(3,4,5), torch.tensor([0,2,-1]), torch.tensor([1,4,0])))
class Mask(nn.Module):
    def forward(s,a):
        a=a.clone(); a[a>0.5]=0.25; return a
cases['maskput']=(None,(torch.randn(4,5),),None,None)
case('nn2', lambda s,a: (F.adaptive_avg_pool2d(a,(3,5)), F.adaptive_max_pool2d(a,(4,2)), F.max_pool2d(a,3,2,1,return_indices=True), F.max_pool2d(a,2,2,0,ceil_mode=True,return_indices=True), F.max_pool2d(a,3,1,1,dilation=2), F.avg_pool2d(a,3,2,1,ceil_mode=True), F.avg_pool2d(a,2,3,1,count_include_pad=False), F.avg_pool2d(a,3,divisor_override=2), F.conv2d(a,s.w,padding='same'), F.conv_transpose2d(a,s.wt,stride=2,padding=1,groups=3,dilation=2), F.group_norm(a,1), F.batch_norm(a,None,None,s.bw,s.bb,True), F.instance_norm(a,weight=s.bw,bias=s.bb), F.interpolate(a,scale_factor=1.5,mode='nearest-exact'), F.interpolate(a,size=(6,12),mode='bilinear',align_corners=True), F.interpolate(a[:,:,0],size=9,mode='linear'), F.rms_norm(a,(8,)), F.embedding(torch.tensor([[1,0],[3,2]]), s.emb, padding_idx=0), F.max_pool1d(a[:,:,0],3), F.avg_pool1d(a[:,:,0],2), F.conv3d(a.unsqueeze(2),s.w3), F.adaptive_avg_pool1d(a[:,:,0],3)), (torch.randn(2,3,8,8),), dict(w=P(4,3,3,3),wt=P(3,2,3,3),bw=P(3),bb=P(3),emb=P(5,4),w3=P(2,3,1,2,2)))
case('sdpa2', lambda s,q,k,v,m: (F.scaled_dot_product_attention(q,k,v,attn_mask=m), F.scaled_dot_product_attention(q,k[:,:1],v[:,:1],enable_gqa=True,is_causal=True), F.scaled_dot_product_attention(q[0],k[0],v[0]), F.scaled_dot_product_attention(q,k,v,attn_mask=torch.zeros(5,6))), (torch.randn(2,2,5,4),torch.randn(2,2,6,4),torch.randn(2,2,6,3),torch.rand(2,1,5,6)>0.5))
case('linalg2', lambda s,a,b: (torch.einsum('bij,bjk->bik',a,b), torch.einsum('bij,bjk',a,b), torch.einsum('...ij,...jk->...ik',a,b), torch.einsum('bij->ji',a), torch.einsum('bij,bkj->bik',a,a), torch.einsum('i,i->',a[0,0],a[0,1]), torch.einsum('ij,kl->ijkl',a[0],b[0][:2]), torch.matmul(a,b[0]), torch.matmul(a[0,0],b), torch.matmul(a.unsqueeze(1),b.unsqueeze(0)), torch.matmul(a,b[0,:,0]), torch.baddbmm(a[:,:,:2],a,b[:,:,:2],beta=0.5,alpha=2), torch.addbmm(a[0,:,:2],a,b[:,:,:2]), torch.inner(a,a), torch.mv(a[0],b[0,:,0]), torch.dot(a[0,0],a[0,1]), F.bilinear(a,a,s.wb) if False else a.sum()), (torch.randn(2,3,4),torch.randn(2,4,5)), dict(wb=P(2,4,4)))
class Dyn(nn.Module):
    def __init__(s): super().__init__(); s.l=nn.Linear(8,4)
    def forward(s,a,b):
        n=a.shape[0]
        h=s.l(a).view(n*2,2)
        c=torch.cat([a,b],0)
        z=a.new_zeros(n,3)
        r=torch.arange(n)
        return h.sum(1), c.view(-1,4), z+1, r*2, a[:n//2], a.reshape(n,2,4).permute(1,0,2).flatten(1), torch.nn.functional.pad(a,(0,0,1,1)), a.mean(0,keepdim=True).expand(n,-1), a[1:]
cases['dyn']=(None,(torch.randn(6,8),torch.randn(5,8)),None,None)
case('misc', lambda s,a: (torch.histc(a,10), torch.histc(a,5,-1,1), a.repeat_interleave(2,1), a.repeat_interleave(3), a.view_as(a.t()), F.logsigmoid(a), F.glu(a,0), F.hardshrink(a), F.softshrink(a,0.3)), (torch.randn(4,6),))
# _scaled_dot_product_flash_attention_for_cpu called directly: its logsumexp (output 1 of each
# call) is [B, H, L], in f32 for bf16 inputs; L != S and E == S tell it apart from the output
# and the attention weights. Export form only: torch's core decomposition of this op returns
# the attention weights where the logsumexp belongs.
FLASH=torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
case('flash', lambda s,q,k,v,m: (FLASH(q,k,v), FLASH(q,k,v,is_causal=True), FLASH(q,k,v,attn_mask=m), FLASH(q,k,v,scale=0.3), FLASH(q,k[:,:2],v[:,:2]), FLASH(q.bfloat16(),k.bfloat16(),v.bfloat16())[1]), (torch.randn(4,4,3,6), torch.randn(4,4,6,6), torch.randn(4,4,6,6), torch.randn(3,6)))
FORMS={'flash': ('export',)}
import zipfile
def repack(path):
    """Deflate every entry, drop the sample-inputs pickle and the random serialization id, and
    strip `from_node` provenance (process-specific ids) so that rerunning gives identical files."""
    with zipfile.ZipFile(path) as z:
        items = [(i.filename, z.read(i.filename)) for i in z.infolist()
                 if 'sample_inputs' not in i.filename and not i.filename.endswith('serialization_id')]
    with zipfile.ZipFile(path, 'w', compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for n, b in items:
            if n.endswith('models/model.json'):
                m = json.loads(b)
                for node in m['graph_module']['graph']['nodes']:
                    node.get('metadata', {}).pop('from_node', None)
                b = json.dumps(m).encode()
            z.writestr(zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0)), b, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)

def export_one(name, mod, args, dyn=None):
    mod.eval()
    with torch.no_grad(): exp=mod(*args)
    if not isinstance(exp,(tuple,list)): exp=(exp,)
    flat=[]
    def fl(o):
        if isinstance(o,torch.Tensor): flat.append(o)
        elif isinstance(o,(tuple,list)) or hasattr(o,'_fields'):
            for q in o: fl(q)
    fl(exp)
    os.makedirs(f'{OUT}/{name}',exist_ok=True)
    for i,a in enumerate(args): np.save(f'{OUT}/{name}/input_{i}.npy', a.numpy())
    for i,o in enumerate(flat):
        o=o.detach()
        if o.dtype==torch.bfloat16: o=o.float()
        if o.dtype==torch.float16: o=o.float()
        np.save(f'{OUT}/{name}/expected_{i}.npy', o.contiguous().numpy())
    ep=torch.export.export(mod,args,dynamic_shapes=dyn)
    torch.export.save(ep,f'{OUT}/{name}/export.pt2'); repack(f'{OUT}/{name}/export.pt2')
    forms=FORMS.get(name,('export','core'))
    if 'core' in forms:
        core=ep.run_decompositions()
        torch.export.save(core,f'{OUT}/{name}/core.pt2'); repack(f'{OUT}/{name}/core.pt2')
    for form in forms:
        MANIFEST.append({'name': f'{name}.{form}', 'file': f'{name}/{form}.pt2', 'kind': 'inference',
            'inputs': [f'{name}/input_{i}.npy' for i in range(len(args))],
            'expected': [f'{name}/expected_{i}.npy' for i in range(len(flat))], 'rtol': 1e-5, 'atol': 1e-5})
    print(name,'ok',len(flat))
only=[a for a in sys.argv[1:] if not a.startswith('--') and a != OUT]
MANIFEST=[]
for name,(f,args,params,dyn) in cases.items():
    if only and name not in only: continue
    try:
        if name=='maskput':
            export_one(name, Mask(), args)
        elif name=='dyn':
            d=torch.export.Dim('n',min=2,max=100); d2=torch.export.Dim('m',min=2,max=50)
            export_one(name, Dyn(), args, dyn={'a':{0:2*d},'b':{0:d2}})
        else:
            export_one(name, M(f,params), args)
    except Exception as e:
        print(name,'FAILED',type(e).__name__,str(e)[:300])


# ---------------------------------------------------------------- training graphs
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../../tests/fixtures'))
import make_fixtures as mf
from torch._functorch.aot_autograd import aot_module_simplified

def capture(loss_module, args):
    torch._dynamo.reset()
    rec = {"fw": [], "bw": []}
    def make(kind):
        def compiler(gm, ex):
            entry = {"gm": gm, "calls": [], "meta": None}
            rec[kind].append(entry)
            def run(call_args):
                entry["calls"].append([mf._clone(a) for a in call_args])
                outs = gm(*call_args)
                entry.setdefault("outs", [mf._clone(o) for o in outs])
                return outs
            run._boxed_call = True
            return run
        return compiler
    def backend(gm, ex):
        return aot_module_simplified(gm, ex, fw_compiler=make("fw"), bw_compiler=make("bw"))
    c = torch.compile(loss_module, backend=backend, fullgraph=True, dynamic=False)
    loss = c(*args); loss.backward()
    torch._dynamo.reset()
    return rec["fw"][0], rec["bw"][0]

class M1(nn.Module):
    def __init__(s):
        super().__init__(); s.emb=nn.Embedding(10,8,padding_idx=0); s.ln=nn.LayerNorm(8); s.l1=nn.Linear(8,16); s.l2=nn.Linear(16,8)
    def forward(s, ids, y):
        h=s.ln(s.emb(ids)); h=F.gelu(s.l1(h),approximate='tanh'); h=torch.tanh(h)*torch.sigmoid(h)+F.silu(h)
        h=s.l2(h); h=F.gelu(h)
        return F.cross_entropy(h.reshape(-1,8), y.reshape(-1)) + torch.softmax(h,-1).pow(2).mean()
class M2(nn.Module):
    def __init__(s):
        super().__init__(); s.c1=nn.Conv2d(4,6,3,stride=2,padding=1,groups=2); s.bn=nn.BatchNorm2d(6); s.c2=nn.Conv2d(6,4,3,dilation=2,padding=2,bias=False); s.fc=nn.Linear(4,3)
    def forward(s,x,y):
        h=F.relu(s.bn(s.c1(x))); h=F.max_pool2d(h,3,2,1); h=F.relu(s.c2(h)); h=F.avg_pool2d(h,2,1)
        return F.cross_entropy(s.fc(h.flatten(1)), y)
class M3(nn.Module):
    def __init__(s):
        super().__init__(); s.qkv=nn.Linear(8,24)
    def forward(s,x):
        q,k,v=s.qkv(x).view(2,5,3,2,4).permute(2,0,3,1,4)
        return F.scaled_dot_product_attention(q,k,v,is_causal=True).pow(2).sum()

w = mf.Writer(OUT)
torch.manual_seed(0)
specs = {
  'm1': (M1(), (torch.randint(0,10,(2,5)), torch.randint(0,8,(2,5)))),
  'm2': (M2(), (torch.randn(2,4,8,8), torch.randint(0,3,(2,)))),
  'm3': (M3(), (torch.randn(2,5,8),)),
}
for name,(m,args) in specs.items():
    if only and name not in only: continue
    m.train()
    fw, bw = capture(m, args)
    print(name, sorted(set(str(n.target) for n in fw['gm'].graph.nodes if n.op=='call_function')))
    print(name, sorted(set(str(n.target) for n in bw['gm'].graph.nodes if n.op=='call_function')))
    w.training(name, 'train_fwd', fw['gm'], fw['calls'][0], fw['outs'], 1e-4, 1e-5, {})
    w.training(name, 'train_bwd', bw['gm'], bw['calls'][0], bw['outs'], 1e-4, 1e-5, {})
    for k in ('train_fwd', 'train_bwd'):
        repack(f'{OUT}/{name}/{k}.pt2')


MANIFEST.extend({k: v for k, v in e.items() if k in ('name', 'file', 'kind', 'inputs', 'expected', 'rtol', 'atol')} for e in w.manifest)
if only and os.path.exists(f'{OUT}/manifest.json'):
    # a partial run updates its cases in the existing manifest
    fresh = {e['name']: e for e in MANIFEST}
    old = json.load(open(f'{OUT}/manifest.json'))
    names = [e['name'] for e in old]
    MANIFEST = [fresh.pop(e['name'], e) for e in old] + list(fresh.values())
json.dump(MANIFEST, open(f'{OUT}/manifest.json', 'w'), indent=1)
