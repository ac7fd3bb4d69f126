#include "runtime/pod/oci_spec.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace knap::runtime {
namespace {

using nlohmann::json;

const char* kPasswd =
    "root:x:0:0:root:/root:/bin/sh\n"
    "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    "# a comment line\n"
    "app:x:1000:1001:App:/home/app:/bin/sh\n"
    "web:x:33:33:www-data:/var/www:/usr/sbin/nologin\n";
const char* kGroup =
    "root:x:0:\n"
    "daemon:x:1:\n"
    "www-data:x:33:\n"
    "appgrp:x:1001:\n"
    "audio:x:29:app,web\n"
    "video:x:44:web\n"
    "staff:x:50:app\n";

PodSpecInput baseInput(json container = json::object()) {
  PodSpecInput in;
  if (!container.contains("image")) container["image"] = "example.com/app:1";
  in.revision = {
      {"metadata", {{"name", "hello-00001"}, {"namespace", "default"}}},
      {"spec",
       {{"containerConcurrency", 0}, {"timeoutSeconds", 300}, {"containers", json::array({container})}}}};
  in.image_config = {{"architecture", "amd64"},
                     {"config",
                      {{"Entrypoint", {"/app/server"}},
                       {"Cmd", {"--serve"}},
                       {"Env", {"PATH=/app/bin:/usr/bin", "LANG=C.UTF-8", "PORT=1"}},
                       {"WorkingDir", "/app"}}}};
  in.service_name = "hello";
  in.configuration_name = "hello";
  in.revision_name = "hello-00001";
  in.pod_id = "hello-00001-pod-abc";
  in.netns_path = "/var/run/netns/knap-hello-00001-pod-abc";
  in.etc_passwd = kPasswd;
  in.etc_group = kGroup;
  in.resolv_conf_path = "/var/lib/knap/pods/p/resolv.conf";
  in.hosts_path = "/var/lib/knap/pods/p/hosts";
  in.hostname_path = "/var/lib/knap/pods/p/hostname";
  return in;
}

json mustBuild(const PodSpecInput& in) {
  auto spec = buildOciSpec(in);
  EXPECT_TRUE(spec.isOk()) << spec.status().toString();
  return spec.isOk() ? *spec : json::object();
}

// --- command / args ---------------------------------------------------------

struct ArgsCase {
  const char* name;
  json entrypoint;  // null: image has none
  json cmd;
  json command;  // null: container sets none
  json args;
  std::vector<std::string> want;
};

class ArgsTest : public ::testing::TestWithParam<ArgsCase> {};

TEST_P(ArgsTest, CommandArgsMatrix) {
  const ArgsCase& tc = GetParam();
  json container = json::object();
  if (!tc.command.is_null()) container["command"] = tc.command;
  if (!tc.args.is_null()) container["args"] = tc.args;
  PodSpecInput in = baseInput(container);
  in.image_config["config"].erase("Entrypoint");
  in.image_config["config"].erase("Cmd");
  if (!tc.entrypoint.is_null()) in.image_config["config"]["Entrypoint"] = tc.entrypoint;
  if (!tc.cmd.is_null()) in.image_config["config"]["Cmd"] = tc.cmd;
  json spec = mustBuild(in);
  EXPECT_EQ(spec["process"]["args"].get<std::vector<std::string>>(), tc.want);
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, ArgsTest,
    ::testing::Values(
        ArgsCase{"image_only", {"/ep", "-x"}, {"c1", "c2"}, nullptr, nullptr, {"/ep", "-x", "c1", "c2"}},
        ArgsCase{"image_cmd_only", nullptr, {"/bin/app", "a"}, nullptr, nullptr, {"/bin/app", "a"}},
        ArgsCase{
            "command_replaces_entrypoint_and_cmd", {"/ep"}, {"c1"}, {"/bin/other"}, nullptr, {"/bin/other"}},
        ArgsCase{
            "command_and_args", {"/ep"}, {"c1"}, {"/bin/other", "-v"}, {"a1"}, {"/bin/other", "-v", "a1"}},
        ArgsCase{"args_keep_entrypoint", {"/ep"}, {"c1"}, nullptr, {"a1", "a2"}, {"/ep", "a1", "a2"}},
        ArgsCase{"args_without_entrypoint", nullptr, {"c1"}, nullptr, {"/bin/x", "y"}, {"/bin/x", "y"}},
        ArgsCase{"empty_args_drop_cmd", {"/ep"}, {"c1"}, nullptr, json::array(), {"/ep"}},
        ArgsCase{"var_expansion",
                 {"/ep"},
                 nullptr,
                 nullptr,
                 {"--port=$(PORT)", "$(K_REVISION)", "$$(PORT)", "$(NOPE)"},
                 {"/ep", "--port=8080", "hello-00001", "$(PORT)", "$(NOPE)"}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(OciSpecTest, NoCommandIsAClearError) {
  PodSpecInput in = baseInput();
  in.image_config["config"].erase("Entrypoint");
  in.image_config["config"].erase("Cmd");
  auto spec = buildOciSpec(in);
  ASSERT_FALSE(spec.isOk());
  EXPECT_EQ(spec.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "no command: the image has no Entrypoint or Cmd and the container sets no command");
}

TEST(OciSpecTest, AcceptsBareImageConfigAndBareRevisionSpec) {
  PodSpecInput in = baseInput();
  in.image_config = in.image_config["config"];
  in.revision = in.revision["spec"];
  json spec = mustBuild(in);
  EXPECT_EQ(spec["process"]["args"], json({"/app/server", "--serve"}));
}

// --- environment ------------------------------------------------------------

std::vector<std::string> envOf(const json& spec) {
  return spec["process"]["env"].get<std::vector<std::string>>();
}

TEST(OciSpecTest, EnvOrderImageThenContainerThenReserved) {
  json container = {{"env", json::array({{{"name", "FOO"}, {"value", "bar"}},
                                         {{"name", "LANG"}, {"value", "de_DE.UTF-8"}},
                                         {{"name", "REF"}, {"value", "x-$(FOO)-$(PORT)"}},
                                         {{"name", "EMPTY"}}})},
                    {"ports", json::array({{{"containerPort", 8801}}})}};
  json spec = mustBuild(baseInput(container));
  std::vector<std::string> want = {"PATH=/app/bin:/usr/bin",
                                   "LANG=de_DE.UTF-8",
                                   "PORT=8801",  // image order, replaced in place
                                   "FOO=bar",
                                   "REF=x-bar-$(PORT)",
                                   "EMPTY=",  // env only sees earlier vars
                                   "K_SERVICE=hello",
                                   "K_CONFIGURATION=hello",
                                   "K_REVISION=hello-00001"};
  EXPECT_EQ(envOf(spec), want);
}

TEST(OciSpecTest, ReservedVarsAlwaysWinAndPortDefaults) {
  json container = {{"env", json::array({{{"name", "PORT"}, {"value", "9999"}},
                                         {{"name", "K_SERVICE"}, {"value", "evil"}}})}};
  PodSpecInput in = baseInput(container);
  in.service_name = "";  // a Revision without a Service
  in.image_config["config"]["Env"] = json::array();
  json spec = mustBuild(in);
  std::vector<std::string> want = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                   "PORT=8080", "K_SERVICE=", "K_CONFIGURATION=hello",
                                   "K_REVISION=hello-00001"};
  EXPECT_EQ(envOf(spec), want);
}

TEST(OciSpecTest, ContainerPortZeroMeans8080) {
  json spec = mustBuild(baseInput({{"ports", json::array({{{"containerPort", 0}}})}}));
  auto env = envOf(spec);
  EXPECT_NE(std::find(env.begin(), env.end(), "PORT=8080"), env.end());
}

struct EnvErrorCase {
  const char* name;
  json env;
  std::string want;
};
class EnvErrorTest : public ::testing::TestWithParam<EnvErrorCase> {};
TEST_P(EnvErrorTest, Rejects) {
  auto spec = buildOciSpec(baseInput({{"env", GetParam().env}}));
  ASSERT_FALSE(spec.isOk());
  EXPECT_EQ(spec.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(spec.status().message(), GetParam().want);
}
INSTANTIATE_TEST_SUITE_P(
    ValueFrom, EnvErrorTest,
    ::testing::Values(
        EnvErrorCase{
            "secret",
            json::array({{{"name", "A"}, {"value", "1"}},
                         {{"name", "B"}, {"valueFrom", {{"secretKeyRef", {{"name", "s"}, {"key", "k"}}}}}}}),
            "env[1].valueFrom.secretKeyRef: the value was not resolved"},
        EnvErrorCase{"configmap",
                     json::array({{{"name", "B"},
                                   {"valueFrom", {{"configMapKeyRef", {{"name", "c"}, {"key", "k"}}}}}}}),
                     "env[0].valueFrom.configMapKeyRef: the value was not resolved"},
        EnvErrorCase{"missing_name", json::array({{{"value", "1"}}}), "env[0].name: required"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(OciSpecTest, EnvFieldRefPodName) {
  json env =
      json::array({{{"name", "POD"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
                   {{"name", "NS"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.namespace"}}}}}}});
  auto e = envOf(mustBuild(baseInput({{"env", env}})));
  EXPECT_NE(std::find(e.begin(), e.end(), "POD=hello-00001-pod-abc"), e.end());
  EXPECT_NE(std::find(e.begin(), e.end(), "NS=default"), e.end());
}

// Secret/ConfigMap values come resolved from the caller: envFrom first, then
// env (a valueFrom ref takes its value from env_refs; an optional one that
// resolved to nothing is not defined), and $(VAR) sees both.
TEST(OciSpecTest, EnvFromAndValueFromUseResolvedValues) {
  json env =
      json::array({{{"name", "PW"}, {"valueFrom", {{"secretKeyRef", {{"name", "s"}, {"key", "pw"}}}}}},
                   {{"name", "OPT"},
                    {"valueFrom", {{"configMapKeyRef", {{"name", "c"}, {"key", "x"}, {"optional", true}}}}}},
                   {{"name", "GREETING"}, {"value", "hi $(CM_NAME)"}}});
  PodSpecInput in =
      baseInput({{"env", env}, {"envFrom", json::array({{{"configMapRef", {{"name", "c"}}}}})}});
  in.env_from = {{"CM_NAME", "world"}, {"GREETING", "from-cm"}};
  in.env_refs = {{"PW", "s3cr3t"}};
  auto e = envOf(mustBuild(in));
  EXPECT_NE(std::find(e.begin(), e.end(), "CM_NAME=world"), e.end());
  EXPECT_NE(std::find(e.begin(), e.end(), "PW=s3cr3t"), e.end());
  EXPECT_NE(std::find(e.begin(), e.end(), "GREETING=hi world"), e.end());  // env replaces envFrom in place
  EXPECT_EQ(std::find(e.begin(), e.end(), "GREETING=from-cm"), e.end());
  for (const auto& v : e) EXPECT_NE(v.rfind("OPT=", 0), 0u) << v;
  auto bad = buildOciSpec(baseInput({{"envFrom", json::array({json::object()})}}));
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().message(), "envFrom[0]: needs secretRef or configMapRef");
}

// --- working directory ----------------------------------------------------

TEST(OciSpecTest, WorkingDirPrecedence) {
  EXPECT_EQ(mustBuild(baseInput({{"workingDir", "/srv"}}))["process"]["cwd"], "/srv");
  EXPECT_EQ(mustBuild(baseInput())["process"]["cwd"], "/app");
  PodSpecInput in = baseInput();
  in.image_config["config"].erase("WorkingDir");
  EXPECT_EQ(mustBuild(in)["process"]["cwd"], "/");
}

// --- quantities -------------------------------------------------------------

struct QuantityCase {
  const char* in;
  int64_t bytes;     // -1: error
  int64_t millicpu;  // -1: error
};
class QuantityTest : public ::testing::TestWithParam<QuantityCase> {};
TEST_P(QuantityTest, Parses) {
  const auto& tc = GetParam();
  auto b = parseQuantity(tc.in);
  auto m = parseMilliCpu(tc.in);
  if (tc.bytes < 0) {
    EXPECT_FALSE(b.isOk()) << tc.in;
    if (!b.isOk()) {
      EXPECT_EQ(b.status().code(), Code::kInvalidArgument);
    }
  } else {
    ASSERT_TRUE(b.isOk()) << tc.in << ": " << b.status().toString();
    EXPECT_EQ(*b, tc.bytes) << tc.in;
  }
  if (tc.millicpu < 0) {
    EXPECT_FALSE(m.isOk()) << tc.in;
  } else {
    ASSERT_TRUE(m.isOk()) << tc.in << ": " << m.status().toString();
    EXPECT_EQ(*m, tc.millicpu) << tc.in;
  }
}
INSTANTIATE_TEST_SUITE_P(
    Kubernetes, QuantityTest,
    ::testing::Values(
        QuantityCase{"128Mi", 134217728, 134217728000}, QuantityCase{"1G", 1000000000, 1000000000000},
        QuantityCase{"500M", 500000000, 500000000000}, QuantityCase{"1e9", 1000000000, 1000000000000},
        QuantityCase{"1E3", 1000, 1000000}, QuantityCase{"0.5Gi", 536870912, 536870912000},
        QuantityCase{"1.5Ki", 1536, 1536000}, QuantityCase{"1", 1, 1000}, QuantityCase{"500m", 1, 500},
        QuantityCase{"0.5", 1, 500}, QuantityCase{"0.0001", 1, 1}, QuantityCase{"2.25", 3, 2250},
        QuantityCase{"100k", 100000, 100000000}, QuantityCase{"1000000000n", 1, 1000},
        QuantityCase{"0", 0, 0}, QuantityCase{"+1Ki", 1024, 1024000}, QuantityCase{"", -1, -1},
        QuantityCase{"Mi", -1, -1}, QuantityCase{"-1", -1, -1}, QuantityCase{"1..5", -1, -1},
        QuantityCase{"12XB", -1, -1}, QuantityCase{"1 Gi", -1, -1}, QuantityCase{"100Ei", -1, -1}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(QuantityTest, JsonNumbers) {
  EXPECT_EQ(*parseQuantityJson(json(1073741824)), 1073741824);
  EXPECT_EQ(*parseMilliCpuJson(json(0.25)), 250);
  EXPECT_EQ(*parseMilliCpuJson(json(2)), 2000);
  EXPECT_FALSE(parseQuantityJson(json(true)).isOk());
}

// --- resources -> cgroup ------------------------------------------------------

struct ResourceCase {
  const char* name;
  json resources;
  std::optional<int64_t> memory_limit;
  int64_t shares;
  std::optional<int64_t> quota;  // period is 100000 whenever quota is set
};
class ResourceTest : public ::testing::TestWithParam<ResourceCase> {};
TEST_P(ResourceTest, MapsToCgroupValues) {
  const auto& tc = GetParam();
  json container = json::object();
  if (!tc.resources.is_null()) container["resources"] = tc.resources;
  json r = mustBuild(baseInput(container))["linux"]["resources"];
  if (tc.memory_limit) {
    EXPECT_EQ(r["memory"]["limit"], *tc.memory_limit);
  } else {
    EXPECT_FALSE(r.contains("memory"));
  }
  EXPECT_EQ(r["cpu"]["shares"], tc.shares);
  if (tc.quota) {
    EXPECT_EQ(r["cpu"]["quota"], *tc.quota);
    EXPECT_EQ(r["cpu"]["period"], 100000);
  } else {
    EXPECT_FALSE(r["cpu"].contains("quota"));
    EXPECT_FALSE(r["cpu"].contains("period"));
  }
}
INSTANTIATE_TEST_SUITE_P(
    Kubelet, ResourceTest,
    ::testing::Values(
        ResourceCase{
            "cpu1_mem128Mi", {{"limits", {{"cpu", "1"}, {"memory", "128Mi"}}}}, 134217728, 1024, 100000},
        ResourceCase{"nothing_set", nullptr, std::nullopt, 2, std::nullopt},
        ResourceCase{"request_only", {{"requests", {{"cpu", "250m"}}}}, std::nullopt, 256, std::nullopt},
        ResourceCase{"limit_and_request",
                     {{"requests", {{"cpu", "100m"}}}, {"limits", {{"cpu", "500m"}}}},
                     std::nullopt,
                     102,
                     50000},
        ResourceCase{"tiny_cpu", {{"limits", {{"cpu", "1m"}}}}, std::nullopt, 2, 1000},
        ResourceCase{
            "half_cpu_decimal", {{"limits", {{"cpu", "0.5"}, {"memory", "1G"}}}}, 1000000000, 512, 50000},
        ResourceCase{"two_cpus", {{"limits", {{"cpu", 2}}}}, std::nullopt, 2048, 200000},
        ResourceCase{
            "memory_request_ignored", {{"requests", {{"memory", "64Mi"}}}}, std::nullopt, 2, std::nullopt}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(OciSpecTest, BadQuantityNamesTheField) {
  auto spec = buildOciSpec(baseInput({{"resources", {{"limits", {{"memory", "12XB"}}}}}}));
  ASSERT_FALSE(spec.isOk());
  EXPECT_NE(spec.status().message().find("resources.limits.memory"), std::string::npos)
      << spec.status().message();
}

// --- user ---------------------------------------------------------------------

struct UserCase {
  const char* name;
  std::string image_user;
  json security_context;  // container level
  json pod_security_context;
  int64_t uid;  // -1: error
  int64_t gid;
  std::vector<uint32_t> gids;
  std::string error_part = "";
};
class UserTest : public ::testing::TestWithParam<UserCase> {};
TEST_P(UserTest, Resolves) {
  const auto& tc = GetParam();
  json container = json::object();
  if (!tc.security_context.is_null()) container["securityContext"] = tc.security_context;
  PodSpecInput in = baseInput(container);
  if (!tc.pod_security_context.is_null()) in.revision["spec"]["securityContext"] = tc.pod_security_context;
  in.image_config["config"]["User"] = tc.image_user;
  auto spec = buildOciSpec(in);
  if (tc.uid < 0) {
    ASSERT_FALSE(spec.isOk());
    EXPECT_EQ(spec.status().code(), Code::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(tc.error_part), std::string::npos) << spec.status().message();
    return;
  }
  ASSERT_TRUE(spec.isOk()) << spec.status().toString();
  const json& u = (*spec)["process"]["user"];
  EXPECT_EQ(u["uid"], tc.uid);
  EXPECT_EQ(u["gid"], tc.gid);
  EXPECT_EQ(u["additionalGids"].get<std::vector<uint32_t>>(), tc.gids);
}
INSTANTIATE_TEST_SUITE_P(
    Identity, UserTest,
    ::testing::Values(
        UserCase{"default_root", "", nullptr, nullptr, 0, 0, {0}},
        UserCase{"name", "app", nullptr, nullptr, 1000, 1001, {1001, 29, 50}},
        UserCase{"uid_in_passwd", "33", nullptr, nullptr, 33, 33, {33, 29, 44}},
        UserCase{"uid_not_in_passwd", "4242", nullptr, nullptr, 4242, 0, {0}},
        UserCase{"uid_gid", "1000:44", nullptr, nullptr, 1000, 44, {44, 29, 50}},
        UserCase{"name_group", "app:staff", nullptr, nullptr, 1000, 50, {50, 29}},
        UserCase{"uid_groupname", "4242:www-data", nullptr, nullptr, 4242, 33, {33}},
        UserCase{"unknown_name", "nobody2", nullptr, nullptr, -1, 0, {}, "no user \"nobody2\""},
        UserCase{"unknown_group", "app:wheel", nullptr, nullptr, -1, 0, {}, "no group \"wheel\""},
        UserCase{"run_as_user_wins", "app", {{"runAsUser", 2020}}, nullptr, 2020, 0, {0}},
        UserCase{"run_as_user_and_group",
                 "app",
                 {{"runAsUser", 2020}, {"runAsGroup", 3030}},
                 nullptr,
                 2020,
                 3030,
                 {3030}},
        UserCase{"run_as_group_only", "app", {{"runAsGroup", 7}}, nullptr, 1000, 7, {7, 29, 50}},
        UserCase{"pod_level",
                 "",
                 nullptr,
                 {{"runAsUser", 33}, {"supplementalGroups", {5, 6}}},
                 33,
                 33,
                 {33, 29, 44, 5, 6}},
        UserCase{
            "container_over_pod", "", {{"runAsUser", 1000}}, {{"runAsUser", 33}}, 1000, 1001, {1001, 29, 50}},
        UserCase{"non_root_violated", "", {{"runAsNonRoot", true}}, nullptr, -1, 0, {}, "runAsNonRoot"},
        UserCase{"non_root_ok", "app", {{"runAsNonRoot", true}}, nullptr, 1000, 1001, {1001, 29, 50}},
        UserCase{"negative_uid", "", {{"runAsUser", -10}}, nullptr, -1, 0, {}, "runAsUser"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(OciSpecTest, NamedUserWithoutPasswdFile) {
  PodSpecInput in = baseInput();
  in.etc_passwd.reset();
  in.image_config["config"]["User"] = "app";
  auto spec = buildOciSpec(in);
  ASSERT_FALSE(spec.isOk());
  EXPECT_NE(spec.status().message().find("has no /etc/passwd"), std::string::npos);
  in.image_config["config"]["User"] = "1000";
  EXPECT_EQ(mustBuild(in)["process"]["user"]["uid"], 1000);
}

// --- security / kernel isolation ------------------------------------------------

std::vector<std::string> capsOf(const json& spec, const char* set = "bounding") {
  return spec["process"]["capabilities"][set].get<std::vector<std::string>>();
}

TEST(OciSpecTest, DefaultCapabilitiesAreContainerds) {
  json spec = mustBuild(baseInput());
  auto caps = capsOf(spec);
  EXPECT_EQ(caps.size(), 14u);
  for (const char* c : {"CAP_CHOWN", "CAP_NET_BIND_SERVICE", "CAP_KILL", "CAP_AUDIT_WRITE", "CAP_NET_RAW"}) {
    EXPECT_NE(std::find(caps.begin(), caps.end(), c), caps.end()) << c;
  }
  EXPECT_EQ(std::find(caps.begin(), caps.end(), "CAP_SYS_ADMIN"), caps.end());
  EXPECT_EQ(capsOf(spec, "effective"), caps);
  EXPECT_EQ(capsOf(spec, "permitted"), caps);
  EXPECT_FALSE(spec["process"]["capabilities"].contains("inheritable"));
  EXPECT_FALSE(spec["process"]["capabilities"].contains("ambient"));
}

TEST(OciSpecTest, CapabilitiesDropAndAdd) {
  auto caps = capsOf(
      mustBuild(baseInput({{"securityContext", {{"capabilities", {{"drop", {"NET_RAW", "CAP_KILL"}}}}}}})));
  EXPECT_EQ(caps.size(), 12u);
  EXPECT_EQ(std::find(caps.begin(), caps.end(), "CAP_NET_RAW"), caps.end());
  EXPECT_EQ(std::find(caps.begin(), caps.end(), "CAP_KILL"), caps.end());

  caps = capsOf(mustBuild(baseInput({{"securityContext", {{"capabilities", {{"drop", {"ALL"}}}}}}})));
  EXPECT_TRUE(caps.empty());

  caps = capsOf(mustBuild(baseInput(
      {{"securityContext", {{"capabilities", {{"drop", {"ALL"}}, {"add", {"NET_BIND_SERVICE"}}}}}}})));
  EXPECT_EQ(caps, std::vector<std::string>{"CAP_NET_BIND_SERVICE"});

  auto bad = buildOciSpec(baseInput({{"securityContext", {{"capabilities", {{"drop", {"NET_RAWW"}}}}}}}));
  EXPECT_FALSE(bad.isOk());
}

TEST(OciSpecTest, NoNewPrivilegesUnlessEscalationAllowed) {
  EXPECT_EQ(mustBuild(baseInput())["process"]["noNewPrivileges"], true);
  EXPECT_EQ(mustBuild(baseInput(
                {{"securityContext", {{"allowPrivilegeEscalation", false}}}}))["process"]["noNewPrivileges"],
            true);
  EXPECT_EQ(mustBuild(baseInput(
                {{"securityContext", {{"allowPrivilegeEscalation", true}}}}))["process"]["noNewPrivileges"],
            false);
  EXPECT_FALSE(buildOciSpec(baseInput({{"securityContext", {{"privileged", true}}}})).isOk());
}

TEST(OciSpecTest, ReadOnlyRootFilesystem) {
  EXPECT_EQ(mustBuild(baseInput())["root"], json({{"path", "rootfs"}, {"readonly", false}}));
  EXPECT_EQ(
      mustBuild(baseInput({{"securityContext", {{"readOnlyRootFilesystem", true}}}}))["root"]["readonly"],
      true);
}

TEST(OciSpecTest, ProcessBasics) {
  json spec = mustBuild(baseInput());
  EXPECT_EQ(spec["process"]["terminal"], false);
  EXPECT_EQ(spec["hostname"], "hello-00001-pod-abc");
  ASSERT_EQ(spec["process"]["rlimits"].size(), 1u);
  EXPECT_EQ(spec["process"]["rlimits"][0]["type"], "RLIMIT_NOFILE");
  EXPECT_EQ(spec["process"]["rlimits"][0]["soft"], 1024);
  EXPECT_EQ(spec["process"]["rlimits"][0]["hard"], 1024);
  PodSpecInput in = baseInput();
  in.nofile_limit = 65536;
  EXPECT_EQ(mustBuild(in)["process"]["rlimits"][0]["hard"], 65536);
  EXPECT_GE(maxNofileForPods(), 1u);
  EXPECT_LE(maxNofileForPods(), 1048576u);
  EXPECT_EQ(spec["linux"]["cgroupsPath"], "/knap/hello-00001-pod-abc");
  EXPECT_FALSE(spec.contains("annotations") && spec["annotations"].contains("seccomp"));
}

TEST(OciSpecTest, HostnameTruncatedTo63) {
  PodSpecInput in = baseInput();
  in.pod_id = std::string(80, 'a');
  in.cgroups_path = "/knap/custom";
  json spec = mustBuild(in);
  EXPECT_EQ(spec["hostname"], std::string(63, 'a'));
  EXPECT_EQ(spec["linux"]["cgroupsPath"], "/knap/custom");
}

const json* findMount(const json& spec, const std::string& dest) {
  for (const auto& m : spec["mounts"]) {
    if (m["destination"] == dest) return &m;
  }
  return nullptr;
}

TEST(OciSpecTest, ObjectVolumesAreReadOnlyBindMounts) {
  PodSpecInput in =
      baseInput({{"volumeMounts", json::array({{{"name", "creds"}, {"mountPath", "/etc/creds"}},
                                               {{"name", "conf"}, {"mountPath", "/etc/conf"}}})}});
  in.revision["spec"]["volumes"] =
      json::array({{{"name", "creds"}, {"secret", {{"secretName", "s"}}}},
                   {{"name", "conf"}, {"projected", {{"sources", json::array()}}}}});
  in.volume_dirs = {{"creds", "/var/lib/knap/pods/p/volumes/creds"},
                    {"conf", "/var/lib/knap/pods/p/volumes/conf"}};
  json spec = mustBuild(in);
  const json* creds = findMount(spec, "/etc/creds");
  ASSERT_NE(creds, nullptr);
  EXPECT_EQ((*creds)["type"], "bind");
  EXPECT_EQ((*creds)["source"], "/var/lib/knap/pods/p/volumes/creds");
  EXPECT_EQ((*creds)["options"], json({"rbind", "ro", "nosuid", "nodev"}));
  ASSERT_NE(findMount(spec, "/etc/conf"), nullptr);
}

// --- multi-container pods ---------------------------------------------------

TEST(OciSpecTest, ServingContainerIsTheOneWithPorts) {
  EXPECT_EQ(servingContainerIndex(json::array({{{"image", "a"}}})), 0);
  EXPECT_EQ(servingContainerIndex(
                json::array({{{"image", "a"}}, {{"image", "b"}, {"ports", {{{"containerPort", 1}}}}}})),
            1);
  EXPECT_EQ(
      servingContainerIndex(json::array({{{"image", "a"}, {"ports", json::array()}}, {{"image", "b"}}})), 0);
  EXPECT_EQ(servingContainerIndex(json::object()), 0);
  EXPECT_EQ(servingContainerIndex(json::array({"x", 3})), 0);
}

TEST(OciSpecTest, EachContainerGetsItsOwnSpecInThePodsNetns) {
  PodSpecInput in =
      baseInput({{"name", "side"}, {"args", {"--side"}}, {"env", {{{"name", "A"}, {"value", "side"}}}}});
  json serving = {{"name", "main"},
                  {"image", "example.com/main:1"},
                  {"ports", {{{"containerPort", 8881}}}},
                  {"env",
                   {{{"name", "A"}, {"value", "main"}},
                    {{"name", "S"}, {"valueFrom", {{"secretKeyRef", {{"name", "s"}, {"key", "k"}}}}}}}}};
  in.revision["spec"]["containers"].push_back(serving);
  // Default (-1): the serving container, index 1 here.
  in.env_refs = {{"S", "secret"}};
  json main_spec = mustBuild(in);
  std::vector<std::string> env = envOf(main_spec);
  EXPECT_NE(std::find(env.begin(), env.end(), "PORT=8881"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "A=main"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "S=secret"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "K_REVISION=hello-00001"), env.end());
  // The sidecar: its own args and env, K_* but no PORT, the same netns.
  in.container_index = 0;
  in.env_refs.clear();
  json side = mustBuild(in);
  env = envOf(side);
  EXPECT_EQ(side["process"]["args"], json({"/app/server", "--side"}));
  EXPECT_NE(std::find(env.begin(), env.end(), "A=side"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "K_SERVICE=hello"), env.end());
  EXPECT_EQ(std::find(env.begin(), env.end(), "PORT=8881"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "PORT=1"), env.end());  // the image's own, untouched
  bool netns = false;
  for (const auto& n : side["linux"]["namespaces"]) {
    if (n["type"] == "network") netns = n.value("path", "") == in.netns_path;
  }
  EXPECT_TRUE(netns);
  in.container_index = 2;
  auto missing = buildOciSpec(in);
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("spec.containers[2]: no such container"), std::string::npos);
}

TEST(OciSpecTest, SubPathBindsThatFileOfTheVolume) {
  PodSpecInput in = baseInput(
      {{"volumeMounts",
        json::array(
            {{{"name", "tok"}, {"mountPath", "/hello/token"}, {"subPath", "token"}, {"readOnly", true}}})}});
  in.revision["spec"]["volumes"] =
      json::array({{{"name", "tok"}, {"projected", {{"sources", json::array()}}}}});
  in.volume_dirs = {{"tok", "/var/lib/knap/pods/p/volumes/tok"}};
  json spec = mustBuild(in);
  const json* m = findMount(spec, "/hello/token");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ((*m)["source"], "/var/lib/knap/pods/p/volumes/tok/token");
  EXPECT_EQ((*m)["type"], "bind");
}

TEST(OciSpecTest, TmpDirIsBoundInsteadOfATmpfs) {
  // runc gives a tmpfs the mode of the image's /tmp: a host directory (1777)
  // keeps /tmp 1777 whatever the image has.
  PodSpecInput in = baseInput();
  in.tmp_dir = "/var/lib/knap/pods/p/tmp";
  json spec = mustBuild(in);
  const json* tmp = findMount(spec, "/tmp");
  ASSERT_NE(tmp, nullptr);
  EXPECT_EQ(*tmp, json({{"destination", "/tmp"},
                        {"type", "bind"},
                        {"source", "/var/lib/knap/pods/p/tmp"},
                        {"options", {"rbind", "rprivate", "nosuid", "nodev"}}}));
  in.tmp_dir = "relative";
  EXPECT_FALSE(buildOciSpec(in).isOk());
}

TEST(OciSpecTest, SharedEmptyDirIsBoundFromTheHost) {
  PodSpecInput in = baseInput(
      {{"volumeMounts", json::array({{{"name", "shared"}, {"mountPath", "/shared"}},
                                     {{"name", "shared"}, {"mountPath", "/ro"}, {"readOnly", true}}})}});
  in.revision["spec"]["volumes"] = json::array({{{"name", "shared"}, {"emptyDir", {{"sizeLimit", "1Mi"}}}}});
  in.empty_dir_dirs = {{"shared", "/var/lib/knap/pods/p/emptydir/shared"}};
  json spec = mustBuild(in);
  const json* rw = findMount(spec, "/shared");
  const json* ro = findMount(spec, "/ro");
  ASSERT_NE(rw, nullptr);
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(*rw, json({{"destination", "/shared"},
                       {"type", "bind"},
                       {"source", "/var/lib/knap/pods/p/emptydir/shared"},
                       {"options", {"rbind", "rprivate", "nosuid", "nodev"}}}));
  EXPECT_EQ((*ro)["options"], json({"rbind", "rprivate", "nosuid", "nodev", "ro"}));
}

TEST(OciSpecTest, MountsPresent) {
  json spec = mustBuild(baseInput());
  struct Want {
    const char* dest;
    const char* type;
    std::vector<std::string> must_have;
  };
  for (const Want& w : std::vector<Want>{{"/proc", "proc", {"nosuid", "noexec", "nodev"}},
                                         {"/dev", "tmpfs", {"mode=755"}},
                                         {"/dev/pts", "devpts", {"newinstance", "ptmxmode=0666"}},
                                         {"/dev/shm", "tmpfs", {"mode=1777"}},
                                         {"/dev/mqueue", "mqueue", {}},
                                         {"/sys", "sysfs", {"ro"}},
                                         {"/sys/fs/cgroup", "cgroup", {"ro", "nosuid", "noexec", "nodev"}},
                                         {"/tmp", "tmpfs", {"mode=1777"}},
                                         {"/etc/resolv.conf", "bind", {"rbind", "ro"}},
                                         {"/etc/hosts", "bind", {"rbind", "ro"}},
                                         {"/etc/hostname", "bind", {"rbind", "ro"}}}) {
    const json* m = findMount(spec, w.dest);
    ASSERT_NE(m, nullptr) << w.dest;
    EXPECT_EQ((*m)["type"], w.type) << w.dest;
    auto opts = (*m)["options"].get<std::vector<std::string>>();
    for (const auto& o : w.must_have) {
      EXPECT_NE(std::find(opts.begin(), opts.end(), o), opts.end()) << w.dest << " " << o;
    }
  }
  EXPECT_EQ((*findMount(spec, "/sys/fs/cgroup")), json({{"destination", "/sys/fs/cgroup"},
                                                        {"type", "cgroup"},
                                                        {"source", "cgroup"},
                                                        {"options", {"ro", "nosuid", "noexec", "nodev"}}}));
  EXPECT_EQ((*findMount(spec, "/etc/resolv.conf"))["source"], "/var/lib/knap/pods/p/resolv.conf");
  EXPECT_EQ((*findMount(spec, "/etc/hosts"))["source"], "/var/lib/knap/pods/p/hosts");
  // /dev/pts comes after /dev (mount order matters to runc).
  size_t dev = 0, pts = 0, i = 0;
  for (const auto& m : spec["mounts"]) {
    if (m["destination"] == "/dev") dev = i;
    if (m["destination"] == "/dev/pts") pts = i;
    ++i;
  }
  EXPECT_LT(dev, pts);
}

TEST(OciSpecTest, EmptyHostFilePathsLeaveImageFiles) {
  PodSpecInput in = baseInput();
  in.hosts_path.clear();
  in.hostname_path.clear();
  json spec = mustBuild(in);
  EXPECT_EQ(findMount(spec, "/etc/hosts"), nullptr);
  EXPECT_EQ(findMount(spec, "/etc/hostname"), nullptr);
  EXPECT_NE(findMount(spec, "/etc/resolv.conf"), nullptr);
}

TEST(OciSpecTest, EmptyDirVolumesBecomeTmpfs) {
  PodSpecInput in =
      baseInput({{"volumeMounts",
                  json::array({{{"name", "cache"}, {"mountPath", "/cache"}},
                               {{"name", "scratch"}, {"mountPath", "/scratch"}, {"readOnly", true}}})}});
  in.revision["spec"]["volumes"] = json::array({{{"name", "scratch"}, {"emptyDir", json::object()}},
                                                {{"name", "cache"}, {"emptyDir", {{"sizeLimit", "64Mi"}}}}});
  json spec = mustBuild(in);
  const json* cache = findMount(spec, "/cache");
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(*cache, json({{"destination", "/cache"},
                          {"type", "tmpfs"},
                          {"source", "tmpfs"},
                          {"options", {"nosuid", "nodev", "mode=1777", "size=67108864"}}}));
  const json* scratch = findMount(spec, "/scratch");
  ASSERT_NE(scratch, nullptr);
  EXPECT_EQ((*scratch)["options"], json({"nosuid", "nodev", "mode=1777", "ro"}));
}

TEST(OciSpecTest, UnsupportedVolumesAreClearErrors) {
  struct Case {
    json volume;
    json mount;
    std::string want;
  };
  for (const Case& c :
       std::vector<Case>{{{{"name", "v"}, {"secret", {{"secretName", "s"}}}},
                          {{"name", "v"}, {"mountPath", "/s"}},
                          "spec.volumes[0]: the files of volume \"v\" were not resolved"},
                         {{{"name", "v"}, {"configMap", {{"name", "c"}}}},
                          {{"name", "v"}, {"mountPath", "/c"}},
                          "spec.volumes[0]: the files of volume \"v\" were not resolved"},
                         {{{"name", "v"}, {"emptyDir", json::object()}},
                          {{"name", "w"}, {"mountPath", "/c"}},
                          "volumeMounts[0].name: no volume named \"w\""},
                         {{{"name", "v"}, {"emptyDir", json::object()}},
                          {{"name", "v"}, {"mountPath", "/c"}, {"subPath", "x"}},
                          "volumeMounts[0].subPath: not supported by knap for emptyDir volumes"},
                         {{{"name", "v"}, {"secret", {{"secretName", "s"}}}},
                          {{"name", "v"}, {"mountPath", "/c"}, {"subPath", "a/../../etc"}},
                          "volumeMounts[0].subPath: must be a relative path without \"..\""}}) {
    PodSpecInput in = baseInput({{"volumeMounts", json::array({c.mount})}});
    in.revision["spec"]["volumes"] = json::array({c.volume});
    auto spec = buildOciSpec(in);
    ASSERT_FALSE(spec.isOk()) << c.want;
    EXPECT_EQ(spec.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(spec.status().message(), c.want);
  }
}

TEST(OciSpecTest, MaskedAndReadonlyPaths) {
  json spec = mustBuild(baseInput());
  auto ro = spec["linux"]["readonlyPaths"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(ro.begin(), ro.end(), "/proc/sys"), ro.end());
  EXPECT_NE(std::find(ro.begin(), ro.end(), "/proc/sysrq-trigger"), ro.end());
  auto masked = spec["linux"]["maskedPaths"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(masked.begin(), masked.end(), "/proc/kcore"), masked.end());
  EXPECT_NE(std::find(masked.begin(), masked.end(), "/sys/firmware"), masked.end());
}

TEST(OciSpecTest, DevicesDenyAllThenDefaultsWithoutConsole) {
  json devices = mustBuild(baseInput())["linux"]["resources"]["devices"];
  ASSERT_FALSE(devices.empty());
  EXPECT_EQ(devices[0], json({{"allow", false}, {"access", "rwm"}}));
  bool console = false, null_dev = false, pts = false;
  for (const auto& d : devices) {
    if (d.value("major", -1) == 5 && d.value("minor", -1) == 1) console = true;
    if (d.value("major", -1) == 1 && d.value("minor", -1) == 3 && d["allow"] == true) null_dev = true;
    if (d.value("major", -1) == 136 && !d.contains("minor")) pts = true;
  }
  EXPECT_FALSE(console);
  EXPECT_TRUE(null_dev);
  EXPECT_TRUE(pts);
  EXPECT_FALSE(mustBuild(baseInput())["linux"].contains("devices"));
}

TEST(OciSpecTest, NamespacesUseTheNetnsPath) {
  json spec = mustBuild(baseInput());
  std::vector<std::string> types;
  for (const auto& ns : spec["linux"]["namespaces"]) {
    types.push_back(ns["type"]);
    if (ns["type"] == "network")
      EXPECT_EQ(ns["path"], "/var/run/netns/knap-hello-00001-pod-abc");
    else
      EXPECT_FALSE(ns.contains("path"));
  }
  EXPECT_EQ(types, (std::vector<std::string>{"pid", "ipc", "uts", "mount", "network"}));

  PodSpecInput in = baseInput();
  in.netns_path.clear();
  json without_netns = mustBuild(in);  // a named value: a range-for over a temporary's member dangles
  for (const auto& ns : without_netns["linux"]["namespaces"]) EXPECT_FALSE(ns.contains("path"));
}

TEST(OciSpecTest, MalformedInputIsInvalidArgumentNotAnException) {
  PodSpecInput in = baseInput();
  in.revision["spec"]["containers"][0]["command"] = "not-a-list";
  auto spec = buildOciSpec(in);
  ASSERT_FALSE(spec.isOk());
  EXPECT_EQ(spec.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(spec.status().message(), "command: must be a list of strings");

  in = baseInput();
  in.revision["spec"]["containers"] = json::array();
  EXPECT_FALSE(buildOciSpec(in).isOk());
  in = baseInput();
  in.image_config["config"]["Env"] = {1, 2};
  EXPECT_FALSE(buildOciSpec(in).isOk());
}

TEST(PodHostFilesTest, Contents) {
  PodHostFiles f = makePodHostFiles(std::string(70, 'p'), "10.88.0.7",
                                    "# generated\nnameserver 127.0.0.53\nnameserver 10.255.255.53\n"
                                    "nameserver ::1\nsearch example.com\noptions ndots:2\n");
  EXPECT_EQ(f.hostname, std::string(63, 'p') + "\n");
  EXPECT_EQ(f.hosts, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n10.88.0.7\t" +
                         std::string(63, 'p') + "\n");
  EXPECT_EQ(f.resolv_conf, "# generated\nnameserver 10.255.255.53\nsearch example.com\noptions ndots:2\n");

  PodHostFiles loopback_only = makePodHostFiles("p", "10.88.0.8", "nameserver 127.0.0.53\n");
  EXPECT_EQ(loopback_only.resolv_conf,
            "# knap: the host has no nameserver reachable from a pod (loopback only)\n");
}

TEST(ExpandVarsTest, KubernetesRules) {
  std::vector<std::pair<std::string, std::string>> vars = {{"A", "1"}, {"B", "two"}, {"A", "3"}};
  EXPECT_EQ(expandVars("$(A)-$(B)", vars), "3-two");
  EXPECT_EQ(expandVars("$$(A)", vars), "$(A)");
  EXPECT_EQ(expandVars("$(C)", vars), "$(C)");
  EXPECT_EQ(expandVars("cost: $5 $", vars), "cost: $5 $");
  EXPECT_EQ(expandVars("$(A", vars), "$(A");
}

}  // namespace
}  // namespace knap::runtime
