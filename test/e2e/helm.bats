#!/usr/bin/env bats
# The Helm chart deployments/helm/cxlkv installed by Helm into a real control
# plane (test/e2e/cluster.sh, 2 fake nodes, no kubelet): the examples and the
# optional shapes accepted by the apiserver; quota in bytes per claim (the
# chart's ValidatingAdmissionPolicy, cap 4Gi, and in annotation mode the
# cxlkv.dev/capacity-mib annotation; the namespace label override); RBAC per
# ServiceAccount (`kubectl auth can-i`); with real ServiceAccount tokens the
# controller may write status.devices of a multi-node claim (granular status
# authorization) and the plugin may not, and the plugin's policy confines its
# slice writes to the node in its pod-bound token; helm upgrade in place and
# helm uninstall leaving nothing. Each negative has its control: the policy
# binding or RBAC rule removed, the same request goes through.
# Run by the helm stage (scripts/test.d/58-helm.sh) after helm-render.bats;
# alone: `bats test/e2e/helm.bats` (HELM= a helm binary, else built).
# The failure hook (test/e2e/lib/dra.bash) prints the cluster state.
# bats file_tags=helm,cluster

load lib/dra

setup_file() {
  export ROOT CHART=$ROOT/deployments/helm/cxlkv NS=cxlkv-system REL=cxlkv CLUSTER
  export HELM=${HELM:-$("$ROOT/test/e2e/helm-build.sh")}
  export W=$BATS_FILE_TMPDIR E=$BATS_FILE_TMPDIR
  mkdir -p "$E/logs"
  export CXLKV_E2E_DIR=$W/cluster
  bash "$CLUSTER" up >"$W/cluster.log" 2>&1 3>&- || { cat "$W/cluster.log"; return 1; }
  eval "$(bash "$CLUSTER" env)"
  export KUBECONFIG
  API=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}'); export API
  "$HELM" install "$REL" "$CHART" --namespace "$NS" --create-namespace \
    --set fabricManager.url=http://127.0.0.1:9 --set quota.maxClaimMemory=4Gi >"$W/install.log" 2>&1 ||
    { cat "$W/install.log"; return 1; }
  kubectl create namespace team-a >/dev/null && kubectl create namespace team-b >/dev/null
  # A new policy takes effect within a second or so.
  wait_until 20 quota_refuses_8gi
  # For the granular status authorization: a slice and a claim allocated on it
  # with a two-node selector, as the scheduler would allocate a shared region
  # (written here as admin).
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
    "values":["fake-node-0","fake-node-1"]}]}]}}}}' >/dev/null
}

teardown_file() {
  bash "$CLUSTER" down >/dev/null 2>&1 || true
}
# Each test from the root; the failure hook (lib/dra's teardown) shows the
# cluster state.
setup() { cd "$ROOT" && touch "$E/.test-start"; }
upgrade() {  # the release as installed (quota cap 4Gi), plus any --set given
  "$HELM" upgrade "$REL" "$CHART" --namespace "$NS" --set fabricManager.url=http://127.0.0.1:9 \
    --set quota.maxClaimMemory=4Gi "$@"
}
claim_json() { python3 "$ROOT/test/e2e/lib/helm_checks.py" claim "$@"; }
dry_create() { claim_json "$@" | kubectl create --dry-run=server -f - 2>&1; }
quota_refuses_8gi() { ! dry_create team-a claim 8Gi >/dev/null; }
quota_admits_8gi() { dry_create team-a claim 8Gi >/dev/null; }
admits() {  # admits <claim_json args...>
  run dry_create "$@"
  echo "$output"
  [ "$status" -eq 0 ]
}
refuses() {  # refuses <expected message> <claim_json args...>
  local msg=$1; shift
  run dry_create "$@"
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"$msg"* ]]
}
can_i() { kubectl auth can-i "$@" 2>/dev/null; }  # its warnings (cluster-scoped, verb) aside
can() {  # can <yes|no> <service account> <kubectl auth can-i args...>
  local want=$1 sa=$2; shift 2
  run can_i --as="system:serviceaccount:$NS:$REL-$sa" "$@"
  echo "can-i $*: $output, want $want"
  [ "$output" = "$want" ]
}
# as_token <token> <kubectl args...>: a kubeconfig that authenticates with the token only
# (the admin kubeconfig carries a client certificate, which the apiserver would prefer).
as_token() {
  kubectl --kubeconfig=/dev/null --server="$API" \
    --certificate-authority="$CXLKV_E2E_DIR/pki/ca.crt" --token="$1" "${@:2}"
}
DEVICES='[{"op":"add","path":"/status/devices","value":[{"driver":"cxlkv.dev","pool":"helm-test/blade-0",
  "device":"blade-0","conditions":[{"type":"cxlkv.dev/composed","status":"True","reason":"Test",
  "message":"written by helm.bats","lastTransitionTime":"2026-01-01T00:00:00Z"}]}]}]'
write_devices() {  # write_devices <token>: the controller's own call, a JSON Patch of status.devices
  local code
  code=$(curl -s -o "$W/patch.out" -w '%{http_code}' -X PATCH --cacert "$CXLKV_E2E_DIR/pki/ca.crt" \
    -H "Authorization: Bearer $1" -H 'Content-Type: application/json-patch+json' --data "$DEVICES" \
    "$API/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/shared/status")
  echo "HTTP $code: $(cat "$W/patch.out")"
  [ "$code" = 200 ]
}
ctl_token() {
  [ -s "$W/ctl.token" ] || kubectl create token "$REL-controller" -n "$NS" --duration=10m >"$W/ctl.token"
  cat "$W/ctl.token"
}
plugin_pod_on() {
  kubectl get pods -n "$NS" -l app.kubernetes.io/component=kubeletplugin \
    -o jsonpath="{.items[?(@.spec.nodeName==\"$1\")].metadata.name}"
}
has_plugin_pod_on() { [ -n "$(plugin_pod_on "$1")" ]; }
# plugin_token: a token of the plugin's ServiceAccount bound to its pod on fake-node-0 (the
# DaemonSet controller creates the pod and the scheduler binds it; no kubelet runs it, but
# the bound token carries the node name).
plugin_token() {
  if [ ! -s "$W/plugin.token" ]; then
    wait_until 60 has_plugin_pod_on fake-node-0 || return 1
    kubectl create token "$REL-kubeletplugin" -n "$NS" --bound-object-kind=Pod \
      --bound-object-name="$(plugin_pod_on fake-node-0)" --duration=10m >"$W/plugin.token"
  fi
  cat "$W/plugin.token"
}
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

@test "helm install deployed the release into cxlkv-system" {
  run "$HELM" status "$REL" --namespace "$NS"
  echo "$output"
  [[ "$output" == *"STATUS: deployed"* ]]
}

# The other shapes the chart renders, checked by the apiserver's own validation
# (server-side dry run; the ServiceMonitor's CRD is not installed).
@test "devdax hostd, NetworkPolicy, metrics Service, secrets: accepted by the apiserver (dry run)" {
  "$HELM" template dry "$CHART" --namespace "$NS" --set fabricManager.url=http://127.0.0.1:9 \
    --set hostd.backend=devdax --set networkPolicy.enabled=true --set controller.metricsPort=8080 \
    --set serviceMonitor.enabled=true --set fabricManager.credentialsSecret.name=fm-cred \
    --set fabricManager.caSecret.name=fm-ca --set controller.replicas=2 >"$W/optional.yaml"
  python3 "$ROOT/test/e2e/lib/helm_checks.py" drop-kind ServiceMonitor <"$W/optional.yaml" |
    kubectl apply --dry-run=server --server-side --force-conflicts -f -
}

@test "every example of the chart has its dry-run test below" {
  run ls "$CHART/examples"
  echo "$output"
  [ "$output" = "$(printf '%s\n' claim-template.yaml consumable-capacity.yaml)" ]
}

@test "example claim-template.yaml accepted (server-side dry run)" {
  kubectl apply --dry-run=server -f "$CHART/examples/claim-template.yaml"
}

@test "example consumable-capacity.yaml accepted (server-side dry run)" {
  kubectl apply --dry-run=server -f "$CHART/examples/consumable-capacity.yaml"
}

# ---- quota in bytes per claim (ValidatingAdmissionPolicy, cap 4Gi) ---------
@test "quota admits a 2Gi claim" { admits team-a claim 2Gi; }
@test "quota admits a 4Gi claim (the cap)" { admits team-a claim 4Gi; }
@test "quota refuses an 8Gi claim: the cap per claim" {
  refuses "the cap per claim in namespace team-a is 4Gi" team-a claim 8Gi
}
@test "quota refuses a request of 3 x 2Gi (the claim's total)" {
  refuses "this claim requests 6442450944 bytes" team-a claim 2Gi 3
}
@test "quota refuses a claim without capacity.requests.memory" {
  refuses "must state capacity.requests.memory" team-a claim -
}
@test "quota refuses a 5Gi claim template" {
  refuses "the cap per claim in namespace team-b is 4Gi" team-b template 5Gi
}
@test "quota refuses a firstAvailable alternative over the cap" {
  refuses "a firstAvailable alternative requests more" team-a alt 8Gi
}
@test "quota admits firstAvailable alternatives within the cap" { admits team-a alt 3Gi; }
@test "quota admits a claim of another DeviceClass" { admits team-a claim 100Gi 1 other-class; }
# Annotation mode: the size in cxlkv.dev/capacity-mib, no capacity request.
@test "quota admits an annotation-mode claim of 2048 MiB" {
  admits team-a claim - 1 cxl-shared-memory 2048
}
@test "quota refuses an annotation-mode claim of 8192 MiB" {
  refuses "annotation cxlkv.dev/capacity-mib asks for 8192 MiB" team-a claim - 1 cxl-shared-memory 8192
}
@test "quota refuses an annotation-mode claim template of 5120 MiB" {
  refuses "annotation cxlkv.dev/capacity-mib asks for 5120 MiB" team-b template - 1 cxl-shared-memory 5120
}
@test "quota refuses a capacity-mib annotation that is not a whole number of MiB" {
  refuses "must be a whole number of MiB, not '2Gi'" team-a claim - 1 cxl-shared-memory 2Gi
}
# with_cap_label <value> <dry_create arguments...>: run dry_create with
# team-a's label cxlkv.dev/max-claim-memory=<value> (removed after).
with_cap_label() {
  kubectl label namespace team-a --overwrite cxlkv.dev/max-claim-memory="$1" >/dev/null
  shift
  run dry_create "$@"
  kubectl label namespace team-a cxlkv.dev/max-claim-memory- >/dev/null
  echo "$output"
}
@test "quota: the namespace label cxlkv.dev/max-claim-memory=1Gi lowers team-a's cap" {
  with_cap_label 1Gi team-a claim 2Gi
  [ "$status" -ne 0 ]
  [[ "$output" == *"the cap per claim in namespace team-a is 1Gi"* ]]
}
@test "quota: team-a's label leaves team-b's cap alone" {
  with_cap_label 1Gi team-b claim 2Gi
  [ "$status" -eq 0 ]
}
@test "quota refuses a namespace label that is not a quantity" {
  with_cap_label lots team-a claim 1Gi
  [ "$status" -ne 0 ]
  [[ "$output" == *"is not a quantity: 'lots'"* ]]
}
# The control: without the policy binding the oversized claim is admitted.
@test "quota: without the policy binding the 8Gi claim is admitted" {
  kubectl delete validatingadmissionpolicybinding "$REL-claim-memory-cap" >/dev/null
  wait_until 20 quota_admits_8gi || true
  run dry_create team-a claim 8Gi
  upgrade >/dev/null
  echo "$output"
  [ "$status" -eq 0 ]
}
@test "quota: helm upgrade restores the binding: 8Gi refused again" {
  wait_until 20 quota_refuses_8gi || true
  refuses "the cap per claim in namespace team-a is 4Gi" team-a claim 8Gi
}

# ---- RBAC per ServiceAccount (kubectl auth can-i) ---------------------------
@test "rbac: controller can create resourceslices" { can yes controller create resourceslices.resource.k8s.io; }
@test "rbac: controller can update resourceslices" { can yes controller update resourceslices.resource.k8s.io; }
@test "rbac: controller can delete resourceslices" { can yes controller delete resourceslices.resource.k8s.io; }
@test "rbac: controller can watch resourceclaims in all namespaces" {
  can yes controller watch resourceclaims.resource.k8s.io --all-namespaces
}
@test "rbac: controller can patch resourceclaims" { can yes controller patch resourceclaims.resource.k8s.io -n team-a; }
@test "rbac: controller can patch resourceclaims/status" {
  can yes controller patch resourceclaims.resource.k8s.io --subresource=status -n team-a
}
@test "rbac: controller cannot update resourceclaims/binding" {
  can no controller update resourceclaims.resource.k8s.io --subresource=binding -n team-a
}
@test "rbac: controller can patch resourceclaims/driver of cxlkv.dev for any node" {
  can yes controller arbitrary-node:patch resourceclaims.resource.k8s.io/cxlkv.dev --subresource=driver -n team-a
}
@test "rbac: controller cannot patch resourceclaims/driver of another driver" {
  can no controller arbitrary-node:patch resourceclaims.resource.k8s.io/other.dev --subresource=driver -n team-a
}
@test "rbac: controller can create events" { can yes controller create events.events.k8s.io -n team-a; }
# Namespace byte budgets: the namespace's label, and ledgers in its own namespace only.
@test "rbac: controller can get namespaces" { can yes controller get namespaces; }
@test "rbac: controller cannot update namespaces" { can no controller update namespaces; }
@test "rbac: controller can update configmaps in its namespace" { can yes controller update configmaps -n "$NS"; }
@test "rbac: controller cannot update configmaps elsewhere" { can no controller update configmaps -n team-a; }
@test "rbac: controller can get pods" { can yes controller get pods -n team-a; }
@test "rbac: controller can create leases in its namespace" {
  can yes controller create leases.coordination.k8s.io -n "$NS"
}
@test "rbac: controller can update leases in its namespace" {
  can yes controller update leases.coordination.k8s.io -n "$NS"
}
@test "rbac: controller cannot update leases elsewhere" {
  can no controller update leases.coordination.k8s.io -n team-a
}
@test "rbac: controller can delete leases in its namespace" {
  can yes controller delete leases.coordination.k8s.io -n "$NS"
}
@test "rbac: controller cannot delete leases elsewhere" {
  can no controller delete leases.coordination.k8s.io -n team-a
}
@test "rbac: controller cannot get secrets" { can no controller get secrets -n "$NS"; }
@test "rbac: controller cannot create pods" { can no controller create pods -n team-a; }
@test "rbac: kubeletplugin can get resourceclaims" {
  can yes kubeletplugin get resourceclaims.resource.k8s.io -n team-a
}
@test "rbac: kubeletplugin can get nodes" { can yes kubeletplugin get nodes; }
@test "rbac: kubeletplugin cannot list resourceclaims" {
  can no kubeletplugin list resourceclaims.resource.k8s.io -n team-a
}
@test "rbac: kubeletplugin cannot patch resourceclaims/status" {
  can no kubeletplugin patch resourceclaims.resource.k8s.io --subresource=status -n team-a
}
@test "rbac: kubeletplugin cannot patch resourceclaims/driver" {
  can no kubeletplugin associated-node:patch resourceclaims.resource.k8s.io/cxlkv.dev --subresource=driver -n team-a
}
@test "rbac: kubeletplugin cannot create resourceslices" {
  can no kubeletplugin create resourceslices.resource.k8s.io
}
@test "rbac: kubeletplugin cannot update nodes" { can no kubeletplugin update nodes; }
@test "rbac: kubeletplugin cannot get secrets" { can no kubeletplugin get secrets -n "$NS"; }
@test "rbac: hostd cannot get resourceclaims" { can no hostd get resourceclaims.resource.k8s.io -n team-a; }
@test "rbac: hostd cannot get nodes" { can no hostd get nodes; }

# ---- granular status authorization with the controller's real token --------
# ctl_writes_devices: the controller's token writes status.devices of the
# two-node claim (write_devices); the devices are removed again after.
ctl_writes_devices() {
  run write_devices "$(ctl_token)"
  kubectl patch resourceclaim shared -n team-a --subresource=status --type=json \
    -p '[{"op":"remove","path":"/status/devices"}]' >/dev/null || true
  echo "$output"
  [ "$status" -eq 0 ]
}
@test "controller token writes status.devices of a two-node claim" {
  ctl_writes_devices
}
# The control: the same write without the resourceclaims/driver rule.
@test "without the resourceclaims/driver rule the controller's write is forbidden" {
  kubectl get clusterrole "$REL-controller" -o json >"$W/role.json"
  python3 "$ROOT/test/e2e/lib/helm_checks.py" role-without-driver "$W/role.json" >"$W/role-nodriver.json"
  kubectl replace -f "$W/role-nodriver.json" >/dev/null
  run write_devices "$(ctl_token)"
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"resourceclaims/driver"* ]]
}
@test "helm upgrade restores the resourceclaims/driver rule (the write succeeds again)" {
  upgrade >/dev/null
  ctl_writes_devices
}

# ---- the plugin's token, bound to a pod on fake-node-0 ----------------------
@test "a DaemonSet plugin pod is bound to fake-node-0" {
  wait_until 60 has_plugin_pod_on fake-node-0
}
@test "plugin token carries node-name fake-node-0" {
  run as_token "$(plugin_token)" auth whoami \
    -o jsonpath='{.status.userInfo.extra.authentication\.kubernetes\.io/node-name[0]}'
  echo "$output"
  [ "$output" = fake-node-0 ]
}
@test "plugin token may not write claim status" {
  run write_devices "$(plugin_token)"
  echo "$output"
  [ "$status" -ne 0 ]
}
@test "plugin may not create slices (RBAC)" {
  run as_token "$(plugin_token)" create -f - < <(slice_yaml local-0 fake-node-0)
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *forbidden* ]]
}
# Widen its RBAC as a later chart might (node-local slices): the policy must
# still confine it to its own node.
@test "plugin with widened RBAC creates a slice of its own node" {
  kubectl create clusterrole helm-test-widen --verb=create,delete \
    --resource=resourceslices.resource.k8s.io >/dev/null
  kubectl create clusterrolebinding helm-test-widen --clusterrole=helm-test-widen \
    --serviceaccount="$NS:$REL-kubeletplugin" >/dev/null
  own_slice() { slice_yaml local-0 fake-node-0 | as_token "$(plugin_token)" create -f -; }
  wait_until 10 own_slice
}
@test "the plugin's policy refuses a slice of the other node" {
  run as_token "$(plugin_token)" create -f - < <(slice_yaml other-1 fake-node-1)
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"may not write ResourceSlices of node 'fake-node-1'"* ]]
}
# The control: without the policy binding the same write goes through.
@test "without the plugin's policy the other node's slice is created" {
  kubectl delete validatingadmissionpolicybinding "$REL-kubeletplugin-own-node" >/dev/null
  other_slice() { slice_yaml other-1 fake-node-1 | as_token "$(plugin_token)" create -f -; }
  wait_until 20 other_slice
}

# ---- upgrade in place, then uninstall ---------------------------------------
@test "helm upgrade --set controller.replicas=2 changes the Deployment in place" {
  upgrade --set controller.replicas=2 >/dev/null
  run kubectl get deployment "$REL-controller" -n "$NS" -o jsonpath='{.spec.replicas}'
  [ "$output" = 2 ]
}
@test "an upgrade with unchanged plugin values leaves the plugin DaemonSet's generation" {
  gen=$(kubectl get daemonset "$REL-kubeletplugin" -n "$NS" -o jsonpath='{.metadata.generation}')
  upgrade --set controller.replicas=2 >/dev/null
  run kubectl get daemonset "$REL-kubeletplugin" -n "$NS" -o jsonpath='{.metadata.generation}'
  echo "generation $gen before, $output after"
  [ "$output" = "$gen" ]
}
@test "helm uninstall" {
  "$HELM" uninstall "$REL" --namespace "$NS"
}
# Pods go through the garbage collector; a pod bound to a node then waits for
# a kubelet that never comes, so it must only be terminating.
leftover() {
  kubectl get clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings,deviceclasses \
    -l app.kubernetes.io/instance="$REL" -o name 2>&1
  kubectl get deployments,daemonsets,replicasets,services,serviceaccounts -n "$NS" \
    -l app.kubernetes.io/instance="$REL" -o name 2>&1
  kubectl get pods -n "$NS" -l app.kubernetes.io/instance="$REL" \
    -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}' 2>&1 |
    awk 'NF == 1 {print "pod/" $1}'
}
nothing_left() { [ -z "$(leftover)" ]; }
@test "uninstall leaves no object of the release (its pods terminating)" {
  wait_until 30 nothing_left || { leftover; return 1; }
}
