#!/usr/bin/env python3
"""Writes a root filesystem tree as a one-layer OCI image archive, for
`ctr images import` (no registry, no image builder).

  oci-image.py --tree DIR --name REF --out FILE.tar [--entrypoint JSON]
               [--user U:G] [--env K=V ...] [--summary TREE.json]

--summary reads entrypoint, user and env from the JSON that
deployments/images/rootfs-build.py writes beside its tree (IMAGE.json);
explicit flags override it. REF is a full reference
(docker.io/cxlkv/cxlkv-dra:0.1.0): the index names it in the
io.containerd.image.name annotation, which ctr import reads, and its tag in
org.opencontainers.image.ref.name (the OCI layout's own name).
The layer is an uncompressed tar of the tree with numeric owners (uid 0
files stay root's in the container); /proc, /sys and /dev are left empty
(the runtime mounts them).
"""
import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--entrypoint", default=None, help="JSON list")
    ap.add_argument("--user", default=None)
    ap.add_argument("--env", action="append", default=None)
    ap.add_argument("--summary", default=None)
    a = ap.parse_args()
    if not os.path.isdir(a.tree):
        sys.exit("oci-image: --tree %s is not a directory" % a.tree)
    if ":" not in a.name.rsplit("/", 1)[-1] or "/" not in a.name:
        sys.exit("oci-image: --name wants a full reference with a tag, e.g. docker.io/cxlkv/cxlkv-dra:0.1.0")
    summary = json.load(open(a.summary)) if a.summary else {}
    entrypoint = json.loads(a.entrypoint) if a.entrypoint else summary.get("entrypoint")
    user = a.user or summary.get("user") or "0:0"
    env = a.env if a.env is not None else ["%s=%s" % kv for kv in summary.get("env", {}).items()]
    if not any(e.startswith("PATH=") for e in env):
        env.append("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")

    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(a.out))) as tmp:
        layer = os.path.join(tmp, "layer.tar")
        excludes = []
        for d in ("proc", "sys", "dev"):
            if os.path.isdir(os.path.join(a.tree, d)):
                excludes += ["--exclude=./%s/*" % d]
        subprocess.run(["tar", "-C", a.tree, "--numeric-owner", "--sort=name", "--mtime=@0",
                        "--xattrs", *excludes, "-cf", layer, "."], check=True)
        layer_digest, layer_size = sha256_file(layer), os.path.getsize(layer)
        config = {
            "architecture": "amd64", "os": "linux",
            "config": {"Entrypoint": entrypoint, "User": user, "Env": env, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_digest]},
            "history": [{"created_by": "test/e2e/realnodes/oci-image.py --tree " + os.path.basename(a.tree)}],
        }
        config_b = json.dumps(config, sort_keys=True).encode()
        manifest = {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": "sha256:" + hashlib.sha256(config_b).hexdigest(), "size": len(config_b)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": "sha256:" + layer_digest, "size": layer_size}],
        }
        manifest_b = json.dumps(manifest, sort_keys=True).encode()
        index = {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": manifest["mediaType"],
                "digest": "sha256:" + hashlib.sha256(manifest_b).hexdigest(), "size": len(manifest_b),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": a.name,
                                "org.opencontainers.image.ref.name": a.name.rsplit(":", 1)[1]},
            }],
        }
        part = a.out + ".part"
        with tarfile.open(part, "w", format=tarfile.PAX_FORMAT) as t:
            def add_bytes(name, data):
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                t.addfile(info, io.BytesIO(data))
            add_bytes("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
            add_bytes("index.json", json.dumps(index, sort_keys=True).encode())
            add_bytes("blobs/sha256/" + manifest["config"]["digest"][7:], config_b)
            add_bytes("blobs/sha256/" + index["manifests"][0]["digest"][7:], manifest_b)
            t.add(layer, arcname="blobs/sha256/" + layer_digest)
        os.rename(part, a.out)
    print("oci-image: %s -> %s (layer %.1f MiB)" % (a.name, a.out, layer_size / 1048576.0))


if __name__ == "__main__":
    main()
