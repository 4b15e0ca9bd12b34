// Copyright cxlkv authors.
//
// Multi-process scenarios: a real cxlkv-fabricd and two real cxlkv-hostd
// processes ("node-a", "node-b", separate CDI and state dirs) over loopback
// HTTP. After every scenario the fabric manager's listing, each agent's
// listing and each CDI directory must agree.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "built_binary.h"
#include "cxlkv/base/size.h"
#include "cxlkv/fabric/client.h"
#include "cxlkv/region.h"

namespace cxlkv {
namespace {

using nlohmann::json;

// A port for one of this test's daemons, reserved for the test process's
// life: the socket bound here (SO_REUSEADDR, never listening) stays open, so
// a bind to port 0 elsewhere on the machine (a test run beside this one)
// never picks it, while our daemons, whose listeners set SO_REUSEADDR too
// (base::ListenSocketOptions), bind and listen on it, restarts included.
// Closed at once, another test's daemon could take it first, and the daemon
// started here then fails with "address already in use".
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int yes = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  fcntl(fd, F_SETFD, FD_CLOEXEC);  // held here, not by the daemons
  return ntohs(a.sin_port);
}

std::string Slurp(const std::string& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

std::set<std::string> JsonFiles(const std::string& dir) {
  std::set<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.substr(n.size() - 5) == ".json") out.insert(n.substr(0, n.size() - 5));
    }
    closedir(d);
  }
  return out;
}

// Sends `request` (raw HTTP/1.1 text, which should say Connection: close)
// to 127.0.0.1:port and reads the answer to its end: the HTTP status (0 when
// none came), the Allow header's value, and the body parsed as JSON (null
// when it is not). Raw, because an HTTP client library adds the
// Content-Length header whose absence some of these tests are about.
struct RawAnswer {
  int status = 0;
  std::string allow;
  json body;
};
RawAnswer RawHttp(int port, const std::string& request) {
  RawAnswer out;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
    if (fd >= 0) close(fd);
    return out;
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) text.append(buf, size_t(n));
  close(fd);
  if (text.rfind("HTTP/1.1 ", 0) == 0) out.status = std::atoi(text.c_str() + 9);
  const size_t end = text.find("\r\n\r\n");
  if (size_t at = text.find("\r\nAllow: "); at != std::string::npos && at < end) {
    out.allow = text.substr(at + 9, text.find("\r\n", at + 2) - at - 9);
  }
  if (end != std::string::npos) out.body = json::parse(text.substr(end + 4), nullptr, false);
  return out;
}

// Sends each (method, path) without a body or Content-Length, all at once,
// and returns the answers in order. At once: the HTTP layer (cpp-httplib
// 0.11.4) waits its read timeout (5 s) for a body that never comes before it
// refuses such a request, so one after another they took 5 s each.
std::vector<RawAnswer> Bodyless(int port,
                                const std::vector<std::pair<std::string, std::string>>& requests) {
  std::vector<RawAnswer> out(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] {
      out[i] = RawHttp(port, requests[i].first + " " + requests[i].second +
                                 " HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

struct Proc {
  pid_t pid = -1;
  std::string log;
};

// Starts argv with stdout+stderr to `log`; waits for its "listening" line.
Proc Start(const std::vector<std::string>& argv, const std::string& log) {
  Proc p;
  p.log = log;
  // Truncate before forking: a restart must not see the previous process's
  // "listening" line.
  std::ofstream(log, std::ios::trunc).close();
  p.pid = fork();
  if (p.pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  // Readiness wait, bounded; no assertion is made on how long it takes.
  for (int i = 0; i < 300; ++i) {
    if (Slurp(log).find("listening ") != std::string::npos) return p;
    int status;
    if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
      ADD_FAILURE() << argv[0] << " exited early:\n" << Slurp(log);
      p.pid = -1;
      return p;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << argv[0] << " did not start:\n" << Slurp(log);
  return p;
}

int Stop(Proc& p, int sig = SIGTERM) {
  if (p.pid <= 0) return -1;
  kill(p.pid, sig);
  int status = 0;
  waitpid(p.pid, &status, 0);
  p.pid = -1;
  return status;
}

class FabricScenarioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cxlkv-scenario.XXXXXX";
    root_ = mkdtemp(tmpl);
    fport_ = FreePort();
    url_ = "http://127.0.0.1:" + std::to_string(fport_);
    for (const char* h : {"node-a", "node-b"}) StartHost(h);
    WriteConfig("");
    StartFabric();
    fabric::ClientOptions o;
    o.base_url = url_;
    ASSERT_TRUE(fabric::FabricClient::Open(o, &client_).ok());
  }
  void TearDown() override {
    Stop(fabricd_);
    for (auto& [h, p] : hostd_) Stop(p);
    if (!HasFailure()) std::system(("rm -rf " + root_).c_str());
  }
  void StartHost(const std::string& h) {
    std::string d = root_ + "/" + h;
    std::vector<std::string> argv = {cxlkv::testutil::BuiltBinary("cxlkv-hostd"),
                                     "--host-id",
                                     h,
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(HostPort(h)),
                                     "--fabric",
                                     url_,
                                     "--cdi-dir",
                                     d + "/cdi",
                                     "--state-dir",
                                     d + "/state",
                                     "--dev-dir",
                                     d + "/dev",
                                     "--container-dir",
                                     "",
                                     "--resync-interval",
                                     "0",
                                     "--allowed-backing-dir",
                                     root_ + "/backing"};
    argv.insert(argv.end(), host_args_.begin(), host_args_.end());
    hostd_[h] = Start(argv, d + ".log");
  }
  int HostPort(const std::string& h) {
    if (!hport_.count(h)) hport_[h] = FreePort();
    return hport_[h];
  }
  void WriteConfig(const std::string& extra) {
    std::ofstream(root_ + "/fabricd.yaml")
        << "stateDir: " << root_ << "/fabric-state\nbackingDir: " << root_ << "/backing\n"
        << "appliances:\n  - id: cma-0\n    blades:\n      - id: blade-0\n"
        << "        resourceBlockMiB: 16\n        channels: 4\n        blocksPerChannel: 2\n"
        << "        ports:\n          - {id: P1, host: node-a, hostPort: port0}\n"
        << "          - {id: P2, host: node-b, hostPort: port0}\n"
        << "hosts:\n  - {id: node-a, agent: \"http://127.0.0.1:" << HostPort("node-a") << "\"}\n"
        << "  - {id: node-b, agent: \"http://127.0.0.1:" << HostPort("node-b") << "\"}\n"
        << extra;
  }
  void StartFabric() {
    fabricd_ = Start({cxlkv::testutil::BuiltBinary("cxlkv-fabricd"), "--config",
                      root_ + "/fabricd.yaml", "--listen", "127.0.0.1:" + std::to_string(fport_)},
                     root_ + "/fabricd." + std::to_string(++fabric_starts_) + ".log");
  }
  json Call(const std::string& method, const std::string& path, const json& body = nullptr,
            long* code = nullptr, const std::string& base = "") {
    fabric::ClientOptions o;
    o.base_url = base.empty() ? url_ : base;
    std::unique_ptr<fabric::FabricClient> c;
    EXPECT_TRUE(fabric::FabricClient::Open(o, &c).ok());
    long status = 0;
    std::string out;
    Status s = c->Call(method, path, body.is_null() ? "" : body.dump(), &status, &out);
    if (code) *code = s.ok() ? status : -1;
    if (!s.ok()) return nullptr;
    return out.empty() ? json() : json::parse(out, nullptr, false);
  }
  std::string HostUrl(const std::string& h) {
    return "http://127.0.0.1:" + std::to_string(HostPort(h));
  }
  void Resync(const std::string& h) {
    long code = 0;
    Call("POST", "/cxlkv/v1/resync", nullptr, &code, HostUrl(h));
    EXPECT_EQ(code, 200) << "resync " << h;
  }
  int64_t AllocatedMiB() {
    json b = Call("GET", "/cfm/v1/appliances/cma-0/blades/blade-0");
    return b.value("totalMemoryAllocatedMiB", int64_t{0});
  }
  // The fabric manager's regions for each host == the agent's == the CDI dir.
  void ExpectAgreement(const std::set<std::string>& want_a, const std::set<std::string>& want_b) {
    for (const auto& [h, want] :
         std::map<std::string, std::set<std::string>>{{"node-a", want_a}, {"node-b", want_b}}) {
      std::set<std::string> fab, agent;
      json fr = Call("GET", "/cxlkv/v1/hosts/" + h + "/regions");
      for (const auto& r : fr["regions"]) fab.insert(r["id"].get<std::string>());
      json ar = Call("GET", "/cxlkv/v1/regions", nullptr, nullptr, HostUrl(h));
      for (const auto& r : ar["regions"]) agent.insert(r["allocationId"].get<std::string>());
      EXPECT_EQ(fab, want) << h << ": fabric manager listing";
      EXPECT_EQ(agent, want) << h << ": agent listing";
      EXPECT_EQ(JsonFiles(root_ + "/" + h + "/cdi"), want) << h << ": CDI specs";
    }
  }
  fabric::MemoryRegion Compose(int share, int64_t mib, bool* partial = nullptr) {
    fabric::ComposeRequest req;
    req.size_mib = mib;
    req.qos = 2;
    req.share_count = share;
    req.claim_uid = "claim-1";
    fabric::ComposeResult r;
    Status s = client_->Compose("cma-0", "blade-0", req, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (partial) *partial = r.partial;
    return r.region;
  }

  std::string root_, url_;
  int fport_ = 0, fabric_starts_ = 0;
  std::map<std::string, int> hport_;
  std::map<std::string, Proc> hostd_;
  std::vector<std::string> host_args_;  // more flags for every StartHost
  Proc fabricd_;
  std::unique_ptr<fabric::FabricClient> client_;
};

TEST_F(FabricScenarioTest, ShareCountTwoMapsTheSameBytesOnBothHostsAndFreeCleansUp) {
  fabric::MemoryRegion r = Compose(2, 40);
  ASSERT_EQ(r.mappings.size(), 2u);
  EXPECT_EQ(r.size_mib, 64) << "40 MiB at QoS 2 rounds up to 2 x 2 x 16 MiB";
  for (const auto& m : r.mappings)
    EXPECT_EQ(m.materialization, fabric::Materialization::kMaterialized) << m.error;
  ExpectAgreement({r.id}, {r.id});
  // Same bytes: write through node-a's device, read through node-b's.
  std::string pa = root_ + "/node-a/dev/" + r.id, pb = root_ + "/node-b/dev/" + r.id;
  int fa = open(pa.c_str(), O_RDWR), fb = open(pb.c_str(), O_RDWR);
  ASSERT_GE(fa, 0);
  ASSERT_GE(fb, 0);
  auto* a = static_cast<char*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fa, 0));
  auto* b = static_cast<char*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fb, 0));
  std::strcpy(a + 100, "stored by node-a");
  EXPECT_STREQ(b + 100, "stored by node-a");
  munmap(a, 4096);
  munmap(b, 4096);
  close(fa);
  close(fb);
  json spec = json::parse(Slurp(root_ + "/node-b/cdi/" + r.id + ".json"));
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["env"][0], "CXL_DAX_DEVICE=" + pb);
  EXPECT_EQ(AllocatedMiB(), 64);

  ASSERT_TRUE(client_->Free("cma-0", "blade-0", r.id).ok());
  ExpectAgreement({}, {});
  struct stat st;
  EXPECT_NE(lstat(pa.c_str(), &st), 0);
  EXPECT_NE(lstat(pb.c_str(), &st), 0);
  EXPECT_TRUE(JsonFiles(root_ + "/backing").empty());
  EXPECT_EQ(AllocatedMiB(), 0) << "capacity is back";
  EXPECT_TRUE(client_->Free("cma-0", "blade-0", r.id).IsNotFound());
}

// The DRA plugin's release of one host (its last claim there unprepared):
// the manager unassigns that host's port, its device and spec go, the other
// host keeps the region and its bytes; a resync does not bring it back; add-host
// (the controller's, on reuse) maps the same bytes there again. Releasing
// twice, or a region this host never had, is OK.
// The environment of a region's CDI spec on `host`, as NAME -> value.
std::map<std::string, std::string> SpecEnv(const std::string& spec_path) {
  std::map<std::string, std::string> env;
  json spec = json::parse(Slurp(spec_path));
  for (const std::string e : spec["devices"][0]["containerEdits"]["env"]) {
    env[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
  }
  return env;
}

// A workload that opens its region from the CDI environment alone, as a pod
// would (docs/dra.md, "Non-coherent regions").
Status OpenFromEnv(std::map<std::string, std::string> env, std::unique_ptr<Region>* out) {
  RegionOptions o;
  o.prefault = Prefault::kNone;
  CXLKV_RETURN_IF_ERROR(base::ParseSize(env["CXL_DAX_SIZE"], &o.size));
  CXLKV_RETURN_IF_ERROR(base::ParseSize(env["CXL_DAX_OFFSET"], &o.offset));
  if (env["CXL_COHERENCE"] == "software") {
    o.config.coherence = CoherenceMode::kSoftware;
    o.config.software_partitions = std::stoul(env["CXL_SOFTWARE_PARTITIONS"]);
    o.software_partition = std::stoi(env["CXL_SOFTWARE_PARTITION"]);
  }
  o.config.slot_size = 64 << 10;
  return Region::Open(env["CXL_DAX_DEVICE"], o, out);
}

// Hosts without hardware coherence: each hostd gives its node's write
// partition (its place in --software-hosts) to the CDI spec, and two
// workloads that open the shared region from their spec's environment alone
// share it in coherence=software: node-b reads what node-a stored.
TEST_F(FabricScenarioTest, NonCoherentHostsSpecsGiveEachNodeItsPartitionAndTheRegionIsShared) {
  host_args_ = {"--coherence", "software", "--software-hosts", "node-a,node-b"};
  for (const char* h : {"node-a", "node-b"}) {
    Stop(hostd_[h]);
    StartHost(h);
  }
  fabric::MemoryRegion r = Compose(2, 64);
  ASSERT_EQ(r.mappings.size(), 2u);
  auto ea = SpecEnv(root_ + "/node-a/cdi/" + r.id + ".json");
  auto eb = SpecEnv(root_ + "/node-b/cdi/" + r.id + ".json");
  EXPECT_EQ(ea["CXL_COHERENCE"], "software");
  EXPECT_EQ(ea["CXL_SOFTWARE_PARTITIONS"], "2");
  EXPECT_EQ(ea["CXL_SOFTWARE_PARTITION"], "0");
  EXPECT_EQ(eb["CXL_COHERENCE"], "software");
  EXPECT_EQ(eb["CXL_SOFTWARE_PARTITION"], "1");
  std::unique_ptr<Region> a, b;
  Status s = OpenFromEnv(ea, &a);  // partition 0 formats
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = OpenFromEnv(eb, &b);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(a->info().layout_version, 6u);
  EXPECT_EQ(b->info().participant, 1);
  NamespaceId na, nb;
  ASSERT_TRUE(a->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, &na).ok());
  ASSERT_TRUE(b->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, &nb).ok());
  std::string data(40000, 'k');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(a->Store(na, BlockKey::FromId(42), data.data(), data.size()).ok());
  std::string got(64 << 10, 0);
  LoadInfo info;
  s = b->Load(nb, BlockKey::FromId(42), got.data(), got.size(), {}, &info);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got.substr(0, info.len), data);
  EXPECT_TRUE(info.cross_participant) << "stored by node-a's partition";
  a.reset();
  b.reset();
  ASSERT_TRUE(client_->Free("cma-0", "blade-0", r.id).ok());
}

TEST_F(FabricScenarioTest, ReleaseUnassignsOneHostAndAddHostMapsItBack) {
  fabric::MemoryRegion r = Compose(2, 40);
  ASSERT_EQ(r.mappings.size(), 2u);
  ExpectAgreement({r.id}, {r.id});
  std::string pa = root_ + "/node-a/dev/" + r.id;
  auto write_or_read = [](const std::string& path, const char* write, std::string* read) {
    int fd = open(path.c_str(), O_RDWR);
    if (fd < 0) return false;
    auto* m = static_cast<char*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
    if (m == MAP_FAILED) return false;
    if (write) std::strcpy(m + 200, write);
    if (read) *read = std::string(m + 200);
    munmap(m, 4096);
    return true;
  };
  ASSERT_TRUE(write_or_read(pa, "kept across a release", nullptr));

  long code = 0;
  json out =
      Call("POST", "/cxlkv/v1/regions/" + r.id + "/release", nullptr, &code, HostUrl("node-b"));
  ASSERT_EQ(code, 200) << out.dump();
  EXPECT_TRUE(out.value("unassigned", false)) << out.dump();
  EXPECT_TRUE(out.value("removed", false)) << out.dump();
  ExpectAgreement({r.id}, {});
  fabric::MemoryRegion now;
  ASSERT_TRUE(client_->Get("cma-0", "blade-0", r.id, &now).ok());
  ASSERT_EQ(now.mappings.size(), 1u);
  EXPECT_EQ(now.mappings[0].host_id, "node-a");
  Resync("node-b");
  ExpectAgreement({r.id}, {});
  out = Call("POST", "/cxlkv/v1/regions/" + r.id + "/release", nullptr, &code, HostUrl("node-b"));
  EXPECT_EQ(code, 200) << "a second release is a no-op";
  EXPECT_FALSE(out.value("unassigned", true)) << out.dump();
  Call("POST", "/cxlkv/v1/regions/no-such-region/release", nullptr, &code, HostUrl("node-b"));
  EXPECT_EQ(code, 200) << "a region never here: nothing to do";
  Call("POST", "/cxlkv/v1/regions/.hidden/release", nullptr, &code, HostUrl("node-b"));
  EXPECT_EQ(code, 400) << "a bad id is refused";

  ASSERT_TRUE(client_->AddHost("cma-0", "blade-0", r.id, "node-b", &now).ok());
  ExpectAgreement({r.id}, {r.id});
  std::string back;
  ASSERT_TRUE(write_or_read(root_ + "/node-b/dev/" + r.id, nullptr, &back));
  EXPECT_EQ(back, "kept across a release") << "node-b maps the same bytes again";
  ASSERT_TRUE(client_->Free("cma-0", "blade-0", r.id).ok());
  ExpectAgreement({}, {});
}

// The release race (docs/fabric.md, "Assignment epochs"): node-b's release
// of its assignment (epoch e1) is held on its way to the manager (the
// emulator delays that one PATCH) while a retry of the same release goes
// through and the controller's add-host maps node-b again (epoch e2 > e1).
// When the held unassign resumes it names e1 and is refused (409, counted):
// node-b stays mapped, its device and CDI spec stay, and it reads the bytes.
TEST_F(FabricScenarioTest, ReleaseHeldPastAReassignIsRefusedAndTheHostStaysMapped) {
  fabric::MemoryRegion r = Compose(2, 40);
  ASSERT_EQ(r.mappings.size(), 2u);
  uint64_t e1 = 0;
  for (const auto& m : r.mappings) {
    EXPECT_GT(m.assign_epoch, 0u) << m.host_id << ": every mapping has an epoch";
    if (m.host_id == "node-b") e1 = m.assign_epoch;
  }
  EXPECT_GT(e1, 0u);  // not fatal: against a manager without epochs the race below still runs
  const std::string region_path = "/cfm/v1/appliances/cma-0/blades/blade-0/memory/" + r.id;
  long code = 0;
  Call("PUT", "/cxlkv/v1/faults",
       {{"rules", {{{"method", "PATCH"}, {"path", region_path}, {"delayMs", 3000}, {"count", 1}}}}},
       &code);
  ASSERT_EQ(code, 200);
  const json release = {{"assignEpoch", e1}};
  long held_code = 0;
  json held_out;
  std::thread held([&] {
    held_out = Call("POST", "/cxlkv/v1/regions/" + r.id + "/release", release, &held_code,
                    HostUrl("node-b"));
  });
  // The held request has reached the manager once the rule's count is used.
  bool holding = false;
  for (int i = 0; i < 200 && !holding; ++i) {
    json f = Call("GET", "/cxlkv/v1/faults");
    holding = f.is_object() && f["rules"].size() == 1 && f["rules"][0].value("count", 1) == 0;
    if (!holding) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(holding) << "the held unassign never reached the manager";
  // The retry (the plugin's, after its 3 s timeout) goes through.
  json out =
      Call("POST", "/cxlkv/v1/regions/" + r.id + "/release", release, &code, HostUrl("node-b"));
  ASSERT_EQ(code, 200) << out.dump();
  EXPECT_TRUE(out.value("unassigned", false)) << out.dump();
  ExpectAgreement({r.id}, {});
  // The controller's add-host for the next consumer on node-b.
  fabric::MemoryRegion now;
  ASSERT_TRUE(client_->AddHost("cma-0", "blade-0", r.id, "node-b", &now).ok());
  uint64_t e2 = 0;
  for (const auto& m : now.mappings) {
    if (m.host_id == "node-b") e2 = m.assign_epoch;
  }
  EXPECT_GT(e2, e1) << "a new assignment takes a newer epoch";
  EXPECT_EQ(now.assign_epoch, e2);
  ExpectAgreement({r.id}, {r.id});
  held.join();
  EXPECT_EQ(held_code, 409) << "the held unassign of epoch " << e1
                            << " is refused: " << held_out.dump();
  EXPECT_NE(held_out.dump().find("superseded"), std::string::npos) << held_out.dump();
  ASSERT_TRUE(client_->Get("cma-0", "blade-0", r.id, &now).ok());
  std::set<std::string> hosts;
  for (const auto& m : now.mappings) hosts.insert(m.host_id);
  EXPECT_EQ(hosts, (std::set<std::string>{"node-a", "node-b"})) << "node-b stays mapped";
  ExpectAgreement({r.id}, {r.id});
  json st = Call("GET", "/cxlkv/v1/stats");
  EXPECT_EQ(st.value("staleUnassignsRefused", 0), 1) << st.dump();
  // The agent's device serves the new assignment; a later release of e2 goes.
  json dev = Call("GET", "/cxlkv/v1/regions", nullptr, nullptr, HostUrl("node-b"));
  ASSERT_EQ(dev["regions"].size(), 1u) << dev.dump();
  EXPECT_EQ(dev["regions"][0].value("assignEpoch", uint64_t{0}), e2) << dev.dump();
  out = Call("POST", "/cxlkv/v1/regions/" + r.id + "/release", {{"assignEpoch", e2}}, &code,
             HostUrl("node-b"));
  EXPECT_EQ(code, 200) << out.dump();
  ExpectAgreement({r.id}, {});
  ASSERT_TRUE(client_->Free("cma-0", "blade-0", r.id).ok());
  ExpectAgreement({}, {});
}

// Clients without the extension: a CFM PATCH names no epoch and is applied
// as CFM applies it (counted); an epoch the port never had is a 400; a stale
// materialization report is a 409; a release without an epoch (an older
// plugin) names the epoch the manager lists, so it still cannot undo a
// later assignment.
TEST_F(FabricScenarioTest, UnassignWithoutAnEpochIsAppliedAndBadEpochsAreRefused) {
  fabric::MemoryRegion r = Compose(2, 40);
  ASSERT_EQ(r.mappings.size(), 2u);
  const std::string path = "/cfm/v1/appliances/cma-0/blades/blade-0/memory/" + r.id;
  long code = 0;
  json out =
      Call("PATCH", path, {{"Port", "P2"}, {"Operation", "unassign"}, {"assignEpoch", 99}}, &code);
  EXPECT_EQ(code, 400) << out.dump();
  EXPECT_NE(out.dump().find("never issued"), std::string::npos) << out.dump();
  for (const json& bad : {json("1"), json(-1), json(0), json(1.5)}) {
    Call("PATCH", path, {{"Port", "P2"}, {"Operation", "unassign"}, {"assignEpoch", bad}}, &code);
    EXPECT_EQ(code, 400) << "assignEpoch " << bad.dump();
  }
  Call("PATCH", path, {{"Port", "P2"}, {"Operation", "assign"}, {"assignEpoch", 1}}, &code);
  EXPECT_EQ(code, 400) << "assignEpoch goes with unassign only";
  ExpectAgreement({r.id}, {r.id});
  // A stale report (an epoch node-b's mapping does not have).
  out = Call("PUT", "/cxlkv/v1/hosts/node-b/regions/" + r.id + "/materialization",
             {{"materialization", "Failed"}, {"error", "old"}, {"assignEpoch", 99}}, &code);
  EXPECT_EQ(code, 409) << out.dump();
  out = Call("PATCH", path, {{"Port", "P2"}, {"Operation", "unassign"}}, &code);
  ASSERT_EQ(code, 200) << out.dump();
  ExpectAgreement({r.id}, {});
  json st = Call("GET", "/cxlkv/v1/stats");
  EXPECT_EQ(st.value("unassignsWithoutEpoch", 0), 1) << st.dump();
  EXPECT_EQ(st.value("staleReportsRefused", 0), 1) << st.dump();
  EXPECT_EQ(st.value("staleUnassignsRefused", 0), 0) << st.dump();
  // An older plugin's release (no epoch) of node-a, held past a re-assign.
  Call("PUT", "/cxlkv/v1/faults",
       {{"rules", {{{"method", "PATCH"}, {"path", path}, {"delayMs", 2000}, {"count", 1}}}}},
       &code);
  long held_code = 0;
  std::thread held([&] {
    Call("POST", "/cxlkv/v1/regions/" + r.id + "/release", nullptr, &held_code, HostUrl("node-a"));
  });
  bool holding = false;
  for (int i = 0; i < 200 && !holding; ++i) {
    json f = Call("GET", "/cxlkv/v1/faults");
    holding = f.is_object() && f["rules"].size() == 1 && f["rules"][0].value("count", 1) == 0;
    if (!holding) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(holding);
  Call("PATCH", path, {{"Port", "P1"}, {"Operation", "unassign"}}, &code);  // a CFM client
  ASSERT_EQ(code, 200);
  fabric::MemoryRegion now;
  ASSERT_TRUE(client_->AddHost("cma-0", "blade-0", r.id, "node-a", &now).ok());
  held.join();
  EXPECT_EQ(held_code, 409) << "the listed epoch fences an older plugin's release too";
  ExpectAgreement({r.id}, {});
  ASSERT_TRUE(client_->Free("cma-0", "blade-0", r.id).ok());
  ExpectAgreement({}, {});
}

TEST_F(FabricScenarioTest, FailedPortAssignmentAnswers206AndKeepsTheRegion) {
  long code = 0;
  Call("PUT", "/cxlkv/v1/faults", {{"failAssignPorts", {"P2"}}}, &code);
  ASSERT_EQ(code, 200);
  json body = {{"memorySizeMiB", 16}, {"QoS", 1}, {"shareCount", 2}};
  json r = Call("POST", "/cfm/v1/appliances/cma-0/blades/blade-0/memory", body, &code);
  ASSERT_EQ(code, 206) << r.dump();
  ASSERT_EQ(r["mappings"].size(), 1u);
  EXPECT_EQ(r["mappings"][0]["appliancePort"], "P1");
  std::string id = r["id"];
  ExpectAgreement({id}, {});
  EXPECT_EQ(AllocatedMiB(), 16) << "206 leaves the region allocated; the caller frees it";
  // Assigning the failed port again still fails; after clearing the fault it works.
  Call("PATCH", "/cfm/v1/appliances/cma-0/blades/blade-0/memory/" + id,
       {{"Port", "P2"}, {"Operation", "assign"}}, &code);
  EXPECT_EQ(code, 500);
  Call("PUT", "/cxlkv/v1/faults", json::object(), &code);
  fabric::MemoryRegion out;
  ASSERT_TRUE(client_->Assign("cma-0", "blade-0", id, "P2", true, &out).ok());
  ExpectAgreement({id}, {id});
  ASSERT_TRUE(client_->Assign("cma-0", "blade-0", id, "P2", false, &out).ok());
  ExpectAgreement({id}, {});
  ASSERT_TRUE(client_->Free("cma-0", "blade-0", id).ok());
  ExpectAgreement({}, {});
}

TEST_F(FabricScenarioTest, HostFailureIsNonFatalAndTheHostCatchesUpOnRestart) {
  Stop(hostd_["node-b"], SIGKILL);
  fabric::MemoryRegion r = Compose(2, 16);
  ASSERT_EQ(r.mappings.size(), 2u);
  EXPECT_EQ(r.mappings[0].materialization, fabric::Materialization::kMaterialized);
  EXPECT_EQ(r.mappings[1].materialization, fabric::Materialization::kFailed);
  EXPECT_NE(r.mappings[1].error.find("materialize on host node-b"), std::string::npos)
      << r.mappings[1].error;
  EXPECT_TRUE(JsonFiles(root_ + "/node-b/cdi").empty());
  StartHost("node-b");  // resyncs at start
  ExpectAgreement({r.id}, {r.id});

  // An injected materialization failure on one host, with the agent up.
  long code = 0;
  Call("PUT", "/cxlkv/v1/faults", {{"failMaterializeHosts", {"node-a"}}}, &code);
  fabric::MemoryRegion r2 = Compose(2, 16);
  EXPECT_EQ(r2.mappings[0].materialization, fabric::Materialization::kFailed);
  EXPECT_EQ(r2.mappings[1].materialization, fabric::Materialization::kMaterialized);
  // The manager reports the failure; node-a does not have the region yet.
  fabric::MemoryRegion got;
  ASSERT_TRUE(client_->Get("cma-0", "blade-0", r2.id, &got).ok());
  EXPECT_EQ(got.mappings[0].materialization, fabric::Materialization::kFailed);
  EXPECT_TRUE(JsonFiles(root_ + "/node-a/cdi").count(r2.id) == 0);
  Resync("node-a");  // the host agent repairs what the fault skipped
  ExpectAgreement({r.id, r2.id}, {r.id, r2.id});
  // ...and tells the manager, whose region now reports it materialized.
  ASSERT_TRUE(client_->Get("cma-0", "blade-0", r2.id, &got).ok());
  EXPECT_EQ(got.mappings[0].materialization, fabric::Materialization::kMaterialized);
  EXPECT_EQ(got.mappings[0].device, root_ + "/node-a/dev/" + r2.id);
}

TEST_F(FabricScenarioTest, PowerCycleAndRestartForgetRegionsAndHostsFollowAfterResync) {
  fabric::MemoryRegion r = Compose(2, 32);
  ExpectAgreement({r.id}, {r.id});
  int forgotten = 0;
  ASSERT_TRUE(client_->PowerCycle("cma-0", "blade-0", &forgotten).ok());
  EXPECT_EQ(forgotten, 1);
  Stop(fabricd_);
  StartFabric();
  std::vector<fabric::MemoryRegion> regions;
  ASSERT_TRUE(client_->List("cma-0", "blade-0", &regions).ok());
  EXPECT_TRUE(regions.empty());
  EXPECT_EQ(AllocatedMiB(), 0);
  EXPECT_TRUE(JsonFiles(root_ + "/backing").empty());
  // Hosts still hold stale devices until they resync ([Fan26] §2.6).
  EXPECT_EQ(JsonFiles(root_ + "/node-a/cdi").size(), 1u);
  Resync("node-a");
  Resync("node-b");
  ExpectAgreement({}, {});
}

TEST_F(FabricScenarioTest, StateSurvivesAKilledFabricManager) {
  fabric::MemoryRegion r = Compose(2, 16);
  Stop(fabricd_, SIGKILL);
  StartFabric();
  fabric::MemoryRegion got;
  ASSERT_TRUE(client_->Get("cma-0", "blade-0", r.id, &got).ok());
  EXPECT_EQ(got.size_mib, r.size_mib);
  EXPECT_EQ(got.claim_uid, "claim-1");
  EXPECT_EQ(got.mappings.size(), 2u);
  EXPECT_EQ(AllocatedMiB(), r.size_mib);
  ExpectAgreement({r.id}, {r.id});
  ASSERT_TRUE(client_->Free("cma-0", "blade-0", r.id).ok());
  ExpectAgreement({}, {});
}

TEST_F(FabricScenarioTest, CrashMidComposeIsRolledBackEverywhere) {
  for (const char* point : {"compose:allocated", "compose:assigned", "compose:materialized"}) {
    SCOPED_TRACE(point);
    long code = 0;
    Call("PUT", "/cxlkv/v1/faults", {{"crashAt", point}}, &code);
    ASSERT_EQ(code, 200);
    fabric::ComposeRequest req;
    req.size_mib = 16;
    req.qos = 1;
    req.share_count = 2;
    fabric::ComposeResult res;
    EXPECT_TRUE(client_->Compose("cma-0", "blade-0", req, &res).IsIOError());
    int status = 0;
    ASSERT_EQ(waitpid(fabricd_.pid, &status, 0), fabricd_.pid);
    fabricd_.pid = -1;
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    StartFabric();  // the fault was runtime-only; recovery rolls back
    std::vector<fabric::MemoryRegion> regions;
    ASSERT_TRUE(client_->List("cma-0", "blade-0", &regions).ok());
    EXPECT_TRUE(regions.empty());
    EXPECT_EQ(AllocatedMiB(), 0);
    EXPECT_TRUE(JsonFiles(root_ + "/backing").empty());
    ExpectAgreement({}, {});
  }
}

TEST_F(FabricScenarioTest, BasicAuthIsEnforcedWhenConfigured) {
  Stop(fabricd_);
  WriteConfig("auth: {username: admin, password: s3cret}\n");
  StartFabric();
  long code = 0;
  Call("GET", "/cfm/v1/appliances", nullptr, &code);
  EXPECT_EQ(code, 401);
  fabric::ClientOptions o;
  o.base_url = url_;
  o.username = "admin";
  o.password = "s3cret";
  std::unique_ptr<fabric::FabricClient> c;
  ASSERT_TRUE(fabric::FabricClient::Open(o, &c).ok());
  std::vector<fabric::Pool> pools;
  Status s = c->ListPools(&pools);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(pools.size(), 1u);
  EXPECT_EQ(pools[0].total_mib, 128);
  EXPECT_EQ(pools[0].block_mib, 16);
  EXPECT_EQ(pools[0].hosts, (std::vector<std::string>{"node-a", "node-b"}));
}

TEST_F(FabricScenarioTest, TlsServesHttpsAndTheClientVerifiesTheCertificate) {
  if (std::system("command -v openssl >/dev/null") != 0)
    GTEST_SKIP() << "openssl CLI not installed";
  std::string key = root_ + "/tls.key", crt = root_ + "/tls.crt";
  std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      key + " -out " + crt + " >" + root_ + "/openssl.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << Slurp(root_ + "/openssl.log");
  Stop(fabricd_);
  WriteConfig("tls: {cert: " + crt + ", key: " + key + "}\n");
  StartFabric();
  fabric::ClientOptions o;
  o.base_url = "https://127.0.0.1:" + std::to_string(fport_);
  o.ca_file = crt;
  std::unique_ptr<fabric::FabricClient> c;
  ASSERT_TRUE(fabric::FabricClient::Open(o, &c).ok());
  std::vector<fabric::Pool> pools;
  Status s = c->ListPools(&pools);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(pools.size(), 1u);
  // Without the CA the certificate is not trusted.
  o.ca_file = root_ + "/fabricd.yaml";
  ASSERT_TRUE(fabric::FabricClient::Open(o, &c).ok());
  EXPECT_TRUE(c->ListPools(&pools).IsIOError());
  // Plain HTTP to the HTTPS port gets no answer it can use.
  long code = 0;
  Call("GET", "/cfm/v1", nullptr, &code);
  EXPECT_NE(code, 200);
}

TEST_F(FabricScenarioTest, MalformedConfigFailsWithAClearErrorAndLosesNothing) {
  fabric::MemoryRegion r = Compose(1, 16);
  Stop(fabricd_);
  std::string good = Slurp(root_ + "/fabricd.yaml");
  std::ofstream(root_ + "/fabricd.yaml") << "appliances: [ {id: cma-0\n";
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open((root_ + "/bad.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    const std::string fabricd = cxlkv::testutil::BuiltBinary("cxlkv-fabricd");
    execl(fabricd.c_str(), fabricd.c_str(), "--config", (root_ + "/fabricd.yaml").c_str(),
          "--listen", ("127.0.0.1:" + std::to_string(fport_)).c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2);
  EXPECT_NE(Slurp(root_ + "/bad.log").find("parse config"), std::string::npos)
      << Slurp(root_ + "/bad.log");
  std::ofstream(root_ + "/fabricd.yaml") << good;
  StartFabric();
  fabric::MemoryRegion got;
  EXPECT_TRUE(client_->Get("cma-0", "blade-0", r.id, &got).ok());
}

// The agent's materialize request (PUT /cxlkv/v1/regions/{id}, the manager's
// call) with negative numbers: each is a 400 that names the field, and
// nothing is materialized. They were read with json's get<uint64_t>(), which
// casts -1 to 2^64-1: an offset of -4096 wrapped the backing file's bounds
// check (offset + size == 0) and was materialized and put in the CDI spec,
// and an epoch of -1 fenced the device from every release naming an epoch.
TEST_F(FabricScenarioTest, AgentRefusesNegativeSizesOffsetsAndEpochs) {
  const std::string backing = root_ + "/backing/raw.region";
  std::system(("mkdir -p " + root_ + "/backing && truncate -s 1M " + backing).c_str());
  const std::string path = "/cxlkv/v1/regions/raw1";
  for (const auto& [field, body] : std::vector<std::pair<std::string, json>>{
           {"sizeBytes", {{"sizeBytes", -1}, {"backingPath", backing}}},
           {"offsetBytes", {{"sizeBytes", 4096}, {"offsetBytes", -4096}, {"backingPath", backing}}},
           {"assignEpoch", {{"sizeBytes", 4096}, {"backingPath", backing}, {"assignEpoch", -1}}},
           {"sizeBytes", {{"sizeBytes", 4096.5}, {"backingPath", backing}}},
           {"sizeBytes", {{"backingPath", backing}}}}) {
    long code = 0;
    json r = Call("PUT", path, body, &code, HostUrl("node-a"));
    EXPECT_EQ(code, 400) << body.dump();
    EXPECT_NE(r.value("error", "").find(field), std::string::npos) << r.dump();
  }
  long code = 0;
  json r =
      Call("PUT", path,
           {{"sizeBytes", 4096}, {"offsetBytes", ~uint64_t{0} - 4095}, {"backingPath", backing}},
           &code, HostUrl("node-a"));
  EXPECT_EQ(code, 400) << "an offset that wraps the bounds check: " << r.dump();
  json list = Call("GET", "/cxlkv/v1/regions", nullptr, nullptr, HostUrl("node-a"));
  EXPECT_TRUE(list["regions"].empty()) << list.dump();
  EXPECT_TRUE(JsonFiles(root_ + "/node-a/cdi").empty());
  // The same request with good numbers still works.
  r = Call("PUT", path, {{"sizeBytes", 4096}, {"backingPath", backing}, {"assignEpoch", 3}}, &code,
           HostUrl("node-a"));
  EXPECT_EQ(code, 200) << r.dump();
  EXPECT_EQ(r.value("assignEpoch", uint64_t{0}), 3u);
}

// A second daemon started on a port another one listens on fails at start
// naming the port and the process holding it; the first keeps every request
// (cpp-httplib's default SO_REUSEPORT let both bind, and the kernel spread
// connections over the two).
TEST_F(FabricScenarioTest, ASecondDaemonOnATakenPortFailsAtStartNamingTheHolder) {
  auto ExpectRefused = [&](const std::vector<std::string>& argv, const std::string& log,
                           pid_t holder, const std::string& holder_name, int port) {
    // Runs it to its exit (one that serves is stopped after 30 s: fails).
    const pid_t pid = fork();
    if (pid == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      alarm(30);
      execv(args[0], args.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const std::string err = Slurp(log);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1)
        << argv[0] << " on a taken port: status " << status << ":\n"
        << err;
    EXPECT_EQ(err.find("listening"), std::string::npos) << err;
    EXPECT_NE(err.find("listen 127.0.0.1:" + std::to_string(port) + ": address already in use"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("held by pid " + std::to_string(holder) + " (" + holder_name + ")"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("give --listen another port"), std::string::npos) << err;
  };
  const std::string d = root_ + "/node-x";
  ExpectRefused({cxlkv::testutil::BuiltBinary("cxlkv-hostd"), "--host-id", "node-x", "--listen",
                 "127.0.0.1:" + std::to_string(HostPort("node-a")), "--cdi-dir", d + "/cdi",
                 "--state-dir", d + "/state", "--dev-dir", d + "/dev", "--resync-interval", "0"},
                d + ".log", hostd_["node-a"].pid, "cxlkv-hostd", HostPort("node-a"));
  // The same appliance over a state directory of its own.
  std::string config = Slurp(root_ + "/fabricd.yaml");
  config.replace(config.find("/fabric-state"), 13, "/fabric-state-x");
  std::ofstream(root_ + "/fabricd-x.yaml") << config;
  ExpectRefused({cxlkv::testutil::BuiltBinary("cxlkv-fabricd"), "--config",
                 root_ + "/fabricd-x.yaml", "--listen", "127.0.0.1:" + std::to_string(fport_)},
                root_ + "/fabricd-x.log", fabricd_.pid, "cxlkv-fabricd", fport_);
  // The first ones answer every request.
  for (int i = 0; i < 8; ++i) {
    json r = Call("GET", "/cxlkv/v1/regions", nullptr, nullptr, HostUrl("node-a"));
    EXPECT_EQ(r.value("hostId", ""), "node-a") << r.dump();
    long code = 0;
    Call("GET", "/cfm/v1/appliances", nullptr, &code);
    EXPECT_EQ(code, 200);
  }
}

// A PUT or POST without a body (no Content-Length header: the HTTP layer
// reads none and refuses it before any handler runs) is a 400 saying what
// body the endpoint takes, not "no such endpoint"; a path the agent does
// not serve is a 404 listing the endpoints, a method it does not serve
// there a 405 with Allow.
TEST_F(FabricScenarioTest, AgentSaysWhatBodyAnEndpointTakesWhenARequestHasNone) {
  const int port = HostPort("node-a");
  auto error = [](const RawAnswer& a) {
    return a.body.is_object() ? a.body.value("error", "") : std::string();
  };
  const std::vector<RawAnswer> answers = Bodyless(port, {{"PUT", "/cxlkv/v1/regions/r1"},
                                                         {"POST", "/cxlkv/v1/regions/r1/release"},
                                                         {"POST", "/cxlkv/v1/resync"},
                                                         {"GET", "/cxlkv/v1/nope"},
                                                         {"PUT", "/nope"}});
  RawAnswer a = answers[0];
  EXPECT_EQ(a.status, 400) << a.body.dump();
  EXPECT_NE(error(a).find("no Content-Length header"), std::string::npos) << a.body.dump();
  EXPECT_NE(error(a).find("{\"sizeBytes\": N}"), std::string::npos) << a.body.dump();
  EXPECT_EQ(error(a).find("no such endpoint"), std::string::npos) << a.body.dump();
  a = answers[1];
  EXPECT_EQ(a.status, 400) << a.body.dump();
  EXPECT_NE(error(a).find("{\"assignEpoch\": N}"), std::string::npos) << a.body.dump();
  a = answers[2];
  EXPECT_EQ(a.status, 400) << a.body.dump();
  EXPECT_NE(error(a).find("no body: send an empty one (Content-Length: 0)"), std::string::npos)
      << a.body.dump();
  // Doing as told works.
  a = RawHttp(port,
              "POST /cxlkv/v1/resync HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
              "Content-Length: 0\r\n\r\n");
  EXPECT_EQ(a.status, 200) << a.body.dump();
  // Unknown paths, with or without a body: 404 naming the endpoints.
  for (size_t i : {3, 4}) {
    const std::string what = i == 3 ? "GET /cxlkv/v1/nope" : "PUT /nope";
    a = answers[i];
    EXPECT_EQ(a.status, 404) << what << ": " << a.body.dump();
    EXPECT_NE(error(a).find("no such endpoint: " + what), std::string::npos) << a.body.dump();
    EXPECT_NE(error(a).find("PUT /cxlkv/v1/regions/ID"), std::string::npos) << a.body.dump();
  }
  // A method the path is not served with: 405 and Allow.
  a = RawHttp(port,
              "PATCH /cxlkv/v1/regions/r1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
              "Content-Length: 0\r\n\r\n");
  EXPECT_EQ(a.status, 405) << a.body.dump();
  EXPECT_EQ(a.allow, "PUT, DELETE") << a.body.dump();
}

// The fabric manager likewise: a PUT, POST or PATCH without a body is a 400
// saying what body that endpoint takes (in the CFM error shape, in
// "details"), not "request rejected by the HTTP layer"; one to a path not
// served with that method is a 405 with Allow.
TEST_F(FabricScenarioTest, FabricSaysWhatBodyAnEndpointTakesWhenARequestHasNone) {
  auto details = [](const RawAnswer& a) {
    return a.body.is_object() ? a.body.value("details", "") : std::string();
  };
  const std::string memory = "/cfm/v1/appliances/cma-0/blades/blade-0/memory";
  const std::vector<RawAnswer> answers = Bodyless(fport_, {{"POST", memory},
                                                           {"PUT", "/cxlkv/v1/faults"},
                                                           {"PATCH", "/cfm/v1/appliances/cma-0"},
                                                           {"POST", "/cxlkv/v1/stats"}});
  RawAnswer a = answers[0];
  EXPECT_EQ(a.status, 400) << a.body.dump();
  EXPECT_NE(details(a).find("POST " + memory + ": no Content-Length header"), std::string::npos)
      << a.body.dump();
  EXPECT_NE(details(a).find("{\"memorySizeMiB\": N, \"QoS\": N}"), std::string::npos)
      << a.body.dump();
  EXPECT_EQ(a.body.value("uri", ""), memory) << a.body.dump();
  a = answers[1];
  EXPECT_EQ(a.status, 400) << a.body.dump();
  EXPECT_NE(details(a).find("a JSON fault set"), std::string::npos) << a.body.dump();
  a = answers[2];  // a resync: takes no body
  EXPECT_EQ(a.status, 400) << a.body.dump();
  EXPECT_NE(details(a).find("no body: send an empty one (Content-Length: 0)"), std::string::npos)
      << a.body.dump();
  // Doing as told works.
  a = RawHttp(fport_,
              "PATCH /cfm/v1/appliances/cma-0 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
              "Content-Length: 0\r\n\r\n");
  EXPECT_EQ(a.status, 200) << a.body.dump();
  // A path served with other methods only: 405 naming them.
  a = answers[3];
  EXPECT_EQ(a.status, 405) << a.body.dump();
  EXPECT_EQ(a.allow, "GET") << a.body.dump();
  EXPECT_NE(details(a).find("allowed: GET"), std::string::npos) << a.body.dump();
}

}  // namespace
}  // namespace cxlkv
