#!/usr/bin/python3
"""The peer of bench_model: one training step (forward, backward, AdamW) of
the same model (docs/model.md) in PyTorch on CPU, written as fast as
PyTorch reasonably runs this math.

Same math as longhaul: byte embedding, pre-norm blocks with chunked linear
attention (lower-bounded log-decay g_min*sigmoid(raw/tau), state reset per
sequence), per-head RMSNorm, cross-layer residual scalars, MoE with latent
down/up projections, sigmoid router, top-k over s + b, gates s/sum s,
grouped experts (SwiGLU), shared experts, untied output, mean
cross-entropy, AdamW.

No op here costs more than its share: the chunk loop takes its chunks with
unbind() (one gradient buffer for all of them, where x[:, :, c] would
allocate a full-size zero gradient per chunk), and the routed experts run
on their tokens gathered once (sorted by expert, one index_select, split,
one index_add back); their weights are unbound once per call.

--params FILE reads longhaul's model.safetensors (config from its
metadata), so both sides start from the same weights; --tokens FILE reads
the batch (seqs x seq-len int32, little-endian), so both see the same
tokens. Without them, the demo model from torch's own generator.

Threads: the caller sets OMP_NUM_THREADS / OPENBLAS_NUM_THREADS /
MKL_NUM_THREADS in the environment before this process starts (OpenBLAS
sizes its pool when it loads; torch.set_num_threads does not reach it);
--threads sets torch's own pool; bench_model also sets OMP_WAIT_POLICY=PASSIVE
(see its run_peer). The line "peer_torch threads ..." says
what each pool really is.

Prints "peer_torch loss L" (first step) and "peer_torch step_s SECONDS
cpu_s SECONDS" (best of --steps after one warm-up step, wall clock and the
process's CPU time). With --check DIR: one forward and
backward, no optimiser step; DIR/model.safetensors gets the gradients in
the layout of the --params file (the tensors the peer does not have, patch
and balancing bias, are zeros). Run with /usr/bin/python3 (Debian's
python3-torch).
"""
import argparse
import ctypes
import json
import os
import re
import struct
import sys
import time

import torch
import torch.nn.functional as F

EPS = 1e-6
DEMO = dict(d_model=128, layers=4, heads=4, experts=16, topk=2, shared_experts=1, latent=64,
            expert_hidden=128, chunk=16, g_min=-5.0, tau=1.0, vocab=264, balance="bias")


def blas_threads():
    """The OpenBLAS this process loaded and its pool size, asked of the
    library itself."""
    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        return "unknown"
    libs = sorted(set(re.findall(r"(/\S*libopenblas\S*\.so\S*)", maps)))
    if not libs:
        blas = sorted(set(re.findall(r"(/\S*lib(?:blas|mkl_rt)\S*\.so\S*)", maps)))
        return "not OpenBLAS (%s)" % (", ".join(blas) or "none loaded")
    lib = ctypes.CDLL(libs[0])
    lib.openblas_get_config.restype = ctypes.c_char_p
    par = {0: "sequential", 1: "pthreads", 2: "OpenMP"}.get(lib.openblas_get_parallel(), "?")
    return "openblas %d (%s, %s; %s)" % (lib.openblas_get_num_threads(), par,
                                        lib.openblas_get_config().decode().strip(), libs[0])


def omp_max_threads():
    m = re.search(r"omp_get_max_threads\(\) : (\d+)", torch.__config__.parallel_info())
    return m.group(1) if m else "?"


# ---- weights: longhaul's names and shapes (model/params.c) -----------------
def names_of(c):
    """(name, shape) in longhaul's table order; the peer trains all but the
    patch tensors (no images here) and the balancing bias."""
    d, r, f, E, S = c["d_model"], c["latent"], c["expert_hidden"], c["experts"], c["shared_experts"]
    dk = d // c["heads"]
    out = [("embed", (c["vocab"], d))]
    for l in range(c["layers"]):
        p = "layers.%d." % l
        out += [(p + "attn_norm", (d,))]
        out += [(p + "attn." + w, (d, d)) for w in ("wq", "wk", "wv", "wg", "wo")]
        out += [(p + "attn.bg", (d,)), (p + "attn.head_norm", (dk,))]
        if l > 0:
            out += [(p + "xres", (l,))]
        out += [(p + "moe_norm", (d,)), (p + "moe.down", (r, d)), (p + "moe.up", (d, r)),
                (p + "moe.router", (E, r)), (p + "moe.bias", (E,)),
                (p + "moe.w1", (E, f, r)), (p + "moe.w3", (E, f, r)), (p + "moe.w2", (E, r, f))]
        if S > 0:
            out += [(p + "moe.shared.w1", (S, f, r)), (p + "moe.shared.w3", (S, f, r)),
                    (p + "moe.shared.w2", (S, r, f))]
    out += [("final_norm", (d,)), ("out", (c["vocab"], d))]
    return out


def read_safetensors(path):
    """(header dict, data offset, raw bytes) of a model.safetensors."""
    with open(path, "rb") as fh:
        raw = fh.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), 8 + n, raw


def load_params(path):
    header, base, raw = read_safetensors(path)
    c = json.loads(header["__metadata__"]["config"])
    params = {}
    for name, shape in names_of(c):
        e = header[name]
        if e["dtype"] != "F32" or tuple(e["shape"]) != shape:
            sys.exit("peer_torch: %s: tensor %s is not F32 %s" % (path, name, shape))
        b0, b1 = e["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + b0:base + b1]), dtype=torch.float32)
        params[name] = t.reshape(shape).clone()
    return c, params


def init_params(c):
    g = torch.Generator().manual_seed(0)
    params = {}
    for name, shape in names_of(c):
        leaf = name.rsplit(".", 1)[-1]
        if "norm" in leaf:
            t = torch.ones(shape)
        elif len(shape) == 1:
            t = torch.zeros(shape)
        else:
            std = 1.0 if name == "embed" else (1.0 / c["d_model"] if name == "out" else shape[-1] ** -0.5)
            t = torch.randn(shape, generator=g) * std
        params[name] = t
    return params


def write_grads(path_in, params, out_dir):
    """The gradients in the layout (header, offsets) of the params file."""
    header, base, raw = read_safetensors(path_in)
    buf = bytearray(raw[:base]) + bytearray(len(raw) - base)
    for name, e in header.items():
        if name == "__metadata__":
            continue
        p = params.get(name)
        if p is None or p.grad is None:
            continue
        b0, b1 = e["data_offsets"]
        buf[base + b0:base + b1] = p.grad.detach().contiguous().numpy().tobytes()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as fh:
        fh.write(buf)


# ---- the model --------------------------------------------------------------
def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def chunked_attention(q, k, v, g, chunk):
    """q, k, v, g: (B, T, H, dk); T a multiple of chunk. Recurrence
    S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t, o_t = q_t S_t, chunk by chunk:
    everything but the state's scan runs batched over all chunks."""
    B, T, H, dk = q.shape
    n = T // chunk
    shp = (B, n, chunk, H, dk)
    q, k, v, g = (x.reshape(shp).permute(0, 3, 1, 2, 4) for x in (q, k, v, g))  # B,H,n,C,dk
    G = g.cumsum(dim=3)
    eG = G.exp()
    qt = q * eG
    kt = k / eG
    mask = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool))
    att = (qt @ kt.transpose(-1, -2)).masked_fill(~mask, 0.0)
    intra = att @ v                                            # B,H,n,C,dk
    eGl = eG[:, :, :, -1:, :]                                  # B,H,n,1,dk
    upd = (kt * eGl).transpose(-1, -2) @ v                     # B,H,n,dk,dk
    decay = eGl.transpose(-1, -2)                              # B,H,n,dk,1
    S = q.new_zeros(B, H, dk, dk)
    states = []
    for dc, uc in zip(decay.unbind(2), upd.unbind(2)):
        states.append(S)
        S = dc * S + uc
    inter = qt @ torch.stack(states, dim=2)                    # B,H,n,C,dk
    o = intra + inter
    return o.permute(0, 2, 3, 1, 4).reshape(B, T, H * dk)


def swiglu(z, w1, w3, w2):
    return (F.silu(z @ w1.t()) * (z @ w3.t())) @ w2.t()


def moe(c, P, p, u):
    z = u @ P[p + "moe.down"].t()                              # N, r
    s = torch.sigmoid(z @ P[p + "moe.router"].t())             # N, E
    _, idx = torch.topk(s.detach() + P[p + "moe.bias"], c["topk"], dim=-1)
    sel = s.gather(1, idx)
    gates = sel / sel.sum(-1, keepdim=True)
    # routed experts: (token, slot) pairs sorted by expert, gathered once,
    # one GEMM chain per expert on its rows, scattered back once
    flat = idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=c["experts"]).tolist()
    tok = order // c["topk"]
    zs = z.index_select(0, tok)
    gs = gates.reshape(-1).index_select(0, order)
    w1, w3, w2 = (P[p + "moe." + w].unbind(0) for w in ("w1", "w3", "w2"))
    ys = torch.cat([swiglu(ze, w1[e], w3[e], w2[e])
                    for e, ze in enumerate(zs.split(counts)) if counts[e]])
    y = torch.zeros_like(z).index_add(0, tok, ys * gs[:, None])
    if c["shared_experts"] > 0:
        sw = [P[p + "moe.shared." + w].unbind(0) for w in ("w1", "w3", "w2")]
        for e in range(c["shared_experts"]):
            y = y + swiglu(z, sw[0][e], sw[1][e], sw[2][e])
    return y @ P[p + "moe.up"].t()


def forward(c, P, tokens, targets):
    B, T = tokens.shape
    d, H = c["d_model"], c["heads"]
    dk = d // H
    h = F.embedding(tokens, P["embed"])                        # B,T,d
    rs = []
    for l in range(c["layers"]):
        p = "layers.%d." % l
        u = rmsnorm(h, P[p + "attn_norm"])
        q = (u @ P[p + "attn.wq"].t()) * dk ** -0.5
        k = u @ P[p + "attn.wk"].t()
        v = u @ P[p + "attn.wv"].t()
        g = c["g_min"] * torch.sigmoid(torch.addmm(P[p + "attn.bg"], u.reshape(B * T, d),
                                                   P[p + "attn.wg"].t()).reshape(B, T, d) / c["tau"])
        o = chunked_attention(*(x.reshape(B, T, H, dk) for x in (q, k, v, g)), c["chunk"])
        o = rmsnorm(o.reshape(B, T, H, dk), P[p + "attn.head_norm"]).reshape(B, T, d)
        r = o @ P[p + "attn.wo"].t()
        a = r
        if l > 0:
            xres = P[p + "xres"].unbind(0)
            for j in range(l):
                a = a + xres[j] * rs[j]
        rs.append(r)
        h = h + a
        h = h + moe(c, P, p, rmsnorm(h, P[p + "moe_norm"]).reshape(B * T, d)).reshape(B, T, d)
    logits = rmsnorm(h, P["final_norm"]) @ P["out"].t()
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), ignore_index=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--params", help="longhaul's model.safetensors")
    ap.add_argument("--tokens", help="seqs x seq-len int32 tokens")
    ap.add_argument("--check", metavar="DIR", help="write the gradients of one step to DIR")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    env = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")
    print("peer_torch threads: torch %d, OpenMP %s, %s; env %s" % (
        torch.get_num_threads(), omp_max_threads(), blas_threads(),
        " ".join("%s=%s" % (k, os.environ.get(k, "unset")) for k in env)), flush=True)
    torch.manual_seed(0)
    if a.params:
        c, P = load_params(a.params)
    else:
        c = dict(DEMO)
        P = init_params(c)
    if a.seq_len % c["chunk"]:
        sys.exit("peer_torch: --seq-len %d is not a multiple of chunk %d" % (a.seq_len, c["chunk"]))
    if c.get("balance") == "aux":
        sys.exit("peer_torch: balance = aux is not modelled (its loss term is longhaul's only)")
    if a.tokens:
        raw = open(a.tokens, "rb").read()
        if len(raw) != 4 * a.seqs * a.seq_len:
            sys.exit("peer_torch: %s holds %d bytes, not %d x %d int32" % (a.tokens, len(raw), a.seqs, a.seq_len))
        tokens = torch.frombuffer(bytearray(raw), dtype=torch.int32).long().reshape(a.seqs, a.seq_len)
    else:
        tokens = torch.randint(0, 256, (a.seqs, a.seq_len))
    targets = torch.cat([tokens[:, 1:], torch.full((a.seqs, 1), -1)], dim=1)
    train = {n: t.requires_grad_() for n, t in P.items()
             if not n.startswith("patch.") and not n.endswith("moe.bias")}
    if a.check:
        loss = forward(c, P, tokens, targets)
        loss.backward()
        print("peer_torch loss %.9g" % loss.item(), flush=True)
        write_grads(a.params, P, a.check)
        return
    decay = [t for n, t in train.items() if t.dim() > 1]
    no_decay = [t for n, t in train.items() if t.dim() == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    best = best_cpu = float("inf")
    for i in range(a.steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = forward(c, P, tokens, targets)
        loss.backward()
        opt.step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if i > 0:
            best, best_cpu = min(best, dt), min(best_cpu, dc)
        else:
            print("peer_torch loss %.6f" % loss.item(), flush=True)
    print("peer_torch step_s %.6f cpu_s %.6f" % (best, best_cpu), flush=True)


if __name__ == "__main__":
    main()
