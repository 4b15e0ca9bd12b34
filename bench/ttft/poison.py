"""The poisoned-KV control of the correctness oracle (bench only, not part of
the product): CxlkvOffloadingSpec whose worker, while the file named by
$CXLKV_TTFT_POISON_FILE exists, zeroes the destination KV blocks of every
finished load before vLLM is told the load is done, so the model attends to
zeroed pages instead of the loaded ones. The outputs must then change; if
they do not, the oracle cannot tell loaded KV from no KV and fails.

It wraps whatever worker the product spec returns (the CPU worker, or the
CUDA one), through vLLM's OffloadingWorker interface only (submit_load,
get_finished, wait), and zeroes with torch on the tensors' own device, in
the thread vLLM calls get_finished from (the model runner's), so the zeroing
is ordered before the forward that reads those blocks.

Every zeroed block is counted in $CXLKV_TTFT_POISON_FILE.count-<pid> (JSON),
so the harness can check that the control really ran.

Select with spec_name="PoisonableSpec", spec_module_path="poison" (this
directory on PYTHONPATH, as replica.py sets it).
"""

import json
import os

from cxlkv.vllm import CxlkvOffloadingSpec


class PoisonableSpec(CxlkvOffloadingSpec):
    def get_worker(self, kv_caches):
        w = super().get_worker(kv_caches)
        flag = os.environ.get("CXLKV_TTFT_POISON_FILE", "")
        tensors = [t.tensor for t in kv_caches.tensors]
        pending = {}  # load job id -> GPU block ids
        state = {"zeroed_blocks": 0, "poisoned_jobs": 0}
        submit_load, get_finished, wait = w.submit_load, w.get_finished, w.wait

        def _poison(job_id):
            ids = pending.pop(job_id, None)
            if ids is None or not flag or not os.path.exists(flag):
                return
            import torch

            for t in tensors:
                idx = torch.as_tensor(ids, dtype=torch.long, device=t.device)
                t[idx] = 0
            state["zeroed_blocks"] += len(ids)
            state["poisoned_jobs"] += 1
            tmp = f"{flag}.count-{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(state, f)
            os.replace(tmp, f"{flag}.count-{os.getpid()}")

        def poison_submit_load(job_id, src_spec, dst_spec, *args, **kwargs):
            pending[job_id] = [int(b) for b in dst_spec.block_ids]
            return submit_load(job_id, src_spec, dst_spec, *args, **kwargs)

        def poison_get_finished():
            done = get_finished()
            for r in done:
                _poison(r.job_id)
            return done

        def poison_wait(job_ids):
            wait(job_ids)
            for j in list(job_ids):
                _poison(j)

        w.submit_load, w.get_finished, w.wait = poison_submit_load, poison_get_finished, poison_wait
        return w
