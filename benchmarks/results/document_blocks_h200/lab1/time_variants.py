"""Lab 1 (issue 40): time the kernel variants of variants.py per kernel, beside the package's kernels and SDPA, on document_attention's rows."""

import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(__file__))
import document_attention as da
from variants import Lab

from attngeom.training.document_blocks import document_flash, tuned
from attngeom.training.document_mask import document_attention_mask, document_bounds

FWD = [
    (64, 64, 4, 2),
    (128, 64, 4, 2),
    (128, 64, 8, 2),
    (128, 32, 4, 2),
    (64, 32, 4, 2),
    (128, 128, 8, 2),
    (64, 128, 4, 2),
    (128, 64, 4, 3),
]
KEYS = [
    (64, 64, 4, 2),
    (32, 64, 4, 2),
    (64, 128, 8, 2),
    (32, 128, 4, 2),
    (64, 128, 4, 2),
    (128, 64, 8, 2),
    (128, 128, 8, 2),
    (16, 64, 4, 2),
]
QUERIES = FWD


def visited(lo, hi, bm, bn, causal=False):
    L = lo.shape[1]
    n = 0
    for b in range(0, L, bm):
        first = lo[:, b : b + bm].min(1).values
        last = hi[:, b : b + bm].max(1).values
        n += int(((last + bn - 1) // bn - first // bn).clamp_min(0).sum()) * bm * bn
    return n


def run(layout_name, documents, heads, out):
    lo, hi = document_bounds(documents)
    rows, L = documents.shape
    D = 64
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, grad = (
        torch.randn(rows, L, heads, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)
    )
    kept = (documents[:, :, None] == documents[:, None, :]).sum().item()
    seed = torch.tensor([7], device="cuda")
    res = {
        "layout": layout_name,
        "rows": rows,
        "heads": heads,
        "pairs_total": rows * heads * L * L,
        "pairs_kept": kept * heads,
        "times": {},
    }
    T = res["times"]
    # SDPA baselines, fwd+bwd
    mask = document_attention_mask(documents, causal=False)
    qh, kh, vh = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v))
    gh = grad.transpose(1, 2)

    def sd(p, m, backend=None):
        def f():
            o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=m, dropout_p=p)
            torch.autograd.grad(o, (qh, kh, vh), gh)

        return f

    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name, p, m, be in [
        ("sdpa-dense-mask-drop", 0.1, mask, None),
        ("sdpa-dense-mask", 0.0, mask, None),
        ("sdpa-flash-nomask-drop", 0.1, None, SDPBackend.FLASH_ATTENTION),
        ("sdpa-flash-nomask", 0.0, None, SDPBackend.FLASH_ATTENTION),
        ("sdpa-cudnn-nomask", 0.0, None, SDPBackend.CUDNN_ATTENTION),
    ]:
        try:
            if be is None:
                T[name] = do_bench(sd(p, m))
            else:
                with sdpa_kernel([be]):
                    T[name] = do_bench(sd(p, m))
        except Exception as e:
            T[name] = str(e)[:100]
    # the package
    qp, kp, vp = (t.detach().requires_grad_() for t in (q, k, v))
    for p in (0.1, 0.0):

        def pf():
            with torch.no_grad():
                document_flash(qp, kp, vp, lo, hi, p)

        def pb():
            torch.autograd.grad(document_flash(qp, kp, vp, lo, hi, p), (qp, kp, vp), grad)

        pb()
        pf()
        T[f"package-fwd-p{p}"] = do_bench(pf)
        T[f"package-fwdbwd-p{p}"] = do_bench(pb)
        T[f"package-tuned-p{p}"] = tuned()
    # lab
    ref_lab = Lab()
    o_ref = document_flash(q, k, v, lo, hi, 0.0)
    o_lab, lse = ref_lab.forward(q, k, v, lo, hi, 0.0, False, seed)
    res["lab_vs_package_out_maxabs"] = float((o_ref.float() - o_lab.float()).abs().max())
    out_l, lse_d = ref_lab.forward(q, k, v, lo, hi, 0.1, False, seed)
    delta = ref_lab.delta(out_l, grad)
    T["lab-delta"] = do_bench(lambda: ref_lab.delta(out_l, grad))
    for rng, p in [(1, 0.1), (0, 0.1), (1, 0.0)]:
        tag = f"rng{rng}-p{p}"
        for c in FWD:
            lab = Lab(fwd=c, rng=rng)
            try:
                lab.forward(q, k, v, lo, hi, p, False, seed)
                T[f"fwd-{tag}-{c}"] = do_bench(lambda: lab.forward(q, k, v, lo, hi, p, False, seed))
            except Exception as e:
                T[f"fwd-{tag}-{c}"] = str(e)[:100]
        for c in KEYS:
            lab = Lab(keys=c, rng=rng)
            try:
                lab.backward_keys(q, k, v, grad, lse_d, delta, lo, hi, p, False, seed)
                T[f"keys-{tag}-{c}"] = do_bench(
                    lambda: lab.backward_keys(q, k, v, grad, lse_d, delta, lo, hi, p, False, seed)
                )
            except Exception as e:
                T[f"keys-{tag}-{c}"] = str(e)[:100]
        for c in QUERIES:
            lab = Lab(queries=c, rng=rng)
            try:
                lab.backward_queries(q, k, v, grad, lse_d, delta, lo, hi, p, False, seed)
                T[f"queries-{tag}-{c}"] = do_bench(
                    lambda: lab.backward_queries(q, k, v, grad, lse_d, delta, lo, hi, p, False, seed)
                )
            except Exception as e:
                T[f"queries-{tag}-{c}"] = str(e)[:100]
    res["visited"] = {
        str((bm, bn)): visited(lo.cpu(), hi.cpu(), bm, bn) for bm, bn in {(c[0], c[1]) for c in FWD + KEYS}
    }
    out.append(res)
    best = {}
    for kname in ("fwd", "keys", "queries"):
        for tag in ("rng1-p0.1", "rng0-p0.1", "rng1-p0.0"):
            cand = {
                kk: vv for kk, vv in T.items() if kk.startswith(f"{kname}-{tag}-") and isinstance(vv, float)
            }
            if cand:
                b = min(cand, key=cand.get)
                best[f"{kname}-{tag}"] = (b.split("-")[-1], round(cand[b], 4))
    res["best"] = best
    print(
        layout_name,
        heads,
        json.dumps(
            {
                kk: (round(vv, 4) if isinstance(vv, float) else vv)
                for kk, vv in T.items()
                if not kk.startswith(("fwd", "keys", "queries"))
            }
        ),
        flush=True,
    )
    print("  best", json.dumps(best), "lab-vs-package", res["lab_vs_package_out_maxabs"], flush=True)


def ffd(seed=0):
    sizes = da.document_sizes(seed)
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    bins = []
    da.first_fit(sizes, order, da.ROW, bins)
    return da.document_rows(sizes, bins, da.ROW)[0]


if __name__ == "__main__":
    out = []
    path = sys.argv[1]
    t0 = time.time()
    for heads in (12, 4):
        run("drawn", da.packed_documents(0)[0].cuda(), heads, out)
        json.dump(out, open(path, "w"), indent=1)
        print("elapsed", round(time.time() - t0), flush=True)
    run("ffd", ffd(0).cuda(), 12, out)
    json.dump(out, open(path, "w"), indent=1)
    print("elapsed", round(time.time() - t0), flush=True)
