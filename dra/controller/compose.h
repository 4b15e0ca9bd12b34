// Copyright cxlkv authors.
//
// Compose and consumers: a claim owned here gets its region composed
// through the Composer, keyed by (claim UID, allocationTimestamp) in the
// region's tag (a region already tagged so is adopted: a controller killed
// after compose leaks nothing). Target hosts are the reserving pods' nodes
// (spec.nodeName, else status.nominatedNodeName) when all are known, else
// the allocation's node selector; the teardown parameters go into the
// cxlkv.dev/region annotation before status. A later consumer on another
// cabled host gets that host added to the region (Composer::AddHost). With a
// local pool the node's hostd materializes the region (hostd::Client).
// Controller::Rep::Compose, ConsumerNodes, AddConsumerHosts and
// LocalMaterialize are in compose.cc.
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_CONTROLLER_COMPOSE_H_
#define CXLKV_DRA_CONTROLLER_COMPOSE_H_

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "cxlkv/fabric/types.h"
#include "cxlkv/status.h"

namespace cxlkv::dra {

// The compose request for a claim's allocation (`ours`: the driver's
// results): size from the results' consumedCapacity, else the annotation
// cxlkv.dev/capacity-mib; QoS opt.qos, or with fixed devices the claim's
// cxlkv.dev/qos; the hosts `nodes` when `all_known` and all in the
// allocation's node selector, else the selector's; the share count from
// cxlkv.dev/share-count, else the number of hosts. *appliance and *blade:
// the pool the allocation names. InvalidArgument for a pool without '/', no
// size, a bad annotation.
Status BuildComposeRequest(const nlohmann::json& claim, const nlohmann::json& ours,
                           const ControllerOptions& opt, bool fixed_devices,
                           const std::vector<std::string>& nodes, bool all_known,
                           fabric::ComposeRequest* req, std::string* appliance, std::string* blade);

// A reserving pod's node: spec.nodeName, else status.nominatedNodeName (the
// scheduler writes it before PreBind); "" when neither.
std::string PodNode(const nlohmann::json& pod);
// A pod being deleted or finished: it will not prepare again.
bool PodLeaving(const nlohmann::json& pod);

// The consumers' nodes to add to the region: those it does not map that the
// allocation's node selector allows (all when it has none). *watch: a node
// in `starting` (a consumer not yet running) that the region maps already.
std::vector<std::string> HostsToAdd(const fabric::MemoryRegion& region,
                                    const std::vector<std::string>& nodes,
                                    const std::set<std::string>& starting,
                                    const std::vector<std::string>& selector, bool* watch);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_COMPOSE_H_
