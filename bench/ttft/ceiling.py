"""The pinned host -> GPU copy ceiling of this machine, measured in the same
run as the grid (the report's effective read rates and the T4 bound are
ratios to it). Prints one JSON line.

1.75 GiB (a 32K-token prefix of Qwen2.5-7B's KV) from a pinned host buffer
to GPU 0, 3 warm-up copies then the median of 10 timed with CUDA events;
random bytes (never zeros). Also the same from a registered MAP_SHARED
/dev/shm file, the way the region is read.
"""

import json
import mmap
import os
import statistics

import torch


def timed(src, dst, reps=10):
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src, non_blocking=True)
        e.record()
        e.synchronize()
        out.append(src.numel() * src.element_size() / (s.elapsed_time(e) / 1e3) / 1e9)
    return statistics.median(out)


def main():
    n = 1792 << 20
    res = {"bytes": n, "device": torch.cuda.get_device_name(0)}
    g = torch.empty(n, dtype=torch.uint8, device="cuda:0")
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    h.random_(0, 255)
    res["pinned_h2d_gbps"] = round(timed(h, g), 2)
    del h
    path = f"/dev/shm/cxlkv-ttft-ceiling-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, n)
        mm = mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        t = torch.frombuffer(mm, dtype=torch.uint8)
        t.random_(0, 255)
        rc = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), n, 0)
        rc = int(rc[0] if isinstance(rc, tuple) else rc)
        res["shm_register_rc"] = rc
        if rc == 0:
            res["registered_shm_h2d_gbps"] = round(timed(t, g), 2)
            torch.cuda.cudart().cudaHostUnregister(t.data_ptr())
        del t
        mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
