#!/usr/bin/python3
"""The peer of bench_model: one training step (forward, backward, AdamW) of
the same model (ARCHITECTURE.md §4, demo shapes) in PyTorch on CPU, same threads.

Same math as longhaul: byte embedding, pre-norm blocks with chunked linear
attention (chunk 16, lower-bounded log-decay g_min*sigmoid(raw/tau), state
reset per sequence), per-head RMSNorm, cross-layer residual scalars, MoE
with latent down/up projections, sigmoid router, top-k over s + b, gates
s/sum s, grouped experts (SwiGLU), one shared expert, untied output, mean
cross-entropy, AdamW. Prints "peer_torch step_s SECONDS" (best of --steps
after one warm-up step). Run with /usr/bin/python3 (Debian python3-torch).
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

EPS = 1e-6


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def chunked_attention(q, k, v, g, chunk):
    """q, k, v, g: (B, T, H, dk); T a multiple of chunk. Recurrence
    S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t, o_t = q_t S_t, chunk by chunk."""
    B, T, H, dk = q.shape
    n = T // chunk
    shp = (B, n, chunk, H, dk)
    q, k, v, g = (x.reshape(shp).permute(0, 3, 1, 2, 4) for x in (q, k, v, g))  # B,H,n,C,dk
    G = g.cumsum(dim=3)
    qt = q * G.exp()
    kt = k * (-G).exp()
    mask = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool))
    att = (qt @ kt.transpose(-1, -2)).masked_fill(~mask, 0.0)
    intra = att @ v                                            # B,H,n,C,dk
    Glast = G[:, :, :, -1:, :]                                 # B,H,n,1,dk
    kend = k * (Glast - G).exp()
    upd = kend.transpose(-1, -2) @ v                           # B,H,n,dk,dk
    S = torch.zeros(B, H, dk, dk)
    outs = []
    for c in range(n):
        outs.append(intra[:, :, c] + qt[:, :, c] @ S)
        S = Glast[:, :, c].transpose(-1, -2).exp() * S + upd[:, :, c]
    o = torch.stack(outs, dim=2)                               # B,H,n,C,dk
    return o.permute(0, 2, 3, 1, 4).reshape(B, T, H * dk)


def swiglu_expert(z, w1, w3, w2):
    return (F.silu(z @ w1.t()) * (z @ w3.t())) @ w2.t()


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, r, f, E, S = c["d"], c["r"], c["f"], c["E"], c["S"]
        self.c = c
        P = torch.nn.Parameter
        dk = d // c["H"]
        self.embed = P(torch.randn(c["V"], d))
        self.layers = torch.nn.ModuleList()
        for l in range(c["L"]):
            m = torch.nn.Module()
            m.attn_norm = P(torch.ones(d))
            for name in ("wq", "wk", "wv", "wg", "wo"):
                setattr(m, name, P(torch.randn(d, d) / math.sqrt(d)))
            m.bg = P(torch.zeros(d))
            m.head_norm = P(torch.ones(dk))
            m.xres = P(torch.zeros(l)) if l > 0 else None
            m.moe_norm = P(torch.ones(d))
            m.down = P(torch.randn(r, d) / math.sqrt(d))
            m.up = P(torch.randn(d, r) / math.sqrt(r))
            m.router = P(torch.randn(E, r) / math.sqrt(r))
            m.register_buffer("bias", torch.zeros(E))
            m.w1 = P(torch.randn(E, f, r) / math.sqrt(r))
            m.w3 = P(torch.randn(E, f, r) / math.sqrt(r))
            m.w2 = P(torch.randn(E, r, f) / math.sqrt(f))
            m.sw1 = P(torch.randn(S, f, r) / math.sqrt(r))
            m.sw3 = P(torch.randn(S, f, r) / math.sqrt(r))
            m.sw2 = P(torch.randn(S, r, f) / math.sqrt(f))
            self.layers.append(m)
        self.final_norm = P(torch.ones(d))
        self.out = P(torch.randn(c["V"], d) / d)

    def moe(self, m, u):
        c = self.c
        z = u @ m.down.t()                                     # N, r
        s = torch.sigmoid(z @ m.router.t())                    # N, E
        _, idx = torch.topk(s.detach() + m.bias, c["k"], dim=-1)
        sel = s.gather(1, idx)
        gates = sel / sel.sum(-1, keepdim=True)
        y = torch.zeros_like(z)
        flat = idx.reshape(-1)
        tok = torch.arange(z.shape[0]).repeat_interleave(c["k"])
        gflat = gates.reshape(-1)
        for e in range(c["E"]):
            pos = (flat == e).nonzero(as_tuple=True)[0]
            if pos.numel() == 0:
                continue
            t = tok[pos]
            y = y.index_add(0, t, gflat[pos, None] * swiglu_expert(z[t], m.w1[e], m.w3[e], m.w2[e]))
        for e in range(c["S"]):
            y = y + swiglu_expert(z, m.sw1[e], m.sw3[e], m.sw2[e])
        return y @ m.up.t()

    def forward(self, tokens, targets):
        c = self.c
        B, T = tokens.shape
        d, H = c["d"], c["H"]
        dk = d // H
        h = self.embed[tokens]                                 # B,T,d
        rs = []
        for l, m in enumerate(self.layers):
            u = rmsnorm(h, m.attn_norm)
            q = (u @ m.wq.t()) * dk ** -0.5
            k = u @ m.wk.t()
            v = u @ m.wv.t()
            g = c["g_min"] * torch.sigmoid((u @ m.wg.t() + m.bg) / c["tau"])
            o = chunked_attention(*(x.reshape(B, T, H, dk) for x in (q, k, v, g)), c["C"])
            o = rmsnorm(o.reshape(B, T, H, dk), m.head_norm).reshape(B, T, d)
            r = o @ m.wo.t()
            a = r
            for j in range(l):
                a = a + m.xres[j] * rs[j]
            rs.append(r)
            h = h + a
            h = h + self.moe(m, rmsnorm(h, m.moe_norm).reshape(B * T, d)).reshape(B, T, d)
        logits = rmsnorm(h, self.final_norm) @ self.out.t()
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), ignore_index=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=1024)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = dict(d=128, L=4, H=4, E=16, k=2, S=1, r=64, f=128, C=16, g_min=-5.0, tau=1.0, V=264)
    model = Model(c)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        leaf = name.split(".")[-1]
        (no_decay if ("norm" in leaf or leaf in ("bg", "xres")) else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    tokens = torch.randint(0, 256, (a.seqs, a.seq_len))
    targets = torch.cat([tokens[:, 1:], torch.full((a.seqs, 1), -1)], dim=1)
    best = float("inf")
    for i in range(a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = model(tokens, targets)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i > 0:
            best = min(best, dt)
        else:
            print(f"peer_torch loss {loss.item():.4f}", flush=True)
    print(f"peer_torch step_s {best:.6f}", flush=True)


if __name__ == "__main__":
    main()
