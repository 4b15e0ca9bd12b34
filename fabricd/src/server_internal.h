// Copyright cxlkv authors.
//
// Shared pieces of the HTTP front end: the server object, error replies and
// the JSON views of appliances, blades, ports and hosts.
#ifndef CXLKV_FABRIC_SERVER_INTERNAL_H_
#define CXLKV_FABRIC_SERVER_INTERNAL_H_

#include <httplib.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cxlkv/base/daemon.h"
#include "cxlkv/base/http_routes.h"
#include "cxlkv/fabricd/server.h"
#include "fabric_manager.h"

namespace cxlkv::fabric::internal {

class HttpFabricServer : public FabricServer {
 public:
  // The routes, without a manager yet: Bind, then Attach, then Serve.
  explicit HttpFabricServer(const FabricConfig& config);
  Status Bind(const std::string& host, int port, int* bound_port);
  void Attach(std::unique_ptr<FabricManager> m) { manager_ = std::move(m); }
  Status Serve() override;
  void Stop() override;

 private:
  void InstallRoutes();
  void InstallApplianceRoutes();
  void InstallBladeRoutes();
  void InstallMemoryRoutes();
  void InstallHostRoutes();
  void InstallExtensionRoutes();
  // Registers a handler and records the method, so that other methods on
  // the same path answer 405 with an Allow header rather than 404.
  // `body` says what body the endpoint takes (base/http_routes.h), for the
  // answer to a request the HTTP layer refused before the handler ran; the
  // form without it is for endpoints that take none.
  void On(const std::string& method, const std::string& pattern, httplib::Server::Handler h);
  void On(const std::string& method, const std::string& pattern, const char* body,
          httplib::Server::Handler h);
  void InstallMethodNotAllowed();
  std::map<std::string, std::set<std::string>> methods_;  // pattern -> methods
  std::vector<base::HttpEndpoint> endpoints_;

  const FabricConfig config_;
  std::unique_ptr<FabricManager> manager_;
  std::unique_ptr<httplib::Server> http_;
  std::string expected_auth_;  // "Basic <base64>" or "" when auth is off
  base::ServeGate gate_;       // Serve vs Stop, whenever the stop comes
};

// What the endpoints that take a body take (HttpFabricServer::On).
inline constexpr const char* kCredentialsBody =
    "JSON credentials {\"username\": S, \"password\": S, \"ipAddress\": S, \"port\": N} with "
    "optional insecure, protocol, backend and customId, sent with its Content-Length";
inline constexpr const char* kRenameBody =
    "no body (the new id is the query parameter named in the API): send an empty one "
    "(Content-Length: 0)";
inline constexpr const char* kComposeBody =
    "a JSON compose request, {\"memorySizeMiB\": N, \"QoS\": N} with optional Port, shareCount, "
    "candidateHosts and candidatePorts, sent with its Content-Length";

// Writes the CFM error body {uri, details, status {code, message}}.
void ReplyError(const httplib::Request& req, httplib::Response& res, int code,
                const std::string& details);
// Maps a Status to its HTTP code and writes the error body.
void ReplyStatus(const httplib::Request& req, httplib::Response& res, const Status& s);
void ReplyJson(httplib::Response& res, int code, const nlohmann::json& body);

// Parses the request body as a JSON object; on failure replies 400 and
// returns false.
bool ParseBody(const httplib::Request& req, httplib::Response& res, nlohmann::json* out);

// Views (the OpenAPI shapes). Fields whose schema says minimum 1 are left
// out when zero rather than sent out of range.
nlohmann::json Collection(const std::vector<std::string>& uris);
nlohmann::json ApplianceJson(const ApplianceState& a);
nlohmann::json BladeJson(const ApplianceState& a, const BladeState& b);
nlohmann::json BladePortJson(const FabricState& s, const ApplianceState& a, const BladeState& b,
                             const PortConfig& p);
nlohmann::json ResourceJson(const BladeState& b, int index);
nlohmann::json HostJson(const FabricState& s, const HostState& h);
std::vector<std::string> HostPortIds(const FabricState& s, const HostState& h);
nlohmann::json HostPortJson(const FabricState& s, const HostState& h, const std::string& pid);
nlohmann::json MemoryDeviceJson(const FabricState& s, const HostState& h, const std::string& pid);

std::string ApplianceUri(const std::string& aid);
std::string BladeUri(const std::string& aid, const std::string& bid);

// Credentials body check per the `credentials` schema; "" when valid.
std::string CheckCredentials(const nlohmann::json& body);

}  // namespace cxlkv::fabric::internal

#endif  // CXLKV_FABRIC_SERVER_INTERNAL_H_
