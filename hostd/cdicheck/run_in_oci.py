#!/usr/bin/env python3
"""Run a command the way a container runtime would apply an OCI spec's CDI
edits: in a private mount namespace, with the spec's bind mounts applied and
its process environment added. Test tooling for cxlkv-hostd (needs root).

Usage: run_in_oci.py OCI.json -- CMD [ARGS...]
"""
import json
import os
import subprocess
import sys


def main():
    if "--" not in sys.argv:
        sys.exit(__doc__)
    sep = sys.argv.index("--")
    spec_path, cmd = sys.argv[1], sys.argv[sep + 1:]
    if os.environ.get("_CXLKV_IN_NS") != "1":
        # Re-run ourselves inside a new mount namespace.
        env = dict(os.environ, _CXLKV_IN_NS="1")
        args = ["unshare", "--mount", "--propagation", "private", sys.executable] + sys.argv
        os.execvpe("unshare", args, env)
    with open(spec_path) as f:
        spec = json.load(f)
    for m in spec.get("mounts", []):
        opts = m.get("options", [])
        if "bind" not in opts and "rbind" not in opts:
            sys.exit(f"run_in_oci: mount {m['destination']}: only bind mounts are supported")
        src, dst = m["source"], m["destination"]
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst):
            if os.path.isdir(src):
                os.makedirs(dst)
            else:
                open(dst, "a").close()  # a mount point for a file
        subprocess.run(["mount", "--bind", src, dst], check=True)
    env = {k: v for k, v in os.environ.items() if k != "_CXLKV_IN_NS"}
    for kv in spec.get("process", {}).get("env", []):
        k, _, v = kv.partition("=")
        env[k] = v
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
