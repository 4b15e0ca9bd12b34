// Copyright cxlkv authors.
//
// kube_lease_holder (test helper): contends for a Lease and prints "leading"
// once it holds it, then keeps renewing until killed. The leader-election
// e2e test SIGKILLs it to simulate a crashed leader.
//
//   kube_lease_holder <kubeconfig> <namespace> <lease> <identity> <lease_ms> <renew_ms> <retry_ms>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cxlkv/kube/leader_election.h"

using namespace cxlkv::kube;

int main(int argc, char** argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: %s kubeconfig ns lease identity lease_ms renew_ms retry_ms\n", argv[0]);
    return 2;
  }
  Config config;
  Status s = LoadKubeconfig(argv[1], &config);
  std::unique_ptr<Client> client;
  if (s.ok()) s = Client::New(config, ClientOptions{}, &client);
  if (!s.ok()) {
    fprintf(stderr, "lease holder: %s\n", s.ToString().c_str());
    return 1;
  }
  LeaderElectionOptions o;
  o.ns = argv[2];
  o.lease_name = argv[3];
  o.identity = argv[4];
  o.lease_duration = std::chrono::milliseconds(atol(argv[5]));
  o.renew_deadline = std::chrono::milliseconds(atol(argv[6]));
  o.retry_period = std::chrono::milliseconds(atol(argv[7]));
  o.on_started_leading = [] {
    printf("leading\n");
    fflush(stdout);
  };
  std::unique_ptr<LeaderElector> le;
  if (!(s = LeaderElector::New(client.get(), o, &le)).ok()) {
    fprintf(stderr, "lease holder: %s\n", s.ToString().c_str());
    return 1;
  }
  le->Start();
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}
