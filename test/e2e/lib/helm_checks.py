#!/usr/bin/env python3
"""Checks of the Helm chart's rendered objects, for test/e2e/helm-render.bats and helm.bats.

    helm_checks.py rendered FILE            the default render: kinds, rollout, probes, ...
    helm_checks.py env FILE BIN_DIR         every env var a container sets, its binary reads
    helm_checks.py per-coherence < YAML     deviceClass.perCoherence's three classes
    helm_checks.py drop-kind KIND < YAML    the documents without those of KIND, as YAML
    helm_checks.py claim NS KIND MEM [COUNT [CLASS [CAPACITY_MIB]]]
                                            a ResourceClaim (KIND claim or alt) or a
                                            ResourceClaimTemplate (template) as JSON
    helm_checks.py role-without-driver FILE the ClusterRole without its resourceclaims/driver rule

Each check prints what it found wrong and exits 1; a generator prints its object.
"""
import json
import subprocess
import sys

import yaml


def docs_of(stream):
    return [d for d in yaml.safe_load_all(stream) if d]


def fail(msg):
    sys.exit("rendered chart: " + msg)


def rendered(path):
    docs = docs_of(open(path))
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}

    def need(cond, what):
        if not cond:
            fail(what)

    kinds = sorted({d["kind"] for d in docs})
    # Role + RoleBinding: the controller's ConfigMaps (namespace budgets' ledgers).
    need(kinds == sorted(["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Deployment",
                          "DeviceClass", "Role", "RoleBinding", "ServiceAccount",
                          "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]),
         "kinds %s" % kinds)
    plugin = by[("DaemonSet", "cxlkv-kubeletplugin")]
    need(plugin["spec"]["updateStrategy"] == {"type": "RollingUpdate",
         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}, "plugin rollout maxSurge 1 / 0")
    need(plugin["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical",
         "plugin priority")
    pc = plugin["spec"]["template"]["spec"]["containers"][0]
    need({"name": "CXLKV_DRA_HTTP_LISTEN", "value": "$(POD_IP):9095"} in pc["env"],
         "plugin --http-listen")
    need(pc["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"} and
         pc["readinessProbe"]["httpGet"]["path"] == "/healthz", "plugin probes on /healthz")
    ctl = by[("Deployment", "cxlkv-controller")]["spec"]["template"]["spec"]
    need(ctl["priorityClassName"] == "system-cluster-critical", "controller priority")
    need(ctl["securityContext"]["runAsNonRoot"] is True, "controller non-root")
    # Its Leases live in the release namespace (the Role grants them only there).
    need({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
         in ctl["containers"][0]["env"], "controller POD_NAMESPACE")
    cc = ctl["containers"][0]
    need({"name": "CXLKV_DRA_METRICS_LISTEN", "value": "$(POD_IP):9096"} in cc["env"] and
         {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in cc["env"],
         "controller --metrics-listen on its pod IP")
    need(cc["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"} and
         cc["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"},
         "controller probes: liveness /healthz, readiness /readyz")
    dc = by[("DeviceClass", "cxl-shared-memory")]
    need(dc["spec"]["selectors"][0]["cel"]["expression"] == 'device.driver == "cxlkv.dev"',
         "DeviceClass CEL")
    hostd = by[("DaemonSet", "cxlkv-hostd")]["spec"]["template"]["spec"]
    need(hostd["automountServiceAccountToken"] is False, "hostd gets no token")
    need("privileged" not in hostd["containers"][0]["securityContext"],
         "file-backend hostd unprivileged")


def env(path, bin_dir):
    # CLI11's --help lists "(Env:NAME)" per option; HOST_IP and POD_IP are the
    # downward-API helpers the chart only expands into other values.
    bad = 0
    for d in docs_of(open(path)):
        if d["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            binary = bin_dir + "/" + c["command"][0].rsplit("/", 1)[1]
            help_text = subprocess.run([binary, "--help"], capture_output=True,
                                       text=True).stdout.replace("(Env:", "Env:")
            for e in c.get("env", []):
                if e["name"] in ("HOST_IP", "POD_IP"):
                    continue
                if "Env:" + e["name"] not in help_text:
                    print("%s: %s sets %s, which %s does not read" % (
                        d["metadata"]["name"], c["name"], e["name"], binary))
                    bad += 1
    if bad:
        sys.exit(1)


def per_coherence():
    got = {d["metadata"]["name"]: d["spec"]["selectors"][0]["cel"]["expression"]
           for d in docs_of(sys.stdin)}
    want = {"cxl-shared-memory": 'device.driver == "cxlkv.dev"'}
    for m in ("hardware", "software"):
        want["cxl-shared-memory-" + m] = ('device.driver == "cxlkv.dev" && '
                                          'device.attributes["cxlkv.dev"].coherence == "%s"' % m)
    if got != want:
        sys.exit("classes %s, want %s" % (got, want))


def drop_kind(kind):
    print(yaml.safe_dump_all([d for d in docs_of(sys.stdin) if d["kind"] != kind]))


def claim(ns, kind, mem, count="1", cls="cxl-shared-memory", mib=None):
    req = {"deviceClassName": cls, "count": int(count)}
    if mem != "-":
        req["capacity"] = {"requests": {"memory": mem}}
    spec = {"devices": {"requests": [{"name": "kv", "exactly": req}]}}
    if kind == "alt":
        spec = {"devices": {"requests": [{"name": "kv", "firstAvailable": [
            {"name": "small", "deviceClassName": cls, "capacity": {"requests": {"memory": "1Gi"}}},
            dict(req, name="big")]}]}}
    ann = {"cxlkv.dev/capacity-mib": mib} if mib is not None else None
    obj = {"apiVersion": "resource.k8s.io/v1", "metadata": {"name": "q", "namespace": ns}}
    if kind == "template":
        obj.update(kind="ResourceClaimTemplate", spec={"spec": spec})
        if ann:
            obj["spec"]["metadata"] = {"annotations": ann}
    else:
        obj.update(kind="ResourceClaim", spec=spec)
        if ann:
            obj["metadata"]["annotations"] = ann
    print(json.dumps(obj))


def role_without_driver(path):
    r = json.load(open(path))
    r["rules"] = [x for x in r["rules"] if "resourceclaims/driver" not in x["resources"]]
    for k in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        r["metadata"].pop(k, None)
    print(json.dumps(r))


def main():
    cmds = {"rendered": rendered, "env": env, "per-coherence": per_coherence,
            "drop-kind": drop_kind, "claim": claim, "role-without-driver": role_without_driver}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit("usage: helm_checks.py %s ... (the module docstring says each)" % "|".join(cmds))
    cmds[sys.argv[1]](*sys.argv[2:])


if __name__ == "__main__":
    main()
