#!/usr/bin/env bash
# test.sh: background lane
# Stage: the Helm chart deployments/helm/cxlkv through Helm itself (built from
# its Go module, test/e2e/helm-build.sh) and a real control plane
# (test/e2e/cluster.sh, 2 fake nodes, no kubelet). The checks are named bats
# tests: test/e2e/helm-render.bats (no cluster: lint, template, schema) and
# test/e2e/helm.bats (the cluster); this file builds what they need and runs
# them (scripts/lib/bats.sh):
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
# One test by name: scripts/test.sh --stage helm --filter 'quota refuses'
# (or bats -f ... test/e2e/helm.bats); a failing one prints the cluster state.
# Warm (Kubernetes and Helm cached, binaries built): about 60 s on 2 cores for
# 92 tests (23 without a cluster in about 5 s).
# In scripts/test.sh's background lane (after chartpods, beside vllm, model, ttft).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
source "$(dirname "$0")/../lib/bats.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0

echo "== helm: build Helm (cached) and the three binaries (their --help is checked)"
HELM=$(test/e2e/helm-build.sh) && export HELM &&
  cxlkv_build_main cxlkv-dra-controller cxlkv-dra-kubeletplugin cxlkv-hostd ||
  { failed=1; cxlkv_bats_close helm; exit 1; }
cxlkv_bats helm test/e2e/helm-render.bats test/e2e/helm.bats
cxlkv_bats_close helm
