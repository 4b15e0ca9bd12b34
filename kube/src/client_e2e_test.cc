// Copyright cxlkv authors.
//
// Client against the real kube-apiserver: CRUD of every typed kind, conflict
// handling, finalizers, the status subresource, server-side apply, paging,
// preconditions and error details.
#include <gtest/gtest.h>

#include "cxlkv/kube/leader_election.h"
#include "cxlkv/kube/typed.h"
#include "testing/e2e_env.h"

namespace cxlkv::kube {
namespace {

using testing::E2ETest;

class ClientE2ETest : public E2ETest {
 protected:
  // Create, get, list, update, merge-patch, delete, then NotFound: the same
  // round trip for every kind. `obj` has metadata.name set.
  void RoundTrip(ResourceClient rc, const Json& obj, const DeleteOptions& del = {}) {
    SCOPED_TRACE(rc.type().kind);
    const std::string name = obj["metadata"]["name"];
    Json created;
    Status s = rc.Create(obj, &created);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(created["kind"], rc.type().kind);
    EXPECT_FALSE(created["metadata"].value("uid", "").empty());

    Json got;
    ASSERT_TRUE((s = rc.Get(name, &got)).ok()) << s.ToString();
    EXPECT_EQ(got["metadata"]["uid"], created["metadata"]["uid"]);

    Json list;
    ListOptions lo;
    lo.field_selector = "metadata.name=" + name;
    ASSERT_TRUE((s = rc.List(lo, &list)).ok()) << s.ToString();
    ASSERT_EQ(list["items"].size(), 1u);
    EXPECT_EQ(list["items"][0]["metadata"]["name"], name);

    // Controllers may write the object between our read and write (the node
    // lifecycle controller taints new Nodes): re-read and retry on 409, as
    // every client of an optimistic-concurrency API must.
    Json updated;
    for (int attempt = 0; attempt < 10; ++attempt) {
      ASSERT_TRUE((s = rc.Get(name, &got)).ok()) << s.ToString();
      got["metadata"]["labels"]["cxlkv.dev/updated"] = "yes";
      s = rc.Update(got, &updated);
      if (!s.IsConflict()) break;
    }
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(updated["metadata"]["labels"]["cxlkv.dev/updated"], "yes");
    EXPECT_NE(updated["metadata"]["resourceVersion"], got["metadata"]["resourceVersion"]);

    Json patched;
    s = rc.Patch(name, PatchType::kMerge,
                 {{"metadata", {{"annotations", {{"cxlkv.dev/patched", "1"}}}}}}, &patched);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(patched["metadata"]["annotations"]["cxlkv.dev/patched"], "1");
    EXPECT_EQ(patched["metadata"]["labels"]["cxlkv.dev/updated"], "yes");

    ASSERT_TRUE((s = rc.Delete(name, del)).ok()) << s.ToString();
    EXPECT_TRUE(
        Eventually([&] { return rc.Get(name, &got).IsNotFound(); }, std::chrono::seconds(30)));
  }

  Json Claim(const std::string& name, const std::string& device_class = "any-class") {
    return {
        {"metadata", {{"name", name}}},
        {"spec",
         {{"devices",
           {{"requests", Json::array({{{"name", "mem"},
                                       {"exactly", {{"deviceClassName", device_class}}}}})}}}}}};
  }
};

TEST_F(ClientE2ETest, CrudDeviceClass) {
  std::string name = UniqueName("class");
  RoundTrip(DeviceClassClient(client_.get()),
            {{"metadata", {{"name", name}}},
             {"spec",
              {{"selectors",
                Json::array({{{"cel", {{"expression", "device.driver == \"cxlkv.dev\""}}}}})}}}});
}

TEST_F(ClientE2ETest, CrudResourceSlice) {
  std::string name = UniqueName("slice");
  RoundTrip(ResourceSliceClient(client_.get()),
            {{"metadata", {{"name", name}}},
             {"spec",
              {{"driver", "crud.e2e.cxlkv.dev"},
               {"pool", {{"name", name}, {"generation", 1}, {"resourceSliceCount", 1}}},
               {"allNodes", true},
               {"devices", Json::array({{{"name", "region-0"},
                                         {"attributes", {{"type", {{"string", "cxl-mem"}}}}},
                                         {"capacity", {{"memory", {{"value", "64Gi"}}}}}}})}}}});
}

TEST_F(ClientE2ETest, CrudResourceClaim) {
  RoundTrip(ResourceClaimClient(client_.get(), ns_), Claim(UniqueName("claim")));
}

TEST_F(ClientE2ETest, CrudPod) {
  ResourceClient pods = PodClient(client_.get(), ns_);
  // Pods need the namespace's default ServiceAccount, which the controller
  // manager creates shortly after the namespace.
  Json sa;
  ASSERT_TRUE(Eventually(
      [&] {
        return client_
            ->Get(ResourceType{"", "v1", "serviceaccounts", "ServiceAccount", true}, ns_, "default",
                  &sa)
            .ok();
      },
      std::chrono::seconds(60)));
  DeleteOptions now;
  now.grace_period_seconds = 0;  // no kubelet will ever confirm a graceful stop
  RoundTrip(
      pods,
      {{"metadata", {{"name", UniqueName("pod")}}},
       {"spec",
        {{"containers", Json::array({{{"name", "c"}, {"image", "registry.k8s.io/pause:3.10"}}})},
         {"automountServiceAccountToken", false}}}},
      now);
}

TEST_F(ClientE2ETest, CrudNode) {
  std::string name = UniqueName("node");
  RoundTrip(NodeClient(client_.get()),
            {{"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}},
             {"spec", {{"unschedulable", true}}}});
}

TEST_F(ClientE2ETest, CrudLease) {
  RoundTrip(LeaseClient(client_.get(), ns_),
            {{"metadata", {{"name", UniqueName("lease")}}},
             {"spec", {{"holderIdentity", "me"}, {"leaseDurationSeconds", 15}}}});
}

TEST_F(ClientE2ETest, CrudEvent) {
  RoundTrip(EventClient(client_.get(), ns_),
            {{"metadata", {{"name", UniqueName("event")}}},
             {"eventTime", FormatMicroTime(std::chrono::system_clock::now())},
             {"reportingController", "cxlkv.dev/e2e"},
             {"reportingInstance", "e2e-0"},
             {"action", "Test"},
             {"reason", "Crud"},
             {"type", "Normal"},
             {"note", "round trip"},
             {"regarding",
              {{"apiVersion", "coordination.k8s.io/v1"},
               {"kind", "Lease"},
               {"namespace", ns_},
               {"name", "some-lease"}}}});
}

// A PUT carrying a resourceVersion that is no longer current is refused with
// 409 Conflict, distinct from AlreadyExists.
TEST_F(ClientE2ETest, StaleUpdateIsConflict) {
  ResourceClient leases = LeaseClient(client_.get(), ns_);
  Json v1;
  ASSERT_TRUE(
      leases.Create({{"metadata", {{"name", "stale"}}}, {"spec", {{"holderIdentity", "a"}}}}, &v1)
          .ok());
  Json v2 = v1;
  v2["spec"]["holderIdentity"] = "b";
  Json out;
  ASSERT_TRUE(leases.Update(v2, &out).ok());
  v1["spec"]["holderIdentity"] = "c";  // still carries the first resourceVersion
  Status s = leases.Update(v1, &out);
  EXPECT_TRUE(s.IsConflict()) << s.ToString();
  EXPECT_EQ(s.http_status(), 409);
  EXPECT_EQ(s.reason(), "Conflict");
  EXPECT_NE(s.message().find("the object has been modified"), std::string::npos) << s.message();

  s = leases.Create({{"metadata", {{"name", "stale"}}}}, &out);
  EXPECT_TRUE(s.IsAlreadyExists()) << s.ToString();
  EXPECT_EQ(s.http_status(), 409);
  EXPECT_EQ(s.reason(), "AlreadyExists");
}

// Errors carry what the apiserver said: HTTP status, reason and message.
TEST_F(ClientE2ETest, ErrorsCarryApiserverStatus) {
  Json out;
  Status s = ResourceClaimClient(client_.get(), ns_).Get("absent", &out);
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_EQ(s.http_status(), 404);
  EXPECT_EQ(s.reason(), "NotFound");
  EXPECT_NE(s.message().find("resourceclaims.resource.k8s.io \"absent\" not found"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().rfind("get resourceclaims " + ns_ + "/absent: ", 0), 0u) << s.message();

  // An invalid name: the apiserver's validation answers 422 Invalid.
  s = ResourceClaimClient(client_.get(), ns_).Create(Claim("Not_A_Name"), &out);
  EXPECT_TRUE(s.IsInvalid()) << s.ToString();
  EXPECT_EQ(s.http_status(), 422);
  EXPECT_EQ(s.reason(), "Invalid");

  // An unknown field under strict field validation: 400 BadRequest. Sent by a
  // client without the OpenAPI hook, which would (rightly) flag the object.
  std::unique_ptr<Client> raw;
  ASSERT_TRUE(Client::New(config_, ClientOptions{}, &raw).ok());
  Json bad = Claim(UniqueName("claim"));
  bad["spec"]["devices"]["requests"][0]["deviceClassName"] = "v1beta1-style";
  s = raw->Create(ResourceClaims(), ns_, bad, &out);
  EXPECT_TRUE(s.IsInvalid()) << s.ToString();
  EXPECT_EQ(s.http_status(), 400);
  EXPECT_NE(s.message().find("unknown field"), std::string::npos) << s.message();
}

// DELETE with a finalizer only sets deletionTimestamp; the object stays until
// the last finalizer is removed, and no finalizer can be added meanwhile.
TEST_F(ClientE2ETest, FinalizerHoldsDeletion) {
  ResourceClient claims = ResourceClaimClient(client_.get(), ns_);
  Json obj = Claim("final");
  obj["metadata"]["finalizers"] = {"cxlkv.dev/free-memory"};
  Json created, got;
  ASSERT_TRUE(claims.Create(obj, &created).ok());
  Status s = claims.Delete("final");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE((s = claims.Get("final", &got)).ok()) << s.ToString();
  EXPECT_TRUE(got["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(got["metadata"]["finalizers"], Json({"cxlkv.dev/free-memory"}));

  Json tmp;
  s = claims.Patch("final", PatchType::kMerge,
                   {{"metadata", {{"finalizers", {"cxlkv.dev/free-memory", "cxlkv.dev/other"}}}}},
                   &tmp);
  EXPECT_FALSE(s.ok()) << "a finalizer was added to an object being deleted";
  EXPECT_TRUE(s.IsInvalid() || s.code() == Status::Code::kForbidden) << s.ToString();

  // Remove the finalizer with a JSON patch guarded by a `test` of the
  // resourceVersion (an optimistic-concurrency precondition).
  Json ops = Json::array({{{"op", "test"},
                           {"path", "/metadata/resourceVersion"},
                           {"value", got["metadata"]["resourceVersion"]}},
                          {{"op", "remove"}, {"path", "/metadata/finalizers/0"}}});
  s = claims.Patch("final", PatchType::kJson, ops, &tmp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(
      Eventually([&] { return claims.Get("final", &got).IsNotFound(); }, std::chrono::seconds(10)));
}

TEST_F(ClientE2ETest, DeletePreconditions) {
  ResourceClient leases = LeaseClient(client_.get(), ns_);
  Json created;
  ASSERT_TRUE(leases.Create({{"metadata", {{"name", "pre"}}}}, &created).ok());
  DeleteOptions wrong_uid;
  wrong_uid.uid = "00000000-0000-0000-0000-000000000000";
  Status s = leases.Delete("pre", wrong_uid);
  EXPECT_TRUE(s.IsConflict()) << s.ToString();
  EXPECT_EQ(s.http_status(), 409);
  DeleteOptions wrong_rv;
  wrong_rv.resource_version = "1";
  EXPECT_TRUE(leases.Delete("pre", wrong_rv).IsConflict());
  DeleteOptions right;
  right.uid = created["metadata"]["uid"].get<std::string>();
  right.resource_version = created["metadata"]["resourceVersion"].get<std::string>();
  s = leases.Delete("pre", right);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// The main resource ignores status; /status ignores everything but status.
TEST_F(ClientE2ETest, StatusSubresourceIsolation) {
  ResourceClient claims = ResourceClaimClient(client_.get(), ns_);
  Json claim;
  ASSERT_TRUE(claims.Create(Claim("iso"), &claim).ok());
  Json allocation = {{"devices",
                      {{"results", Json::array({{{"request", "mem"},
                                                 {"driver", "iso.e2e.cxlkv.dev"},
                                                 {"pool", "pool-a"},
                                                 {"device", "region-0"}}})}}}};

  Json main_write = claim;
  main_write["status"]["allocation"] = allocation;
  main_write["metadata"]["labels"]["via"] = "main";
  Json out;
  Status s = claims.Update(main_write, &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out["metadata"]["labels"]["via"], "main");
  EXPECT_FALSE(out.contains("status") && out["status"].contains("allocation"))
      << "status written through the main resource";

  Json status_write = out;
  status_write["status"]["allocation"] = allocation;
  status_write["metadata"]["labels"]["via"] = "status";
  ASSERT_TRUE((s = claims.UpdateStatus(status_write, &out)).ok()) << s.ToString();
  EXPECT_EQ(out["status"]["allocation"]["devices"]["results"][0]["device"], "region-0");
  EXPECT_EQ(out["metadata"]["labels"]["via"], "main") << "metadata written through /status";

  // A merge patch on /status changes status only as well.
  ASSERT_TRUE((s = claims.Patch("iso", PatchType::kMerge,
                                {{"status",
                                  {{"devices", Json::array({{{"driver", "iso.e2e.cxlkv.dev"},
                                                             {"pool", "pool-a"},
                                                             {"device", "region-0"}}})}}}},
                                &out, {}, "status"))
                  .ok())
      << s.ToString();
  EXPECT_EQ(out["status"]["devices"][0]["device"], "region-0");
  Json got;
  ASSERT_TRUE(claims.Get("iso", &got).ok());
  EXPECT_EQ(got["status"]["devices"].size(), 1u);
}

// Server-side apply tracks field owners: a second manager's change to an
// owned field conflicts unless forced, and forcing moves ownership.
TEST_F(ClientE2ETest, ServerSideApplyFieldOwnership) {
  ResourceClient claims = ResourceClaimClient(client_.get(), ns_);
  WriteOptions a;
  a.field_manager = "manager-a";
  Json obj = Claim("ssa");
  obj["metadata"]["labels"] = {{"tier", "gold"}};
  Json out;
  Status s = claims.Patch("ssa", PatchType::kApply, obj, &out, a);
  ASSERT_TRUE(s.ok()) << s.ToString();

  WriteOptions b;
  b.field_manager = "manager-b";
  Json change = {{"metadata", {{"name", "ssa"}, {"labels", {{"tier", "silver"}}}}}};
  s = claims.Patch("ssa", PatchType::kApply, change, &out, b);
  EXPECT_TRUE(s.IsConflict()) << s.ToString();
  EXPECT_EQ(s.http_status(), 409);
  EXPECT_NE(s.message().find("manager-a"), std::string::npos) << s.message();

  b.force = true;
  ASSERT_TRUE((s = claims.Patch("ssa", PatchType::kApply, change, &out, b)).ok()) << s.ToString();
  EXPECT_EQ(out["metadata"]["labels"]["tier"], "silver");
  bool b_owns_tier = false;
  for (const auto& mf : out["metadata"]["managedFields"]) {
    if (mf.value("manager", "") == "manager-b" &&
        mf["fieldsV1"].dump().find("f:tier") != std::string::npos) {
      b_owns_tier = true;
    }
  }
  EXPECT_TRUE(b_owns_tier) << out["metadata"]["managedFields"].dump();

  // manager-a no longer owns the label, so re-applying without it leaves it.
  Json again = Claim("ssa");
  ASSERT_TRUE((s = claims.Patch("ssa", PatchType::kApply, again, &out, a)).ok()) << s.ToString();
  EXPECT_EQ(out["metadata"]["labels"]["tier"], "silver");
}

TEST_F(ClientE2ETest, ListPagesWithLimitAndContinue) {
  ResourceClient leases = LeaseClient(client_.get(), ns_);
  Json out;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(leases.Create({{"metadata", {{"name", "page-" + std::to_string(i)}}}}, &out).ok());
  }
  ListOptions lo;
  lo.limit = 2;
  Json page;
  Status s = leases.List(lo, &page);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(page["items"].size(), 2u);
  EXPECT_FALSE(page["metadata"].value("continue", "").empty());

  std::vector<Json> all;
  std::string rv;
  ASSERT_TRUE((s = leases.ListAll({}, 2, &all, &rv)).ok()) << s.ToString();
  EXPECT_EQ(all.size(), 5u);
  EXPECT_FALSE(rv.empty());
  EXPECT_EQ(all[0]["kind"], "Lease");

  lo.continue_token = "not-a-token";
  EXPECT_FALSE(leases.List(lo, &page).ok());
}

TEST_F(ClientE2ETest, DryRunDoesNotPersist) {
  ResourceClient claims = ResourceClaimClient(client_.get(), ns_);
  WriteOptions dry;
  dry.dry_run = true;
  Json out;
  Status s = claims.Create(Claim("dry"), &out, dry);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(claims.Get("dry", &out).IsNotFound());
}

TEST_F(ClientE2ETest, RawVersionEndpoint) {
  Json v;
  Status s = client_->Raw("GET", "/version", "", "", "", &v);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const char* want = std::getenv("CXLKV_E2E_K8S_VERSION");
  if (want != nullptr) {
    EXPECT_EQ(v.value("gitVersion", ""), want);
  }
}

}  // namespace
}  // namespace cxlkv::kube
