"""The hidden dropout alone on a CPU (eager, 2 threads): torch's F.dropout against attngeom's hashed draw,
forward + backward, mean of 20 calls after 3."""

import platform
import time

import torch
import torch.nn.functional as F

from attngeom.training.dropout import hashed_dropout

torch.set_num_threads(2)
print(platform.processor() or platform.machine(), torch.__version__)
for shape in [(8, 128, 256), (32, 512, 256)]:
    x = torch.randn(*shape, requires_grad=True)
    for name, f in [
        ("torch", lambda x=x: F.dropout(x, 0.1, True)),
        ("hash", lambda x=x: hashed_dropout(x, 0.1)),
    ]:
        for _ in range(3):
            f().sum().backward()
        start, n = time.perf_counter(), 20
        for _ in range(n):
            f().sum().backward()
        print(shape, name, f"{(time.perf_counter() - start) / n * 1e3:.3f} ms")
