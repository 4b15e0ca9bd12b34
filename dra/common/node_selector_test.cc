// Copyright cxlkv authors.
//
// NodeSelector evaluation as the scheduler defines it (terms OR-ed,
// requirements AND-ed, an empty term matches nothing) and the host names a
// multi-node allocation names.
#include "common/node_selector.h"

#include <gtest/gtest.h>

namespace cxlkv::dra {
namespace {

using nlohmann::json;

json Node(const std::string& name, json labels) {
  return {{"metadata", {{"name", name}, {"labels", labels}}}};
}

bool Match(const json& sel, const json& node) {
  bool m = false;
  Status s = NodeSelectorMatches(sel, node, &m);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return m;
}

const json kBlade = json::parse(R"({"nodeSelectorTerms": [{"matchExpressions": [
  {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a", "node-b"]}]}]})");

TEST(NodeSelectorTest, HostnameInMatchesOnlyTheCabledHosts) {
  EXPECT_TRUE(Match(kBlade, Node("node-a", {{"kubernetes.io/hostname", "node-a"}})));
  EXPECT_TRUE(Match(kBlade, Node("node-b", {{"kubernetes.io/hostname", "node-b"}})));
  EXPECT_FALSE(Match(kBlade, Node("node-c", {{"kubernetes.io/hostname", "node-c"}})));
  // The label decides, not the name.
  EXPECT_FALSE(Match(kBlade, Node("node-a", json::object())));
}

TEST(NodeSelectorTest, MatchFieldsOnMetadataName) {
  json sel = json::parse(R"({"nodeSelectorTerms": [{"matchFields": [
    {"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]})");
  EXPECT_TRUE(Match(sel, Node("node-a", json::object())));
  EXPECT_FALSE(Match(sel, Node("node-b", json::object())));
}

TEST(NodeSelectorTest, TermsAreOredAndRequirementsAnded) {
  json sel = json::parse(R"({"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]},
                          {"key": "gpu", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1", "z2"]},
                          {"key": "cores", "operator": "Gt", "values": ["8"]}]}]})");
  EXPECT_TRUE(Match(sel, Node("n", {{"zone", "z1"}, {"gpu", "yes"}})));
  EXPECT_FALSE(Match(sel, Node("n", {{"zone", "z1"}})));
  EXPECT_TRUE(Match(sel, Node("n", {{"zone", "z3"}, {"cores", "16"}})));
  EXPECT_FALSE(Match(sel, Node("n", {{"zone", "z3"}, {"cores", "4"}})));
  EXPECT_FALSE(Match(sel, Node("n", {{"zone", "z3"}, {"cores", "many"}})));
  EXPECT_FALSE(Match(sel, Node("n", {{"zone", "z2"}, {"cores", "16"}})));
}

TEST(NodeSelectorTest, EmptySelectorsAndTermsMatchNothing) {
  EXPECT_FALSE(Match(json::object(), Node("n", json::object())));
  EXPECT_FALSE(Match(json::parse(R"({"nodeSelectorTerms": [{}]})"), Node("n", json::object())));
}

TEST(NodeSelectorTest, BadSelectorsAreInvalidArgument) {
  bool m = true;
  EXPECT_TRUE(NodeSelectorMatches(json::parse(R"({"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "k", "operator": "Near", "values": ["x"]}]}]})"),
                                  Node("n", {{"k", "x"}}), &m)
                  .IsInvalidArgument());
  EXPECT_FALSE(m);
  EXPECT_TRUE(NodeSelectorMatches(json::parse(R"({"nodeSelectorTerms": [{"matchFields": [
    {"key": "spec.unschedulable", "operator": "In", "values": ["x"]}]}]})"),
                                  Node("n", json::object()), &m)
                  .IsInvalidArgument());
  EXPECT_TRUE(NodeSelectorMatches(json::parse(R"({"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "k", "operator": "Gt", "values": ["1", "2"]}]}]})"),
                                  Node("n", {{"k", "3"}}), &m)
                  .IsInvalidArgument());
  EXPECT_TRUE(NodeSelectorMatches(json("x"), Node("n", json::object()), &m).IsInvalidArgument());
}

TEST(NodeSelectorTest, SelectorHostnamesListsNamedHostsOnce) {
  json sel = json::parse(R"({"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                           "values": ["node-a", "node-b"]}]},
    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b", "node-c"]}]},
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]})");
  EXPECT_EQ(SelectorHostnames(sel), (std::vector<std::string>{"node-a", "node-b", "node-c"}));
  EXPECT_TRUE(SelectorHostnames(json::object()).empty());
}

}  // namespace
}  // namespace cxlkv::dra
