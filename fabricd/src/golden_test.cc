// Copyright cxlkv authors.
//
// Golden files for everything the fabric room puts on the wire or on disk:
// the REST bodies (and so every state string) cxlkv-fabricd answers with for
// a fixed session, its fabric-state.json after it, the compose request the
// client sends, and the local composer's state file. The files under
// fabric/testdata/golden/ were written by the code before fabric/ was split
// into the client (fabric/) and the emulator (fabricd/); the split changed
// not one byte of them.
// Random memory ids and temp paths are replaced by stable names first.
//
// To rewrite the files after an intended wire change:
//   CXLKV_UPDATE_GOLDEN=1 build/bin/fabricd_unit_test --gtest_filter='FabricGolden*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "built_binary.h"
#include "cxlkv/fabric/http_client.h"
#include "cxlkv/fabric/json_codec.h"
#include "cxlkv/fabric/local_composer.h"
#include "cxlkv/fabricd/config.h"
#include "cxlkv/fabricd/server.h"

namespace cxlkv::fabric {
namespace {

const std::string kGoldenDir = testutil::SourceFile("fabric/testdata/golden");

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Compares `actual` with the golden file `name`, or rewrites the file when
// CXLKV_UPDATE_GOLDEN is set.
void ExpectGolden(const std::string& name, const std::string& actual) {
  const std::string path = kGoldenDir + "/" + name;
  if (std::getenv("CXLKV_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::string want = ReadAll(path);
  ASSERT_FALSE(want.empty()) << path << " is missing or empty";
  EXPECT_EQ(actual, want) << "differs from " << path;
}

// Replaces every occurrence of `from` in *s by `to`.
void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size())) {
    s->replace(at, from.size(), to);
  }
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/cxlkv-golden.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One cxlkv-fabricd in this process on a free loopback port.
class Emulator {
 public:
  explicit Emulator(const FabricConfig& config) {
    int port = 0;
    Status s = FabricServer::Open(config, "127.0.0.1", 0, &port, &server_);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!server_) return;
    base_ = "http://127.0.0.1:" + std::to_string(port);
    thread_ = std::thread([this] { (void)server_->Serve(); });
  }
  ~Emulator() {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  const std::string& base() const { return base_; }

 private:
  std::unique_ptr<FabricServer> server_;
  std::thread thread_;
  std::string base_;
};

class FabricGoldenTest : public ::testing::Test {
 protected:
  // Memory ids (random UUIDs) become MEMORY-1, MEMORY-2, ... in order of
  // compose; the temp dir becomes $TMP. Lists the server keeps ordered by
  // memory id (a std::map) are put in the order of those names, so the
  // UUIDs' random order does not show; everything else stays byte for byte.
  // A JSON text must be exactly what nlohmann::json::dump(indent) writes,
  // so the re-dump after renaming hides no formatting change.
  std::string Stable(std::string text, int indent) {
    for (const auto& [id, name] : ids_) ReplaceAll(&text, id, name);
    ReplaceAll(&text, tmp_.path(), "$TMP");
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) return text;  // not JSON: an error body from the parser, say
    EXPECT_EQ(j.dump(indent), text) << "not in nlohmann::json's own form";
    SortByMemoryName(&j);
    return j.dump(indent);
  }
  static std::string MemoryName(const nlohmann::json& e) {
    std::string key = e.is_object() ? e.value("id", e.value("uri", "")) : "";
    size_t at = key.find("MEMORY-");
    return at == std::string::npos ? "" : key.substr(at);
  }
  static void SortByMemoryName(nlohmann::json* j) {
    if (j->is_object()) {
      for (auto& [k, v] : j->items()) SortByMemoryName(&v);
    } else if (j->is_array()) {
      bool by_memory = !j->empty();
      for (auto& e : *j) {
        SortByMemoryName(&e);
        by_memory &= !MemoryName(e).empty();
      }
      if (by_memory) {
        std::stable_sort(j->begin(), j->end(), [](const auto& a, const auto& b) {
          return MemoryName(a) < MemoryName(b);
        });
      }
    }
  }
  void Name(const std::string& id) {
    if (!ids_.count(id)) ids_[id] = "MEMORY-" + std::to_string(ids_.size() + 1);
  }
  // Sends one request and appends it and its answer to the transcript.
  std::string Do(const std::string& method, const std::string& path, const std::string& body = "") {
    HttpResponse resp;
    Status s = HttpDo(HttpOptions{}, method, base_ + path, body, &resp);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (method == "POST" && resp.status == 201) {
      nlohmann::json j = nlohmann::json::parse(resp.body, nullptr, false);
      if (j.is_object() && j.contains("id") && j["id"].is_string()) Name(j["id"]);
    }
    transcript_ += "> " + method + " " + Stable(path, -1) + "\n";
    if (!body.empty()) transcript_ += "> " + body + "\n";
    transcript_ += "< " + std::to_string(resp.status) + "\n< " + Stable(resp.body, -1) + "\n\n";
    return resp.body;
  }
  std::string Id(int n) {
    for (const auto& [id, name] : ids_) {
      if (name == "MEMORY-" + std::to_string(n)) return id;
    }
    ADD_FAILURE() << "no memory id " << n;
    return "";
  }

  TempDir tmp_;
  std::string base_;
  std::map<std::string, std::string> ids_;
  std::string transcript_;
};

TEST_F(FabricGoldenTest, EmulatorRestBodiesAndStateFileAreUnchanged) {
  FabricConfig config;
  ASSERT_TRUE(ParseFabricConfig(R"(
stateDir: )" + tmp_.path() + R"(/state
backingDir: )" + tmp_.path() + R"(/backing
agentTimeoutMs: 500
appliances:
  - id: cma-0
    blades:
      - id: blade-0
        resourceBlockMiB: 16
        channels: 4
        blocksPerChannel: 2
        ports:
          - {id: P1, host: node-a, hostPort: port0}
          - {id: P2, host: node-b, hostPort: port0}
          - {id: P3}
hosts:
  - {id: node-a}
  - {id: node-b}
faults:
  failMaterializeHosts: [node-b]
)",
                                &config)
                  .ok());
  Emulator emu(config);
  base_ = emu.base();
  ASSERT_FALSE(base_.empty());
  const std::string blade = "/cfm/v1/appliances/cma-0/blades/blade-0";

  Do("GET", "/cfm/v1");
  Do("GET", "/cfm/v1/appliances");
  Do("GET", "/cfm/v1/appliances/cma-0");
  Do("GET", "/cfm/v1/appliances/cma-0/blades");
  Do("GET", blade);
  Do("GET", blade + "/ports");
  Do("GET", blade + "/ports/P1");
  Do("GET", blade + "/resources");
  Do("GET", "/cfm/v1/hosts");
  Do("GET", "/cfm/v1/hosts/node-a");
  // Shared by two hosts: node-a has no agent (NoAgent), node-b's fails.
  Do("POST", blade + "/memory",
     R"({"memorySizeMiB": 40, "QoS": 2, "shareCount": 2, "claimUid": "golden-claim"})");
  // One port, CFM's own form.
  Do("POST", blade + "/memory", R"({"memorySizeMiB": 16, "QoS": 1, "port": "P1"})");
  Do("GET", blade + "/memory");
  Do("GET", blade + "/memory/" + Id(1));
  Do("GET", blade);
  Do("GET", "/cfm/v1/hosts/node-a/memory");
  Do("GET", "/cxlkv/v1/hosts/node-a/regions");
  Do("PUT", "/cxlkv/v1/hosts/node-a/regions/" + Id(1) + "/materialization",
     R"({"materialization": "Materialized", "device": "/dev/golden0"})");
  Do("PATCH", blade + "/memory/" + Id(2), R"({"Port": "P2", "Operation": "assign"})");
  Do("PATCH", blade + "/memory/" + Id(2), R"({"port": "P2", "operation": "assign"})");
  // Refusals: schema, capacity, unknown ids.
  Do("POST", blade + "/memory", R"({"memorySizeMiB": 16, "QoS": 3})");
  Do("POST", blade + "/memory", R"({"memorySizeMiB": 4096, "QoS": 1})");
  Do("POST", blade + "/memory", "{not json");
  Do("GET", blade + "/memory/no-such-region");
  Do("GET", "/cfm/v1/appliances/no-such-appliance");
  Do("GET", "/cxlkv/v1/faults");
  ExpectGolden("fabric-state.composed.json",
               Stable(ReadAll(tmp_.path() + "/state/fabric-state.json"), 2));

  Do("DELETE", blade + "/memory/" + Id(2));
  Do("POST", "/cxlkv/v1/power-cycle", R"({"applianceId": "cma-0", "bladeId": "blade-0"})");
  Do("GET", blade + "/memory");
  ExpectGolden("fabric-state.after-power-cycle.json",
               Stable(ReadAll(tmp_.path() + "/state/fabric-state.json"), 2));
  ExpectGolden("fabricd-session.txt", transcript_);
}

TEST_F(FabricGoldenTest, ClientComposeRequestIsUnchanged) {
  ComposeRequest req;
  req.size_mib = 64;
  req.qos = 2;
  req.share_count = 2;
  req.candidate_hosts = {"node-a", "node-b"};
  req.candidate_ports = {"P2"};
  req.claim_uid = "golden-claim";
  std::string body = ComposeRequestToJson(req).dump(2) + "\n";
  ComposeRequest plain;
  plain.size_mib = 16;
  plain.port = "P1";
  body += ComposeRequestToJson(plain).dump(2) + "\n";
  ExpectGolden("client-compose-request.json", body);
}

TEST_F(FabricGoldenTest, LocalComposerStateFileIsUnchanged) {
  LocalPoolOptions opt;
  opt.name = "shm";
  opt.dir = tmp_.path() + "/pool";
  opt.capacity_mib = 64;
  opt.block_mib = 2;
  opt.node_id = "gpu-node-1";
  opt.state_dir = tmp_.path() + "/state";
  std::unique_ptr<LocalComposer> c;
  ASSERT_TRUE(LocalComposer::Open(opt, &c).ok());
  ComposeRequest req;
  req.size_mib = 5;
  req.qos = 1;
  req.claim_uid = "golden-claim";
  ComposeResult a, b;
  ASSERT_TRUE(c->Compose("local", "shm", req, &a).ok());
  Name(a.region.id);
  req.size_mib = 8;
  req.claim_uid = "";
  ASSERT_TRUE(c->Compose("local", "shm", req, &b).ok());
  Name(b.region.id);
  std::string text = Stable(ReadAll(opt.state_dir + "/local-composer-state.json"), 2) + "\n";
  text += Stable(RegionToJson(a.region).dump(2), 2) + "\n";
  ExpectGolden("local-composer-state.json", text);
}

}  // namespace
}  // namespace cxlkv::fabric
