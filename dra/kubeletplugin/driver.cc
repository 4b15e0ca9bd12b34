// Copyright cxlkv authors.
#include "kubeletplugin/driver.h"

#include <grpcpp/grpcpp.h>
#include <openssl/sha.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "dra_v1.grpc.pb.h"
#include "dra_v1beta1.grpc.pb.h"
#include "health_v1.grpc.pb.h"
#include "health_v1alpha1.grpc.pb.h"
#include "pluginregistration_v1.grpc.pb.h"

namespace cxlkv::dra {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace reg = ::pluginregistration;

namespace {

// sun_path is 108 bytes including the terminating NUL.
constexpr size_t kMaxSocketPath = 107;

std::string Base64RawUrl(const unsigned char* p, size_t n) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = (p[i] << 16) | (p[i + 1] << 8) | p[i + 2];
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  if (n - i == 1) {
    uint32_t v = p[i] << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
  } else if (n - i == 2) {
    uint32_t v = (p[i] << 16) | (p[i + 1] << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
  }
  return out;
}

std::string Sha256Prefix(const std::string& data, size_t bytes) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return Base64RawUrl(md, bytes);
}

Status MakeDirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      cur = dir.substr(0, i);
      if (::mkdir(cur.c_str(), 0750) != 0 && errno != EEXIST) {
        return Status::IOError("mkdir " + cur + ": " + std::strerror(errno));
      }
    }
  }
  return Status::OK();
}

// Per-claim results, shared by the v1 and v1beta1 services (same shapes).
template <typename Req, typename Resp, typename DeviceMsg>
void Prepare(DeviceState* state, const Req& req, Resp* resp, bool with_share_id) {
  for (const auto& c : req.claims()) {
    PrepareResult r = state->Prepare(ClaimRef{c.namespace_(), c.uid(), c.name()});
    auto& out = (*resp->mutable_claims())[c.uid()];
    if (!r.error.empty()) {
      out.set_error(r.error);
      continue;
    }
    for (const auto& d : r.devices) {
      DeviceMsg* m = out.add_devices();
      for (const auto& n : d.request_names) m->add_request_names(n);
      m->set_pool_name(d.pool_name);
      m->set_device_name(d.device_name);
      for (const auto& id : d.cdi_device_ids) m->add_cdi_device_ids(id);
      if constexpr (requires { m->set_share_id(std::string()); }) {
        if (with_share_id && !d.share_id.empty()) m->set_share_id(d.share_id);
      }
    }
  }
}

template <typename Req, typename Resp>
void Unprepare(DeviceState* state, const Req& req, Resp* resp) {
  for (const auto& c : req.claims()) {
    std::string err = state->Unprepare(ClaimRef{c.namespace_(), c.uid(), c.name()});
    auto& out = (*resp->mutable_claims())[c.uid()];
    if (!err.empty()) out.set_error(err);
  }
}

class DraV1 final : public drav1::DRAPlugin::Service {
 public:
  explicit DraV1(DeviceState* s) : state_(s) {}
  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const drav1::NodePrepareResourcesRequest* req,
                                    drav1::NodePrepareResourcesResponse* resp) override {
    Prepare<drav1::NodePrepareResourcesRequest, drav1::NodePrepareResourcesResponse, drav1::Device>(
        state_, *req, resp, true);
    return grpc::Status::OK;
  }
  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const drav1::NodeUnprepareResourcesRequest* req,
                                      drav1::NodeUnprepareResourcesResponse* resp) override {
    Unprepare(state_, *req, resp);
    return grpc::Status::OK;
  }

 private:
  DeviceState* state_;
};

class DraV1beta1 final : public drav1beta1::DRAPlugin::Service {
 public:
  explicit DraV1beta1(DeviceState* s) : state_(s) {}
  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const drav1beta1::NodePrepareResourcesRequest* req,
                                    drav1beta1::NodePrepareResourcesResponse* resp) override {
    Prepare<drav1beta1::NodePrepareResourcesRequest, drav1beta1::NodePrepareResourcesResponse,
            drav1beta1::Device>(state_, *req, resp, false);
    return grpc::Status::OK;
  }
  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const drav1beta1::NodeUnprepareResourcesRequest* req,
                                      drav1beta1::NodeUnprepareResourcesResponse* resp) override {
    Unprepare(state_, *req, resp);
    return grpc::Status::OK;
  }

 private:
  DeviceState* state_;
};

// The health stream: the full list after every check, until the kubelet
// hangs up or the driver stops.
template <typename Resp, typename HealthEnum>
grpc::Status StreamHealth(HealthMonitor* health, const std::atomic<bool>* stopping,
                          grpc::ServerContext* ctx, grpc::ServerWriter<Resp>* writer) {
  uint64_t seen = 0;
  std::vector<DeviceHealthInfo> devices;
  auto stop = [&] { return ctx->IsCancelled() || stopping->load(); };
  while (!stop()) {
    if (!health->Wait(&seen, &devices, stop, std::chrono::seconds(1))) continue;
    Resp resp;
    for (const auto& d : devices) {
      auto* m = resp.add_devices();
      m->mutable_device()->set_pool_name(d.pool_name);
      m->mutable_device()->set_device_name(d.device_name);
      switch (d.health) {
        case DeviceHealthInfo::Health::kHealthy:
          m->set_health(HealthEnum::HEALTHY);
          break;
        case DeviceHealthInfo::Health::kUnhealthy:
          m->set_health(HealthEnum::UNHEALTHY);
          break;
        default:
          m->set_health(HealthEnum::UNKNOWN);
      }
      m->set_last_updated_time(d.updated_unix);
      m->set_health_check_timeout_seconds(health->timeout_seconds());
      m->set_message(d.message);
    }
    if (!writer->Write(resp)) break;  // the kubelet went away
  }
  return grpc::Status::OK;
}

class HealthV1 final : public ::v1::DRAResourceHealth::Service {
 public:
  HealthV1(HealthMonitor* h, const std::atomic<bool>* stopping) : h_(h), stopping_(stopping) {}
  grpc::Status NodeWatchResources(
      grpc::ServerContext* ctx, const ::v1::NodeWatchResourcesRequest*,
      grpc::ServerWriter<::v1::NodeWatchResourcesResponse>* w) override {
    return StreamHealth<::v1::NodeWatchResourcesResponse, ::v1::HealthStatus>(h_, stopping_, ctx,
                                                                              w);
  }

 private:
  HealthMonitor* h_;
  const std::atomic<bool>* stopping_;
};

class HealthV1alpha1 final : public ::v1alpha1::DRAResourceHealth::Service {
 public:
  HealthV1alpha1(HealthMonitor* h, const std::atomic<bool>* stopping)
      : h_(h), stopping_(stopping) {}
  grpc::Status NodeWatchResources(
      grpc::ServerContext* ctx, const ::v1alpha1::NodeWatchResourcesRequest*,
      grpc::ServerWriter<::v1alpha1::NodeWatchResourcesResponse>* w) override {
    return StreamHealth<::v1alpha1::NodeWatchResourcesResponse, ::v1alpha1::HealthStatus>(
        h_, stopping_, ctx, w);
  }

 private:
  HealthMonitor* h_;
  const std::atomic<bool>* stopping_;
};

class Registration final : public reg::Registration::Service {
 public:
  Registration(std::string driver, std::string endpoint)
      : driver_(std::move(driver)), endpoint_(std::move(endpoint)) {}
  grpc::Status GetInfo(grpc::ServerContext*, const reg::InfoRequest*,
                       reg::PluginInfo* info) override {
    info->set_type("DRAPlugin");
    info->set_name(driver_);
    info->set_endpoint(endpoint_);
    // Preferred first: the kubelet takes the first DRA service it knows and
    // the newest health service both sides offer.
    for (const char* v : {"v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                          "v1alpha1.DRAResourceHealth"}) {
      info->add_supported_versions(v);
    }
    return grpc::Status::OK;
  }
  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const reg::RegistrationStatus* st,
                                        reg::RegistrationStatusResponse*) override {
    std::lock_guard<std::mutex> l(mu_);
    registered_ = st->plugin_registered();
    error_ = st->error();
    if (registered_) {
      spdlog::info("kubelet registered driver {} (endpoint {})", driver_, endpoint_);
    } else {
      spdlog::error("kubelet refused driver {}: {}", driver_, error_);
    }
    return grpc::Status::OK;
  }
  bool registered() {
    std::lock_guard<std::mutex> l(mu_);
    return registered_;
  }
  std::string error() {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }

 private:
  const std::string driver_, endpoint_;
  std::mutex mu_;
  bool registered_ = false;
  std::string error_;
};

Status Listen(const std::string& path, const std::vector<grpc::Service*>& services,
              std::unique_ptr<grpc::Server>* out) {
  if (path.size() > kMaxSocketPath) {
    return Status::InvalidArgument("socket path " + path + " is longer than " +
                                   std::to_string(kMaxSocketPath) + " bytes");
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::IOError("remove stale socket " + path + ": " + std::strerror(errno));
  }
  grpc::ServerBuilder b;
  b.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
  for (auto* s : services) b.RegisterService(s);
  *out = b.BuildAndStart();
  if (!*out) return Status::IOError("listen on " + path + ": gRPC server did not start");
  return Status::OK();
}

// "" when a Unix socket at path accepts a connection.
std::string ProbeSocket(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  std::string err;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    err = std::strerror(errno);
  }
  ::close(fd);
  return err;
}

}  // namespace

struct Driver::Rep {
  DriverOptions opt;
  std::string reg_path, dra_path;
  std::atomic<bool> stopping{false};
  std::unique_ptr<DraV1> v1;
  std::unique_ptr<DraV1beta1> v1beta1;
  std::unique_ptr<HealthV1> hv1;
  std::unique_ptr<HealthV1alpha1> hv1alpha1;
  std::unique_ptr<Registration> registration;
  std::unique_ptr<grpc::Server> dra_server, reg_server;
  bool stopped = false;
};

std::string RegistrationSocketName(const std::string& registry_dir, const std::string& driver,
                                   const std::string& pod_uid) {
  if (pod_uid.empty()) return driver + "-reg.sock";
  std::string candidates[] = {
      driver + "-" + pod_uid + "-reg.sock",
      driver + "-" + Sha256Prefix(pod_uid, 8) + "-reg.sock",
      "dra-" + Sha256Prefix(driver + std::string(1, '\0') + pod_uid, 16) + "-reg.sock",
  };
  for (const auto& c : candidates) {
    if (registry_dir.size() + 1 + c.size() <= kMaxSocketPath) return c;
  }
  return candidates[2];
}

Driver::Driver(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
Driver::~Driver() { Stop(); }

Status Driver::Start(const DriverOptions& opt, DeviceState* state, HealthMonitor* health,
                     std::unique_ptr<Driver>* out) {
  if (opt.driver_name.empty()) return Status::InvalidArgument("driver name is required");
  auto rep = std::make_unique<Rep>();
  rep->opt = opt;
  const std::string registry_dir = opt.kubelet_root_dir + "/plugins_registry";
  const std::string plugin_dir = opt.kubelet_root_dir + "/plugins/" + opt.driver_name;
  CXLKV_RETURN_IF_ERROR(MakeDirs(registry_dir));
  CXLKV_RETURN_IF_ERROR(MakeDirs(plugin_dir));
  rep->reg_path =
      registry_dir + "/" + RegistrationSocketName(registry_dir, opt.driver_name, opt.pod_uid);
  rep->dra_path =
      plugin_dir + (opt.pod_uid.empty() ? "/dra.sock" : "/dra-" + opt.pod_uid + ".sock");

  rep->v1 = std::make_unique<DraV1>(state);
  rep->v1beta1 = std::make_unique<DraV1beta1>(state);
  rep->hv1 = std::make_unique<HealthV1>(health, &rep->stopping);
  rep->hv1alpha1 = std::make_unique<HealthV1alpha1>(health, &rep->stopping);
  CXLKV_RETURN_IF_ERROR(Listen(
      rep->dra_path, {rep->v1.get(), rep->v1beta1.get(), rep->hv1.get(), rep->hv1alpha1.get()},
      &rep->dra_server));
  rep->registration = std::make_unique<Registration>(opt.driver_name, rep->dra_path);
  Status s = Listen(rep->reg_path, {rep->registration.get()}, &rep->reg_server);
  if (!s.ok()) {
    rep->dra_server->Shutdown();
    ::unlink(rep->dra_path.c_str());
    return s;
  }
  spdlog::info("driver {}: registration socket {}, DRA socket {}", opt.driver_name, rep->reg_path,
               rep->dra_path);
  out->reset(new Driver(std::move(rep)));
  return Status::OK();
}

void Driver::Stop() {
  if (!rep_ || rep_->stopped) return;
  rep_->stopped = true;
  rep_->stopping = true;
  // Registration socket first: the kubelet deregisters and stops calling.
  ::unlink(rep_->reg_path.c_str());
  auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  rep_->reg_server->Shutdown(deadline);
  rep_->dra_server->Shutdown(deadline);
  ::unlink(rep_->dra_path.c_str());
}

const std::string& Driver::registration_socket() const { return rep_->reg_path; }
const std::string& Driver::dra_socket() const { return rep_->dra_path; }
std::string Driver::Check() const {
  if (rep_->stopped) return "stopped";
  std::string e = ProbeSocket(rep_->reg_path);
  if (!e.empty()) return "registration socket " + rep_->reg_path + ": " + e;
  e = ProbeSocket(rep_->dra_path);
  if (!e.empty()) return "DRA socket " + rep_->dra_path + ": " + e;
  return "";
}

bool Driver::registered() const { return rep_->registration->registered(); }
std::string Driver::registration_error() const { return rep_->registration->error(); }

}  // namespace cxlkv::dra
