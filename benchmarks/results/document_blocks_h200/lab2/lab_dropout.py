"""Lab 2: what BERT's hidden dropout costs inside inductor's fused residual + LayerNorm kernel.

y = LayerNorm(dropout(x) + residual), x bf16 (a product's output), residual fp32 (autocast's LayerNorm output),
forward + backward, compiled, at one update pass's shape (50 rows of 512, hidden 768), each kernel's device time
under torch.profiler (20 iterations). Variants:
  native  F.dropout (inductor: Philox per element, tl.rand)
  none    no dropout (p = 0): the floor
  hash    a keyed lowbias32 hash of each element's place, written in torch int32 ops (fused by inductor),
          its key from torch.rand(2) (realized: one small buffer)
  hashri  the same, its key from torch.randint (may be recomputed per element)
"""

import json
import sys

import torch
import torch.nn.functional as F

M1, M2 = 0x7FEB352D, 0x846CA68B - (1 << 32)


def mix(h):
    h = h ^ ((h >> 16) & 0xFFFF)
    h = h * M1
    h = h ^ ((h >> 15) & 0x1FFFF)
    return h * M2


def hash_drop(x, p, key):
    idx = torch.arange(x.numel(), device=x.device, dtype=torch.int32).view(x.shape)
    threshold = round(p * 65536)
    draw = (mix(idx ^ key) >> 16) & 0xFFFF
    return torch.where(draw >= threshold, x * (1 / (1 - threshold / 65536)), 0.0)


def key_rand(device):
    r = (torch.rand(2, device=device) * 65536).to(torch.int32)
    return mix((r[0] << 16) | r[1])


def key_randint(device):
    return torch.randint(-(2**31), 2**31 - 1, (), device=device, dtype=torch.int32)


def make(variant, p=0.1):
    def f(x, res, w, b):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if variant == "native":
                d = F.dropout(x, p, training=True)
            elif variant == "none":
                d = x
            elif variant == "hash":
                d = hash_drop(x, p, key_rand(x.device))
            else:
                d = hash_drop(x, p, key_randint(x.device))
            return F.layer_norm(d + res, (x.shape[-1],), w, b)

    return torch.compile(f, fullgraph=True)


def main():
    dev = "cuda"
    rows, length, hidden = 50, 512, int(sys.argv[1]) if len(sys.argv) > 1 else 768
    torch.manual_seed(0)
    x = torch.randn(rows, length, hidden, device=dev, dtype=torch.bfloat16, requires_grad=True)
    res = torch.randn(rows, length, hidden, device=dev, requires_grad=True)
    w = torch.ones(hidden, device=dev, requires_grad=True)
    b = torch.zeros(hidden, device=dev, requires_grad=True)
    g = torch.randn(rows, length, hidden, device=dev)
    out = {}
    from torch.profiler import ProfilerActivity, profile

    for variant in ("native", "none", "hash", "hashri"):
        f = make(variant)
        for _ in range(5):
            f(x, res, w, b).backward(g)
        torch.cuda.synchronize()
        n = 20
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                f(x, res, w, b).backward(g)
            torch.cuda.synchronize()
        kernels = {}
        for e in prof.key_averages():
            if e.device_type.name == "CUDA" and e.self_device_time_total > 0:
                kernels[e.key[:90]] = e.self_device_time_total / n / 1000
        total = sum(kernels.values())
        with torch.no_grad():
            y = f(x.detach(), res.detach(), w, b)
            ref = F.layer_norm(x.float() + res, (hidden,), w, b)
        changed = float(((y - ref).abs() > 1e-2).float().mean())
        out[variant] = dict(device_ms=total, kernels=kernels, changed_share=changed)
        print(
            f"{variant:7s} device {total:.4f} ms an iteration (forward + backward)   changed {changed:.4f}",
            flush=True,
        )
        for k, v in sorted(kernels.items(), key=lambda kv: -kv[1]):
            print(f"    {v:.4f}  {k}")
    # statistics of the hash draws: keep rate, neighbour correlation
    key = key_rand(dev)
    xs = torch.ones(rows, length, hidden, device=dev)
    kept = (hash_drop(xs, 0.1, key) != 0).float()
    flat = kept.flatten()
    c = lambda a, b: float(torch.corrcoef(torch.stack([a, b]))[0, 1])  # noqa: E731
    stats = dict(
        keep_rate=float(flat.mean()),
        corr_next=c(flat[:-1], flat[1:]),
        corr_row=c(kept[:, :-1].flatten(), kept[:, 1:].flatten()),
        corr_keys=c(flat, (hash_drop(xs, 0.1, key_rand(dev)) != 0).float().flatten()),
    )
    print(stats)
    out["stats"] = stats
    out["device"] = torch.cuda.get_device_name()
    out["torch"] = torch.__version__
    json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "lab_dropout.json", "w"), indent=1)


if __name__ == "__main__":
    main()
