#!/usr/bin/env bats
# The Helm chart deployments/helm/cxlkv rendered by Helm itself, no cluster:
# helm lint, helm template with values.schema.json, the rendered objects'
# shape, the environment variables the binaries read, and bad values refused
# with a clear message. Run by the helm stage (scripts/test.d/58-helm.sh),
# which builds Helm (test/e2e/helm-build.sh) and the three binaries first;
# alone: `bats test/e2e/helm-render.bats` (HELM= a helm binary, else built).
# bats file_tags=helm,render

setup_file() {
  ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
  export ROOT CHART=$ROOT/deployments/helm/cxlkv NS=cxlkv-system REL=cxlkv
  export HELM=${HELM:-$("$ROOT/test/e2e/helm-build.sh")}
  export W=$BATS_FILE_TMPDIR
  # The default render, read by several tests below.
  "$HELM" template "$REL" "$CHART" --namespace "$NS" --set fabricManager.url=http://127.0.0.1:9 \
    >"$W/default.yaml" 2>"$W/default.err" || true
}

helm_t() { "$HELM" template "$REL" "$CHART" --namespace "$NS" --set fabricManager.url=http://127.0.0.1:9 "$@"; }

# refused <expected message part> <helm template args...>: the render fails, saying that.
refused() {
  local want=$1; shift
  run "$HELM" template "$REL" "$CHART" "$@"
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"$want"* ]]
}

@test "helm lint --strict passes" {
  run "$HELM" lint "$CHART" --strict --namespace "$NS" --set fabricManager.url=http://127.0.0.1:9
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "helm template renders the defaults" {
  cat "$W/default.err"
  [ -s "$W/default.yaml" ] && [ ! -s "$W/default.err" ]
}

@test "rendered objects: kinds, rollout, priorities, probes, non-root controller, DeviceClass CEL, hostd without token" {
  python3 "$ROOT/test/e2e/lib/helm_checks.py" rendered "$W/default.yaml"
}

@test "every env var the chart sets is one the binary's --help names" {
  python3 "$ROOT/test/e2e/lib/helm_checks.py" env "$W/default.yaml" "$ROOT/build/bin"
}

@test "NetworkPolicy, ServiceMonitor and fabric credentials/CA render" {
  run helm_t --set networkPolicy.enabled=true --set serviceMonitor.enabled=true \
    --set controller.metricsPort=8080 --set networkPolicy.fabricManagerCIDR=10.0.5.0/24 \
    --set fabricManager.credentialsSecret.name=fm-cred --set fabricManager.caSecret.name=fm-ca
  [ "$status" -eq 0 ]
  grep -q '^kind: NetworkPolicy' <<<"$output"
  grep -q '^kind: ServiceMonitor' <<<"$output"
  grep -q 'secretKeyRef: {name: fm-cred, key: password}' <<<"$output"
}

@test "values refused: the default namespace" {
  refused 'refusing to install into the "default" namespace' --namespace default \
    --set fabricManager.url=http://127.0.0.1:9
}

@test "values refused: hostd.port=70000" {
  refused "/hostd/port': maximum" --namespace "$NS" --set fabricManager.url=http://127.0.0.1:9 \
    --set hostd.port=70000
}

@test "values refused: controller.metricsPort=0" {
  refused "/controller/metricsPort': minimum" --namespace "$NS" \
    --set fabricManager.url=http://127.0.0.1:9 --set controller.metricsPort=0
}

@test "values refused: kubeletPlugin.httpPort=0" {
  refused "/kubeletPlugin/httpPort': 'oneOf' failed" --namespace "$NS" \
    --set fabricManager.url=http://127.0.0.1:9 --set kubeletPlugin.httpPort=0
}

@test "values refused: an unknown key" {
  refused "additional properties 'replica' not allowed" --namespace "$NS" \
    --set fabricManager.url=http://127.0.0.1:9 --set controller.replica=2
}

@test "values refused: a ServiceMonitor with nothing to scrape" {
  refused "serviceMonitor.enabled=true needs kubeletPlugin.httpPort" --namespace "$NS" \
    --set fabricManager.url=http://127.0.0.1:9 --set serviceMonitor.enabled=true \
    --set kubeletPlugin.httpPort=null --set controller.metricsPort=null
}

@test "values refused: no fabric manager URL" {
  refused "fabricManager.url is required" --namespace "$NS"
}

@test "values refused: a fabric manager URL that is not http(s)" {
  refused "/fabricManager/url': 'ftp://x' does not match" --namespace "$NS" \
    --set fabricManager.url=ftp://x
}

@test "values refused: a lease duration under 1 s" {
  refused "/controller/leaseDurationSeconds': minimum: got 0.5, want 1" --namespace "$NS" \
    --set fabricManager.url=http://127.0.0.1:9 --set-json controller.leaseDurationSeconds=0.5
}

@test "values refused: the old leaderElection block" {
  refused "additional properties 'leaderElection' not allowed" --namespace "$NS" \
    --set fabricManager.url=http://127.0.0.1:9 --set controller.leaderElection.enabled=true
}

@test "controller.leaseDurationSeconds reaches the controller (CXLKV_DRA_LEASE_DURATION)" {
  run helm_t --set controller.leaseDurationSeconds=42
  [ "$status" -eq 0 ]
  grep -qF '{name: CXLKV_DRA_LEASE_DURATION, value: "42"}' <<<"$output"
}

@test "values refused: qos=3" {
  refused "/controller/qos': value must be one of" --namespace "$NS" \
    --set fabricManager.url=http://127.0.0.1:9 --set controller.qos=3
}

@test "values refused: hostd maxSurge=1" {
  refused "maxSurge must be 0" --namespace "$NS" --set fabricManager.url=http://127.0.0.1:9 \
    --set hostd.updateStrategy.rollingUpdate.maxSurge=1
}

@test "values refused: coherence=software without hosts" {
  refused "coherence.mode=software needs coherence.softwareHosts" --namespace "$NS" \
    --set fabricManager.url=http://127.0.0.1:9 --set coherence.mode=software
}

@test "values refused: coherence=sw" {
  refused "/coherence/mode': value must be one of" --namespace "$NS" \
    --set fabricManager.url=http://127.0.0.1:9 --set coherence.mode=sw
}

# Non-coherent blades: the controller publishes the attribute, every hostd
# learns the write-partition order (docs/dra.md, "Non-coherent regions").
@test "coherence.mode=software reaches the controller and hostd" {
  run helm_t --set coherence.mode=software --set 'coherence.softwareHosts={node-a,node-b}'
  [ "$status" -eq 0 ]
  grep -qF '{name: CXLKV_DRA_COHERENCE, value: "software"}' <<<"$output"
  grep -qF '{name: CXLKV_SOFTWARE_HOSTS, value: "node-a,node-b"}' <<<"$output"
}

# test/e2e/dra-noncoherent.bats runs the same CEL on a real apiserver and scheduler.
@test "deviceClass.perCoherence=true: a class per coherence mode, selecting on the attribute" {
  helm_t --set deviceClass.perCoherence=true --show-only templates/deviceclass.yaml >"$W/dc.yaml"
  python3 "$ROOT/test/e2e/lib/helm_checks.py" per-coherence <"$W/dc.yaml"
}

@test "the default namespace allowed with allowDefaultNamespace=true" {
  run "$HELM" template "$REL" "$CHART" --namespace default --set allowDefaultNamespace=true \
    --set fabricManager.url=http://127.0.0.1:9
  echo "$output" | tail -5
  [ "$status" -eq 0 ]
}
