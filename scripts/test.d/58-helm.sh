#!/usr/bin/env bash
# test.sh: background lane
# Stage: the Helm chart deployments/helm/cxlkv through Helm itself (built from
# its Go module, test/e2e/helm-build.sh) and a real control plane
# (test/e2e/cluster.sh, 2 fake nodes, no kubelet):
#   - helm lint; helm template with values.schema.json (and
#     deviceClass.perCoherence's two classes); bad values refused
#     with a clear message (the "default" namespace, a bad port, an unknown
#     key, a missing fabric manager URL, leader election the binary lacks);
#   - every environment variable the rendered pods set is one the binaries'
#     own --help names (CLI11 prints each option's env name);
#   - helm install into cxlkv-system on the real apiserver, the example
#     claims accepted by a server-side dry run;
#   - quota in bytes per claim: the chart's ValidatingAdmissionPolicy admits
#     and refuses claims and claim templates by their memory request or, in
#     annotation mode, their cxlkv.dev/capacity-mib (chart cap, namespace
#     label override), and admits the oversized claim once
#     its binding is deleted;
#   - RBAC: `kubectl auth can-i` per ServiceAccount, allowed and denied;
#   - helm upgrade in place (a value change reaches the Deployment, a no-op
#     upgrade does not roll the plugin) and helm uninstall leaving nothing;
#   - with real ServiceAccount tokens: the controller writes status.devices
#     of a multi-node claim (granular status authorization), the plugin may
#     not; with the resourceclaims/driver rule removed the controller may not
#     either; the plugin's ValidatingAdmissionPolicy confines slice writes to
#     the node in its pod-bound token, and without the policy the other
#     node's write goes through.
# Not here: running the chart's pods as processes (the chartpods stage,
# scripts/test.d/57-chartpods.sh).
# Warm (Kubernetes and Helm cached, binaries built): about 55 s on 2 cores for 90
# checks (51 s in the whole default run).
# In scripts/test.sh's background lane (after chartpods, beside vllm, model, ttft).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
ROOT=$PWD
CLUSTER=$ROOT/test/e2e/cluster.sh
CHART=$ROOT/deployments/helm/cxlkv
passed=0; failed=0; skipped=0
ok() { echo "helm: ok: $*"; passed=$((passed + 1)); }
bad() { echo "helm: FAILED: $*"; failed=$((failed + 1)); }
unset CXLKV_E2E_DIR
W=""
finish() {
  [ -n "${CXLKV_E2E_DIR:-}" ] && { bash "$CLUSTER" down >/dev/null 2>&1 || true; }
  [ -n "$W" ] && rm -rf "$W"
  echo "helm: $passed passed, $failed failed, $skipped skipped"
}
trap finish EXIT
W=$(mktemp -d /tmp/cxlkv-helm.XXXXXX)

echo "== helm: build Helm (cached) and the three binaries (their --help is checked)"
HELM=$(test/e2e/helm-build.sh) || { failed=1; exit 1; }
cxlkv_build_main cxlkv-dra-controller cxlkv-dra-kubeletplugin cxlkv-hostd || { failed=1; exit 1; }
NS=cxlkv-system
REL=cxlkv
URL=(--set fabricManager.url=http://127.0.0.1:9)
helm_t() { "$HELM" template "$REL" "$CHART" --namespace "$NS" "$@"; }

echo "== helm: lint and template"
if "$HELM" lint "$CHART" --strict --namespace "$NS" "${URL[@]}" >"$W/lint.log" 2>&1; then
  ok "helm lint --strict"
else cat "$W/lint.log"; bad "helm lint"; fi
if helm_t "${URL[@]}" >"$W/default.yaml" 2>"$W/t.err"; then ok "helm template (defaults)"; else
  cat "$W/t.err"; bad "helm template (defaults)"; fi

# What the rendered objects must say (python reads the YAML helm wrote).
if python3 - "$W/default.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
def need(c, what):
    if not c: sys.exit("rendered chart: " + what)
kinds = sorted({d["kind"] for d in docs})
# Role + RoleBinding: the controller's ConfigMaps (namespace budgets' ledgers).
need(kinds == sorted(["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Deployment", "DeviceClass",
                      "Role", "RoleBinding", "ServiceAccount", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding"]), "kinds %s" % kinds)
plugin = by[("DaemonSet", "cxlkv-kubeletplugin")]
need(plugin["spec"]["updateStrategy"] == {"type": "RollingUpdate",
     "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}, "plugin rollout maxSurge 1 / 0")
need(plugin["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical", "plugin priority")
pc = plugin["spec"]["template"]["spec"]["containers"][0]
need({"name": "CXLKV_DRA_HTTP_LISTEN", "value": "$(POD_IP):9095"} in pc["env"], "plugin --http-listen")
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
need(dc["spec"]["selectors"][0]["cel"]["expression"] == 'device.driver == "cxlkv.dev"', "DeviceClass CEL")
hostd = by[("DaemonSet", "cxlkv-hostd")]["spec"]["template"]["spec"]
need(hostd["automountServiceAccountToken"] is False, "hostd gets no token")
need("privileged" not in hostd["containers"][0]["securityContext"], "file-backend hostd unprivileged")
PY
then ok "rendered objects: kinds, rollout, priorities, plugin /healthz probes, non-root controller with POD_NAMESPACE and /healthz, /readyz probes, DeviceClass CEL, hostd without token"
else bad "rendered objects"; fi

# Every env var a rendered container sets must be one its binary reads
# (CLI11's --help lists "(Env:NAME)"), except the downward-API helpers the
# chart only expands into other values ($(HOST_IP), $(POD_IP)).
if python3 - "$W/default.yaml" "$ROOT/build/bin" <<'PY'
import subprocess, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
bad = 0
for d in docs:
    if d["kind"] not in ("Deployment", "DaemonSet"):
        continue
    for c in d["spec"]["template"]["spec"]["containers"]:
        binary = sys.argv[2] + "/" + c["command"][0].rsplit("/", 1)[1]
        help_text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
        for e in c.get("env", []):
            if e["name"] in ("HOST_IP", "POD_IP"):
                continue
            if "Env:" + e["name"] not in help_text.replace("(Env:", "Env:"):
                print("%s: %s sets %s, which %s does not read" % (d["metadata"]["name"], c["name"],
                                                               e["name"], binary))
                bad += 1
sys.exit(1 if bad else 0)
PY
then ok "every env var the chart sets is one the binary's --help names"
else bad "env vars the binaries do not read"; fi

# Optional objects: rendered, and values.schema.json checks their values.
if helm_t "${URL[@]}" --set networkPolicy.enabled=true --set serviceMonitor.enabled=true \
    --set controller.metricsPort=8080 --set networkPolicy.fabricManagerCIDR=10.0.5.0/24 \
    --set fabricManager.credentialsSecret.name=fm-cred --set fabricManager.caSecret.name=fm-ca \
    >"$W/optional.yaml" 2>"$W/t.err" &&
   grep -q '^kind: NetworkPolicy' "$W/optional.yaml" && grep -q '^kind: ServiceMonitor' "$W/optional.yaml" &&
   grep -q 'secretKeyRef: {name: fm-cred, key: password}' "$W/optional.yaml"; then
  ok "NetworkPolicy, ServiceMonitor and fabric credentials/CA render (no CNI or Prometheus operator runs here)"
else cat "$W/t.err"; bad "optional objects"; fi

refused() {  # refused <label> <expected message part> <helm template args...>
  local what=$1 want=$2; shift 2
  if "$HELM" template "$REL" "$CHART" "$@" >/dev/null 2>"$W/err"; then
    bad "$what: accepted"
  elif grep -qF -- "$want" "$W/err"; then
    ok "$what refused: $(grep -F -- "$want" "$W/err" | head -1 | cut -c1-150)"
  else
    cat "$W/err"; bad "$what: refused without '$want'"
  fi
}
echo "== helm: bad values refused"
refused "the default namespace" 'refusing to install into the "default" namespace' \
  --namespace default "${URL[@]}"
refused "hostd.port=70000" "/hostd/port': maximum" --namespace "$NS" "${URL[@]}" --set hostd.port=70000
refused "controller.metricsPort=0" "/controller/metricsPort': minimum" --namespace "$NS" "${URL[@]}" \
  --set controller.metricsPort=0
refused "kubeletPlugin.httpPort=0" "/kubeletPlugin/httpPort': 'oneOf' failed" --namespace "$NS" "${URL[@]}" \
  --set kubeletPlugin.httpPort=0
refused "an unknown key" "additional properties 'replica' not allowed" \
  --namespace "$NS" "${URL[@]}" --set controller.replica=2
refused "a ServiceMonitor with nothing to scrape" "serviceMonitor.enabled=true needs kubeletPlugin.httpPort" \
  --namespace "$NS" "${URL[@]}" --set serviceMonitor.enabled=true --set kubeletPlugin.httpPort=null \
  --set controller.metricsPort=null
refused "no fabric manager URL" "fabricManager.url is required" --namespace "$NS"
refused "a URL that is not http(s)" "/fabricManager/url': 'ftp://x' does not match" --namespace "$NS" \
  --set fabricManager.url=ftp://x
refused "a lease duration under 1 s" "/controller/leaseDurationSeconds': minimum: got 0.5, want 1" \
  --namespace "$NS" "${URL[@]}" --set-json controller.leaseDurationSeconds=0.5
refused "the old leaderElection block" "additional properties 'leaderElection' not allowed" \
  --namespace "$NS" "${URL[@]}" --set controller.leaderElection.enabled=true
if "$HELM" template "$REL" "$CHART" --namespace "$NS" "${URL[@]}" \
    --set controller.leaseDurationSeconds=42 2>/dev/null |
    grep -qF '{name: CXLKV_DRA_LEASE_DURATION, value: "42"}'; then
  ok "controller.leaseDurationSeconds reaches the controller (CXLKV_DRA_LEASE_DURATION=42)"
else bad "controller.leaseDurationSeconds is not passed to the controller"; fi
refused "qos=3" "/controller/qos': value must be one of" --namespace "$NS" "${URL[@]}" --set controller.qos=3
refused "hostd maxSurge=1" "maxSurge must be 0" --namespace "$NS" "${URL[@]}" \
  --set hostd.updateStrategy.rollingUpdate.maxSurge=1
refused "coherence=software without hosts" "coherence.mode=software needs coherence.softwareHosts" \
  --namespace "$NS" "${URL[@]}" --set coherence.mode=software
refused "coherence=sw" "/coherence/mode': value must be one of" --namespace "$NS" "${URL[@]}" \
  --set coherence.mode=sw
# Non-coherent blades: the controller publishes the attribute, every hostd
# learns the write-partition order (docs/dra.md, "Non-coherent regions").
if out=$("$HELM" template "$REL" "$CHART" --namespace "$NS" "${URL[@]}" --set coherence.mode=software \
      --set 'coherence.softwareHosts={node-a,node-b}' 2>&1) &&
    grep -qF '{name: CXLKV_DRA_COHERENCE, value: "software"}' <<< "$out" &&
    grep -qF '{name: CXLKV_SOFTWARE_HOSTS, value: "node-a,node-b"}' <<< "$out"; then
  ok "coherence.mode=software reaches the controller and hostd"
else echo "$out" | tail -5; bad "coherence.mode=software is not passed to the controller and hostd"; fi
# A DeviceClass per coherence mode (test/e2e/dra-noncoherent.sh runs the same
# CEL on a real apiserver and scheduler).
if out=$("$HELM" template "$REL" "$CHART" --namespace "$NS" "${URL[@]}" --set deviceClass.perCoherence=true \
      --show-only templates/deviceclass.yaml 2>&1) && python3 -c '
import sys, yaml
docs = {d["metadata"]["name"]: d["spec"]["selectors"][0]["cel"]["expression"] for d in yaml.safe_load_all(sys.stdin) if d}
want = {"cxl-shared-memory": "device.driver == \"cxlkv.dev\""}
for m in ("hardware", "software"):
    want["cxl-shared-memory-" + m] = f"device.driver == \"cxlkv.dev\" && device.attributes[\"cxlkv.dev\"].coherence == \"{m}\""
assert docs == want, docs
' <<< "$out"; then ok "deviceClass.perCoherence=true: cxl-shared-memory-hardware and -software select on the coherence attribute"
else echo "$out" | tail -8; bad "deviceClass.perCoherence=true did not render the two classes"; fi
if "$HELM" template "$REL" "$CHART" --namespace default --set allowDefaultNamespace=true \
    "${URL[@]}" >/dev/null 2>&1; then ok "default namespace allowed with allowDefaultNamespace=true"
else bad "allowDefaultNamespace=true still refused"; fi

echo "== helm: control plane up"
CXLKV_E2E_DIR=$(mktemp -d /tmp/cxlkv-e2e.XXXXXX); export CXLKV_E2E_DIR
bash "$CLUSTER" up || { failed=$((failed + 1)); exit 1; }
eval "$(bash "$CLUSTER" env)"

echo "== helm: install the chart"
QUOTA=(--set quota.maxClaimMemory=4Gi)
if "$HELM" install "$REL" "$CHART" --namespace "$NS" --create-namespace "${URL[@]}" "${QUOTA[@]}" \
    >"$W/install.log" 2>&1; then ok "helm install into $NS"
else cat "$W/install.log"; bad "helm install"; exit 1; fi
# The other shapes the chart renders, checked by the apiserver's own
# validation (server-side dry run; the ServiceMonitor's CRD is not installed).
if "$HELM" template dry "$CHART" --namespace "$NS" "${URL[@]}" --set hostd.backend=devdax \
    --set networkPolicy.enabled=true --set controller.metricsPort=8080 --set serviceMonitor.enabled=true \
    --set fabricManager.credentialsSecret.name=fm-cred --set fabricManager.caSecret.name=fm-ca \
    --set controller.replicas=2 2>"$W/t.err" | python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] != "ServiceMonitor"]
print(yaml.safe_dump_all(docs))' | kubectl apply --dry-run=server --server-side --force-conflicts -f - \
    >"$W/dry.log" 2>&1; then
  ok "devdax hostd, NetworkPolicy, metrics Service, secrets: accepted by the apiserver (dry run)"
else cat "$W/t.err" "$W/dry.log"; bad "dry run of the optional shapes"; fi
kubectl create namespace team-a >/dev/null && kubectl create namespace team-b >/dev/null
for f in "$CHART"/examples/*.yaml; do
  if kubectl apply --dry-run=server -f "$f" >"$W/ex.log" 2>&1; then
    ok "example $(basename "$f") accepted (server-side dry run)"
  else cat "$W/ex.log"; bad "example $(basename "$f")"; fi
done

echo "== helm: quota in bytes per claim (ValidatingAdmissionPolicy, cap 4Gi)"
claim_json() {  # claim_json <ns> <kind: claim|template|alt> <memory or -> [count] [class]
  python3 - "$@" <<'PY'
import json, sys
ns, kind, mem = sys.argv[1:4]
count = int(sys.argv[4]) if len(sys.argv) > 4 else 1
cls = sys.argv[5] if len(sys.argv) > 5 else "cxl-shared-memory"
ann = {"cxlkv.dev/capacity-mib": sys.argv[6]} if len(sys.argv) > 6 else None
req = {"deviceClassName": cls, "count": count}
if mem != "-":
    req["capacity"] = {"requests": {"memory": mem}}
spec = {"devices": {"requests": [{"name": "kv", "exactly": req}]}}
if kind == "alt":
    spec = {"devices": {"requests": [{"name": "kv", "firstAvailable": [
        {"name": "small", "deviceClassName": cls, "capacity": {"requests": {"memory": "1Gi"}}},
        dict(req, name="big")]}]}}
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
PY
}
admit() {  # admit <yes|no> <expected message or -> <claim_json args...>
  local want=$1 msg=$2; shift 2
  local out
  if out=$(claim_json "$@" | kubectl create --dry-run=server -f - 2>&1); then
    [ "$want" = yes ] && ok "quota admits $*" || bad "quota admitted $*"
  elif [ "$want" = no ] && grep -qF -- "$msg" <<<"$out"; then
    ok "quota refuses $*: $(grep -oF -- "$msg" <<<"$out" | head -1)"
  else bad "quota on $*: $out"; fi
}
end=$((SECONDS + 20))  # a new policy takes effect within a second or so
until ! claim_json team-a claim 8Gi | kubectl create --dry-run=server -f - >/dev/null 2>&1 ||
      [ $SECONDS -ge $end ]; do sleep 0.5; done
admit yes - team-a claim 2Gi
admit yes - team-a claim 4Gi
admit no "the cap per claim in namespace team-a is 4Gi" team-a claim 8Gi
admit no "this claim requests 6442450944 bytes" team-a claim 2Gi 3
admit no "must state capacity.requests.memory" team-a claim -
admit no "the cap per claim in namespace team-b is 4Gi" team-b template 5Gi
admit no "a firstAvailable alternative requests more" team-a alt 8Gi
admit yes - team-a alt 3Gi
admit yes - team-a claim 100Gi 1 other-class
# Annotation mode: the size in cxlkv.dev/capacity-mib, no capacity request.
admit yes - team-a claim - 1 cxl-shared-memory 2048
admit no "annotation cxlkv.dev/capacity-mib asks for 8192 MiB" team-a claim - 1 cxl-shared-memory 8192
admit no "annotation cxlkv.dev/capacity-mib asks for 5120 MiB" team-b template - 1 cxl-shared-memory 5120
admit no "must be a whole number of MiB, not '2Gi'" team-a claim - 1 cxl-shared-memory 2Gi
kubectl label namespace team-a cxlkv.dev/max-claim-memory=1Gi >/dev/null
admit no "the cap per claim in namespace team-a is 1Gi" team-a claim 2Gi
admit yes - team-b claim 2Gi
kubectl label namespace team-a --overwrite cxlkv.dev/max-claim-memory=lots >/dev/null
admit no "is not a quantity: 'lots'" team-a claim 1Gi
kubectl label namespace team-a cxlkv.dev/max-claim-memory- >/dev/null
# Negative: without the policy binding the oversized claim is admitted.
kubectl delete validatingadmissionpolicybinding "$REL-claim-memory-cap" >/dev/null
end=$((SECONDS + 20))
until claim_json team-a claim 8Gi | kubectl create --dry-run=server -f - >/dev/null 2>&1 ||
      [ $SECONDS -ge $end ]; do sleep 0.5; done
admit yes - team-a claim 8Gi
"$HELM" upgrade "$REL" "$CHART" --namespace "$NS" "${URL[@]}" "${QUOTA[@]}" >/dev/null 2>&1 ||
  bad "helm upgrade (restore the quota binding)"
end=$((SECONDS + 20))
until ! claim_json team-a claim 8Gi | kubectl create --dry-run=server -f - >/dev/null 2>&1 ||
      [ $SECONDS -ge $end ]; do sleep 0.5; done
admit no "the cap per claim in namespace team-a is 4Gi" team-a claim 8Gi

echo "== helm: RBAC per ServiceAccount (kubectl auth can-i)"
SA=system:serviceaccount:$NS
can() {  # can <yes|no> <sa> <verb> <resource> [args...]
  local want=$1 sa=$2; shift 2
  local got; got=$(kubectl auth can-i --as="$SA:$REL-$sa" "$@" 2>/dev/null)
  if [ "$got" = "$want" ]; then ok "$sa: can-i $* = $got"; else bad "$sa: can-i $* = $got, want $want"; fi
}
can yes controller create resourceslices.resource.k8s.io
can yes controller update resourceslices.resource.k8s.io
can yes controller delete resourceslices.resource.k8s.io
can yes controller watch resourceclaims.resource.k8s.io --all-namespaces
can yes controller patch resourceclaims.resource.k8s.io -n team-a
can yes controller patch resourceclaims.resource.k8s.io --subresource=status -n team-a
can no controller update resourceclaims.resource.k8s.io --subresource=binding -n team-a
can yes controller arbitrary-node:patch resourceclaims.resource.k8s.io/cxlkv.dev --subresource=driver -n team-a
can no controller arbitrary-node:patch resourceclaims.resource.k8s.io/other.dev --subresource=driver -n team-a
can yes controller create events.events.k8s.io -n team-a
# Namespace byte budgets: the namespace's label, and ledgers in its own namespace only.
can yes controller get namespaces
can no controller update namespaces
can yes controller update configmaps -n "$NS"
can no controller update configmaps -n team-a
can yes controller get pods -n team-a
can yes controller create leases.coordination.k8s.io -n "$NS"
can yes controller update leases.coordination.k8s.io -n "$NS"
can no controller update leases.coordination.k8s.io -n team-a
can yes controller delete leases.coordination.k8s.io -n "$NS"
can no controller delete leases.coordination.k8s.io -n team-a
can no controller get secrets -n "$NS"
can no controller create pods -n team-a
can yes kubeletplugin get resourceclaims.resource.k8s.io -n team-a
can yes kubeletplugin get nodes
can no kubeletplugin list resourceclaims.resource.k8s.io -n team-a
can no kubeletplugin patch resourceclaims.resource.k8s.io --subresource=status -n team-a
can no kubeletplugin associated-node:patch resourceclaims.resource.k8s.io/cxlkv.dev --subresource=driver -n team-a
can no kubeletplugin create resourceslices.resource.k8s.io
can no kubeletplugin update nodes
can no kubeletplugin get secrets -n "$NS"
can no hostd get resourceclaims.resource.k8s.io -n team-a
can no hostd get nodes

API=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
# A kubeconfig that authenticates with a token only (the admin kubeconfig
# carries a client certificate, which the apiserver would prefer).
as_token() {  # as_token <token> <kubectl args...>
  kubectl --kubeconfig=/dev/null --server="$API" \
    --certificate-authority="$CXLKV_E2E_DIR/pki/ca.crt" --token="$1" "${@:2}"
}

echo "== helm: granular status authorization with the controller's real token"
# A slice and a claim allocated on it with a two-node selector, as the
# scheduler would allocate a shared region (written here as admin).
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: helm-test-blade}
spec:
  driver: cxlkv.dev
  pool: {name: helm-test/blade-0, generation: 1, resourceSliceCount: 1}
  nodeSelector:
    nodeSelectorTerms:
    - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [fake-node-0, fake-node-1]}]
  devices: [{name: blade-0, allowMultipleAllocations: true, capacity: {memory: {value: 8Gi}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared, namespace: team-a}
spec:
  devices:
    # Another class: the memory cap applies to cxl-shared-memory claims only.
    requests: [{name: kv, exactly: {deviceClassName: helm-test-class}}]
YAML
kubectl patch resourceclaim shared -n team-a --subresource=status --type=merge -p '{"status":{"allocation":{
  "devices":{"results":[{"request":"kv","driver":"cxlkv.dev","pool":"helm-test/blade-0","device":"blade-0"}]},
  "nodeSelector":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In",
  "values":["fake-node-0","fake-node-1"]}]}]}}}}' >/dev/null || bad "admin could not allocate the test claim"
DEVICES='[{"op":"add","path":"/status/devices","value":[{"driver":"cxlkv.dev","pool":"helm-test/blade-0",
  "device":"blade-0","conditions":[{"type":"cxlkv.dev/composed","status":"True","reason":"Test",
  "message":"written by 58-helm","lastTransitionTime":"2026-01-01T00:00:00Z"}]}]}]'
CTL_TOKEN=$(kubectl create token "$REL-controller" -n "$NS" --duration=10m)
write_devices() {  # write_devices <token>: the controller's own call, a JSON Patch of status.devices
  local code
  code=$(curl -s -o "$W/patch.out" -w '%{http_code}' -X PATCH --cacert "$CXLKV_E2E_DIR/pki/ca.crt" \
    -H "Authorization: Bearer $1" -H 'Content-Type: application/json-patch+json' --data "$DEVICES" \
    "$API/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/shared/status")
  echo "HTTP $code: $(python3 -c 'import json,sys; print(json.load(sys.stdin).get("message", "(object)"))' <"$W/patch.out" 2>/dev/null)"
  [ "$code" = 200 ]
}
if out=$(write_devices "$CTL_TOKEN"); then ok "controller token writes status.devices of a two-node claim"
else bad "controller token: $out"; fi
kubectl patch resourceclaim shared -n team-a --subresource=status --type=json \
  -p '[{"op":"remove","path":"/status/devices"}]' >/dev/null
# Negative: the same write without the resourceclaims/driver rule.
kubectl get clusterrole "$REL-controller" -o json >"$W/role.json"
python3 - "$W/role.json" >"$W/role-nodriver.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r["rules"] = [x for x in r["rules"] if "resourceclaims/driver" not in x["resources"]]
for k in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
    r["metadata"].pop(k, None)
print(json.dumps(r))
PY
kubectl replace -f "$W/role-nodriver.json" >/dev/null
if out=$(write_devices "$CTL_TOKEN"); then bad "controller wrote status.devices without resourceclaims/driver"
elif grep -q "resourceclaims/driver" <<<"$out"; then
  ok "without the resourceclaims/driver rule the controller's write is forbidden: $(echo "$out" | tail -1 | cut -c1-140)"
else bad "unexpected error without the driver rule: $out"; fi
"$HELM" upgrade "$REL" "$CHART" --namespace "$NS" "${URL[@]}" "${QUOTA[@]}" >/dev/null 2>&1 ||
  bad "helm upgrade (restore)"
if write_devices "$CTL_TOKEN" >/dev/null; then ok "helm upgrade restores the rule (the write succeeds again)"
else bad "write after restoring the rule"; fi

echo "== helm: the plugin's token, bound to a pod on fake-node-0"
# The DaemonSet controller creates one plugin pod per node and the scheduler
# binds it; no kubelet runs it, but its bound token carries the node name.
pod_on() {
  kubectl get pods -n "$NS" -l app.kubernetes.io/component=kubeletplugin \
    -o jsonpath="{.items[?(@.spec.nodeName==\"$1\")].metadata.name}"
}
end=$((SECONDS + 60))
until [ -n "$(pod_on fake-node-0)" ] || [ $SECONDS -ge $end ]; do sleep 1; done
P0=$(pod_on fake-node-0)
if [ -z "$P0" ]; then bad "no plugin pod bound to fake-node-0"; exit 1; fi
ok "DaemonSet pod $P0 bound to fake-node-0"
PL_TOKEN=$(kubectl create token "$REL-kubeletplugin" -n "$NS" --bound-object-kind=Pod \
  --bound-object-name="$P0" --duration=10m)
extra=$(as_token "$PL_TOKEN" auth whoami -o jsonpath='{.status.userInfo.extra.authentication\.kubernetes\.io/node-name[0]}')
if [ "$extra" = fake-node-0 ]; then ok "plugin token carries node-name fake-node-0"
else bad "plugin token node-name = '$extra'"; fi
if out=$(write_devices "$PL_TOKEN"); then bad "plugin token wrote claim status"
else ok "plugin token may not write claim status: $(echo "$out" | tail -1 | cut -c1-120)"; fi
slice_yaml() {  # slice_yaml <name> <node>
  cat <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: $1}
spec:
  driver: cxlkv.dev
  nodeName: $2
  pool: {name: $1, generation: 1, resourceSliceCount: 1}
  devices: [{name: d0}]
YAML
}
if out=$(slice_yaml local-0 fake-node-0 | as_token "$PL_TOKEN" create -f - 2>&1); then
  bad "plugin created a slice without RBAC for it"
else ok "plugin may not create slices (RBAC): $(echo "$out" | tail -1 | cut -c1-100)"; fi
# Widen its RBAC as a later chart might (node-local slices): the policy must
# still confine it to its own node.
kubectl create clusterrole helm-test-widen --verb=create,delete --resource=resourceslices.resource.k8s.io >/dev/null
kubectl create clusterrolebinding helm-test-widen --clusterrole=helm-test-widen \
  --serviceaccount="$NS:$REL-kubeletplugin" >/dev/null
sleep 1
if out=$(slice_yaml local-0 fake-node-0 | as_token "$PL_TOKEN" create -f - 2>&1); then
  ok "widened plugin creates a slice of its own node"
else bad "own-node slice refused: $out"; fi
if out=$(slice_yaml other-1 fake-node-1 | as_token "$PL_TOKEN" create -f - 2>&1); then
  bad "plugin on fake-node-0 created a slice of fake-node-1"
elif grep -q "may not write ResourceSlices of node 'fake-node-1'" <<<"$out"; then
  ok "policy refuses the other node's slice: $(echo "$out" | tail -1 | cut -c1-140)"
else bad "other node's slice refused for another reason: $out"; fi
# Negative: without the policy binding the same write goes through.
kubectl delete validatingadmissionpolicybinding "$REL-kubeletplugin-own-node" >/dev/null
end=$((SECONDS + 20)); created=0
while [ $SECONDS -lt $end ]; do
  if slice_yaml other-1 fake-node-1 | as_token "$PL_TOKEN" create -f - >/dev/null 2>&1; then
    created=1; break; fi
  sleep 1
done
if [ $created = 1 ]; then ok "without the policy the other node's slice is created (the policy is what stopped it)"
else bad "other node's slice still refused without the policy"; fi

echo "== helm: upgrade in place, then uninstall"
if "$HELM" upgrade "$REL" "$CHART" --namespace "$NS" "${URL[@]}" "${QUOTA[@]}" \
    --set controller.replicas=2 >/dev/null 2>"$W/up.err" &&
   [ "$(kubectl get deployment "$REL-controller" -n "$NS" -o jsonpath='{.spec.replicas}')" = 2 ]; then
  ok "helm upgrade --set controller.replicas=2 changes the Deployment in place"
else cat "$W/up.err"; bad "helm upgrade of replicas"; fi
gen=$(kubectl get daemonset "$REL-kubeletplugin" -n "$NS" -o jsonpath='{.metadata.generation}')
"$HELM" upgrade "$REL" "$CHART" --namespace "$NS" "${URL[@]}" "${QUOTA[@]}" --set controller.replicas=2 \
  >/dev/null 2>&1
if [ "$(kubectl get daemonset "$REL-kubeletplugin" -n "$NS" -o jsonpath='{.metadata.generation}')" = "$gen" ]; then
  ok "an upgrade with unchanged plugin values leaves the DaemonSet's generation ($gen): no plugin rollout"
else bad "the plugin DaemonSet changed on a no-op upgrade"; fi
if "$HELM" uninstall "$REL" --namespace "$NS" >/dev/null 2>"$W/un.err"; then ok "helm uninstall"
else cat "$W/un.err"; bad "helm uninstall"; fi
# Pods go through the garbage collector; a pod bound to a node then waits
# for a kubelet that never comes, so it must only be terminating.
leftover() {
  kubectl get clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings,deviceclasses \
    -l app.kubernetes.io/instance="$REL" -o name 2>&1
  kubectl get deployments,daemonsets,replicasets,services,serviceaccounts -n "$NS" \
    -l app.kubernetes.io/instance="$REL" -o name 2>&1
  kubectl get pods -n "$NS" -l app.kubernetes.io/instance="$REL" -o json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if not p["metadata"].get("deletionTimestamp"):
        print("pod/" + p["metadata"]["name"])' 
}
end=$((SECONDS + 30))
until [ -z "$(leftover)" ] || [ $SECONDS -ge $end ]; do sleep 1; done
if [ -z "$(leftover)" ]; then ok "uninstall leaves no object of the release (its pods terminating)"
else bad "left after uninstall: $(leftover | tr '\n' ' ')"; fi
[ "$failed" -eq 0 ]
