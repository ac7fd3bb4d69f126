#include "common/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

namespace knap {
namespace {

using std::chrono::hours;
using std::chrono::minutes;

TEST(DefaultConfig, HasKnativeDefaultsAndLocalhostDomain) {
  Config c = defaultConfig();
  ASSERT_EQ(c.domain.domains.size(), 1u);
  EXPECT_EQ(c.domain.domains[0].domain, "localhost");
  EXPECT_TRUE(c.domain.domains[0].selector.empty());
  EXPECT_EQ(c.autoscaler.stable_window, Seconds(60));
  EXPECT_DOUBLE_EQ(c.autoscaler.targetUtilizationFraction(), 0.7);
  EXPECT_EQ(c.defaults.revision_timeout_seconds, 300);
  EXPECT_EQ(c.gc.retain_since_create_time, Seconds(48 * 3600));
  EXPECT_EQ(c.knap.api_listen, "127.0.0.1:6443");
}

TEST(ParseConfig, EmptyTextGivesDefaults) {
  for (const char* text : {"", "# only a comment\n", "---\n"}) {
    auto c = parseConfig(text);
    ASSERT_TRUE(c.isOk()) << c.status().toString();
    ASSERT_EQ(c->domain.domains.size(), 1u);
    EXPECT_EQ(c->domain.domains[0].domain, "localhost");
    EXPECT_EQ(c->autoscaler.stable_window, Seconds(60));
  }
}

TEST(ParseConfig, EmptySectionsKeepDefaults) {
  auto c = parseConfig("autoscaler:\ndefaults: {}\nknap:\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->autoscaler.stable_window, Seconds(60));
}

// --- accepted values: each row sets one key and checks where it landed ------

struct GoodCase {
  const char* name;
  std::string yaml;
  std::function<void(const Config&)> check;
};

void PrintTo(const GoodCase& c, std::ostream* os) {
  *os << c.name;
}

class ParseConfigAccepts : public testing::TestWithParam<GoodCase> {};

TEST_P(ParseConfigAccepts, Value) {
  auto c = parseConfig(GetParam().yaml);
  ASSERT_TRUE(c.isOk()) << GetParam().yaml << "\n" << c.status().toString();
  GetParam().check(*c);
}

#define CHECK(expr) [](const Config& c) { EXPECT_TRUE(expr) << #expr; }

INSTANTIATE_TEST_SUITE_P(Table, ParseConfigAccepts,
                         testing::Values(
                             // autoscaler
                             GoodCase{"CcTargetPercentageAsPercent",
                                      "autoscaler:\n  container-concurrency-target-percentage: \"80\"",
                                      CHECK(c.autoscaler.targetUtilizationFraction() == 0.8)},
                             GoodCase{"CcTargetPercentageAsFraction",
                                      "autoscaler:\n  container-concurrency-target-percentage: 0.5",
                                      CHECK(c.autoscaler.targetUtilizationFraction() == 0.5)},
                             GoodCase{"CcTargetPercentage100",
                                      "autoscaler:\n  container-concurrency-target-percentage: \"100\"",
                                      CHECK(c.autoscaler.targetUtilizationFraction() == 1.0)},
                             GoodCase{"CcTargetDefault",
                                      "autoscaler:\n  container-concurrency-target-default: \"10\"",
                                      CHECK(c.autoscaler.container_concurrency_target_default == 10)},
                             GoodCase{"RpsTargetDefault",
                                      "autoscaler:\n  requests-per-second-target-default: \"0.01\"",
                                      CHECK(c.autoscaler.requests_per_second_target_default == 0.01)},
                             GoodCase{"TbcUnlimited", "autoscaler:\n  target-burst-capacity: \"-1\"",
                                      CHECK(c.autoscaler.target_burst_capacity == -1)},
                             GoodCase{"TbcZero", "autoscaler:\n  target-burst-capacity: \"0\"",
                                      CHECK(c.autoscaler.target_burst_capacity == 0)},
                             GoodCase{
                                 "StableWindowMin",
                                 "autoscaler:\n  stable-window: \"6s\"\n  panic-window-percentage: \"20\"",
                                 CHECK(c.autoscaler.stable_window == Seconds(6))},
                             GoodCase{"StableWindowMax", "autoscaler:\n  stable-window: 1h",
                                      CHECK(c.autoscaler.stable_window == hours(1))},
                             GoodCase{"StableWindowMinutes", "autoscaler:\n  stable-window: 2m30s",
                                      CHECK(c.autoscaler.stable_window == Seconds(150))},
                             GoodCase{"PanicWindowPercentage",
                                      "autoscaler:\n  panic-window-percentage: \"20.0\"",
                                      CHECK(c.autoscaler.panic_window_percentage == 20.0)},
                             GoodCase{"PanicThreshold", "autoscaler:\n  panic-threshold-percentage: \"110\"",
                                      CHECK(c.autoscaler.panic_threshold_percentage == 110)},
                             GoodCase{"MaxScaleUpRate", "autoscaler:\n  max-scale-up-rate: \"1.5\"",
                                      CHECK(c.autoscaler.max_scale_up_rate == 1.5)},
                             GoodCase{"MaxScaleDownRate", "autoscaler:\n  max-scale-down-rate: 4",
                                      CHECK(c.autoscaler.max_scale_down_rate == 4)},
                             GoodCase{"ScaleToZeroOff", "autoscaler:\n  enable-scale-to-zero: \"false\"",
                                      CHECK(!c.autoscaler.enable_scale_to_zero)},
                             GoodCase{"ScaleToZeroYamlBool", "autoscaler:\n  enable-scale-to-zero: False",
                                      CHECK(!c.autoscaler.enable_scale_to_zero)},
                             GoodCase{"GracePeriod", "autoscaler:\n  scale-to-zero-grace-period: \"1s\"",
                                      CHECK(c.autoscaler.scale_to_zero_grace_period == Seconds(1))},
                             GoodCase{"RetentionPeriod",
                                      "autoscaler:\n  scale-to-zero-pod-retention-period: \"1m5s\"",
                                      CHECK(c.autoscaler.scale_to_zero_pod_retention_period == Seconds(65))},
                             GoodCase{
                                 "ClassHpa",
                                 "autoscaler:\n  pod-autoscaler-class: hpa.autoscaling.knative.dev",
                                 CHECK(c.autoscaler.pod_autoscaler_class == "hpa.autoscaling.knative.dev")},
                             GoodCase{"ClassCustom", "autoscaler:\n  pod-autoscaler-class: my.example.com",
                                      CHECK(c.autoscaler.pod_autoscaler_class == "my.example.com")},
                             GoodCase{"ActivatorCapacity", "autoscaler:\n  activator-capacity: \"1\"",
                                      CHECK(c.autoscaler.activator_capacity == 1)},
                             GoodCase{
                                 "InitialScaleZeroAllowed",
                                 "autoscaler:\n  initial-scale: \"0\"\n  allow-zero-initial-scale: \"true\"",
                                 CHECK(c.autoscaler.initial_scale == 0 &&
                                       c.autoscaler.allow_zero_initial_scale)},
                             GoodCase{"InitialScale", "autoscaler:\n  initial-scale: \"3\"",
                                      CHECK(c.autoscaler.initial_scale == 3)},
                             GoodCase{"MinMaxScale", "autoscaler:\n  min-scale: \"2\"\n  max-scale: \"5\"",
                                      CHECK(c.autoscaler.min_scale == 2 && c.autoscaler.max_scale == 5)},
                             GoodCase{"MinScaleWithUnboundedMax", "autoscaler:\n  min-scale: \"7\"",
                                      CHECK(c.autoscaler.min_scale == 7)},
                             GoodCase{
                                 "MaxScaleWithinLimit",
                                 "autoscaler:\n  max-scale: \"10\"\n  max-scale-limit: \"10\"",
                                 CHECK(c.autoscaler.max_scale == 10 && c.autoscaler.max_scale_limit == 10)},
                             GoodCase{"ScaleDownDelay", "autoscaler:\n  scale-down-delay: \"15m\"",
                                      CHECK(c.autoscaler.scale_down_delay == minutes(15))},
                             // defaults
                             GoodCase{"RevisionTimeout", "defaults:\n  revision-timeout-seconds: \"600\"",
                                      CHECK(c.defaults.revision_timeout_seconds == 600)},
                             GoodCase{"MaxRevisionTimeout",
                                      "defaults:\n  max-revision-timeout-seconds: \"3600\"\n  "
                                      "revision-timeout-seconds: \"1200\"",
                                      CHECK(c.defaults.max_revision_timeout_seconds == 3600 &&
                                            c.defaults.revision_timeout_seconds == 1200)},
                             GoodCase{"ResponseStartTimeout",
                                      "defaults:\n  revision-response-start-timeout-seconds: \"10\"",
                                      CHECK(c.defaults.revision_response_start_timeout_seconds == 10)},
                             GoodCase{"ResponseStartUnsetByDefault", "defaults: {}",
                                      CHECK(!c.defaults.revision_response_start_timeout_seconds.has_value())},
                             GoodCase{"IdleTimeout", "defaults:\n  revision-idle-timeout-seconds: \"30\"",
                                      CHECK(c.defaults.revision_idle_timeout_seconds == 30)},
                             GoodCase{"ContainerConcurrency", "defaults:\n  container-concurrency: \"1000\"",
                                      CHECK(c.defaults.container_concurrency == 1000)},
                             GoodCase{"CcMaxLimit",
                                      "defaults:\n  container-concurrency-max-limit: \"5\"\n  "
                                      "container-concurrency: 5",
                                      CHECK(c.defaults.container_concurrency_max_limit == 5)},
                             GoodCase{"NoZeroCc",
                                      "defaults:\n  allow-container-concurrency-zero: \"false\"\n  "
                                      "container-concurrency: \"1\"",
                                      CHECK(!c.defaults.allow_container_concurrency_zero)},
                             GoodCase{"ServiceLinks", "defaults:\n  enable-service-links: \"true\"",
                                      CHECK(c.defaults.enable_service_links)},
                             GoodCase{"ContainerNameTemplate",
                                      "defaults:\n  container-name-template: \"{{.Name}}-app\"",
                                      CHECK(c.defaults.container_name_template == "{{.Name}}-app")},
                             GoodCase{"InitContainerNameTemplate",
                                      "defaults:\n  init-container-name-template: init",
                                      CHECK(c.defaults.init_container_name_template == "init")},
                             GoodCase{
                                 "ResourceDefaults",
                                 "defaults:\n  revision-cpu-request: 400m\n  revision-memory-request: 100M\n"
                                 "  revision-ephemeral-storage-request: 500M\n  revision-cpu-limit: "
                                 "\"1000m\"\n"
                                 "  revision-memory-limit: 1.5Gi\n  revision-ephemeral-storage-limit: 2e9",
                                 CHECK(c.defaults.resource_defaults.size() == 6 &&
                                       c.defaults.resource_defaults.at("revision-cpu-request") == "400m" &&
                                       c.defaults.resource_defaults.at("revision-memory-limit") == "1.5Gi")},
                             GoodCase{"ResourceDefaultEmptyIsUnset",
                                      "defaults:\n  revision-cpu-request: \"\"",
                                      CHECK(c.defaults.resource_defaults.empty())},
                             // network
                             GoodCase{
                                 "DomainTemplate",
                                 "network:\n  domain-template: \"{{.Name}}-{{.Namespace}}.{{.Domain}}\"",
                                 CHECK(c.network.domain_template == "{{.Name}}-{{.Namespace}}.{{.Domain}}")},
                             GoodCase{"DomainTemplateWithSpacesAndIndex",
                                      "network:\n  domain-template: '{{ .Name }}.{{index .Annotations "
                                      "\"sub\"}}{{.Domain}}'",
                                      CHECK(c.network.domain_template.find("index") != std::string::npos)},
                             GoodCase{"TagTemplate", "network:\n  tag-template: \"{{.Name}}-{{.Tag}}\"",
                                      CHECK(c.network.tag_template == "{{.Name}}-{{.Tag}}")},
                             GoodCase{"Https", "network:\n  default-external-scheme: HTTPS",
                                      CHECK(c.network.default_external_scheme == "https")},
                             GoodCase{"HttpProtocol", "network:\n  http-protocol: redirected",
                                      CHECK(c.network.http_protocol == "Redirected")},
                             GoodCase{"RolloutDuration", "network:\n  rollout-duration: \"380s\"",
                                      CHECK(c.network.rollout_duration == Seconds(380))},
                             GoodCase{
                                 "IngressClass",
                                 "network:\n  ingress-class: kourier.ingress.networking.knative.dev",
                                 CHECK(c.network.ingress_class == "kourier.ingress.networking.knative.dev")},
                             GoodCase{"OtherKnativeKeysKept",
                                      "network:\n  certificate-class: "
                                      "cert-manager.certificate.networking.knative.dev\n"
                                      "  external-domain-tls: disabled\n  autocreate-cluster-domain-claims: "
                                      "\"false\"\n"
                                      "  mesh-compatibility-mode: auto\n  system-internal-tls: Disabled\n"
                                      "  cluster-local-domain-tls: Disabled\n  "
                                      "enable-mesh-pod-addressability: \"false\"\n"
                                      "  namespace-wildcard-cert-selector: \"\"",
                                      CHECK(c.network.other.at("external-domain-tls") == "Disabled" &&
                                            c.network.other.at("certificate-class") ==
                                                "cert-manager.certificate.networking.knative.dev" &&
                                            !c.network.autocreate_cluster_domain_claims &&
                                            c.network.other.size() == 7)},
                             // domain
                             GoodCase{"DomainsReplaceDefault",
                                      "domain:\n  example.com: \"\"\n  internal.example.com: |\n    "
                                      "selector:\n      app: secret\n",
                                      [](const Config& c) {
                                        ASSERT_EQ(c.domain.domains.size(), 2u);
                                        EXPECT_EQ(c.domain.domains[0].domain, "example.com");
                                        EXPECT_TRUE(c.domain.domains[0].selector.empty());
                                        EXPECT_EQ(c.domain.domains[1].domain, "internal.example.com");
                                        EXPECT_EQ(c.domain.domains[1].selector,
                                                  (std::map<std::string, std::string>{{"app", "secret"}}));
                                      }},
                             GoodCase{"DomainSelectorAsMapping",
                                      "domain:\n  x.example.com:\n    selector:\n      tier: web\n      env: "
                                      "prod\n",
                                      [](const Config& c) {
                                        ASSERT_EQ(c.domain.domains.size(), 1u);
                                        EXPECT_EQ(c.domain.domains[0].selector.size(), 2u);
                                        EXPECT_EQ(c.domain.domains[0].selector.at("env"), "prod");
                                      }},
                             GoodCase{"DomainNullValue", "domain:\n  example.org:\n",
                                      CHECK(c.domain.domains.size() == 1)},
                             GoodCase{
                                 "DomainExampleKeyIgnored",
                                 "domain:\n  _example: |\n    anything goes here\n  a.b: \"\"",
                                 CHECK(c.domain.domains.size() == 1 && c.domain.domains[0].domain == "a.b")},
                             GoodCase{"DomainEmptySection", "domain: {}", CHECK(c.domain.domains.empty())},
                             // gc
                             GoodCase{
                                 "GcDisabled",
                                 "gc:\n  retain-since-create-time: disabled\n  "
                                 "retain-since-last-active-time: \"Disabled\"\n"
                                 "  max-non-active-revisions: disabled\n  min-non-active-revisions: \"5000\"",
                                 CHECK(!c.gc.retain_since_create_time &&
                                       !c.gc.retain_since_last_active_time &&
                                       !c.gc.max_non_active_revisions &&
                                       c.gc.min_non_active_revisions == 5000)},
                             GoodCase{
                                 "GcQuickCollect",
                                 "gc:\n  min-non-active-revisions: \"0\"\n  max-non-active-revisions: \"0\"\n"
                                 "  retain-since-create-time: 0s\n  retain-since-last-active-time: \"0\"",
                                 CHECK(c.gc.max_non_active_revisions == 0 &&
                                       c.gc.retain_since_create_time == Seconds(0) &&
                                       c.gc.retain_since_last_active_time == Seconds(0))},
                             GoodCase{
                                 "GcDurations",
                                 "gc:\n  retain-since-create-time: 1h\n  retain-since-last-active-time: 30m",
                                 CHECK(c.gc.retain_since_create_time == hours(1) &&
                                       c.gc.retain_since_last_active_time == minutes(30))},
                             // deployment
                             GoodCase{"ProgressDeadline", "deployment:\n  progress-deadline: 2m",
                                      CHECK(c.deployment.progress_deadline == minutes(2))},
                             GoodCase{
                                 "RegistriesCsv",
                                 "deployment:\n  registries-skipping-tag-resolving: \"kind.local, "
                                 "ko.local,,127.0.0.1:5000\"",
                                 CHECK(
                                     (c.deployment.registries_skipping_tag_resolving ==
                                      std::vector<std::string>{"kind.local", "ko.local", "127.0.0.1:5000"}))},
                             GoodCase{"RegistriesList",
                                      "deployment:\n  registries-skipping-tag-resolving: [dev.local]",
                                      CHECK((c.deployment.registries_skipping_tag_resolving ==
                                             std::vector<std::string>{"dev.local"}))},
                             GoodCase{"DigestTimeout", "deployment:\n  digest-resolution-timeout: 500ms",
                                      CHECK(c.deployment.digest_resolution_timeout == "500ms")},
                             GoodCase{
                                 "QueueSidecarKeysAccepted",
                                 "deployment:\n  queue-sidecar-image: gcr.io/knative-releases/queue\n  "
                                 "queue-sidecar-cpu-request: 25m",
                                 CHECK(c.deployment.queue_sidecar_image == "gcr.io/knative-releases/queue")},
                             // knap
                             GoodCase{"RouterTls",
                                      "knap:\n  router-tls-listen: \"0.0.0.0:8443\"\n  "
                                      "router-tls-certificates-dir: /etc/knap/tls\n"
                                      "network:\n  auto-tls: enabled\n  http-protocol: redirected",
                                      [](const Config& c) {
                                        EXPECT_EQ(c.knap.router_tls_listen, "0.0.0.0:8443");
                                        EXPECT_EQ(c.knap.router_tls_certificates_dir, "/etc/knap/tls");
                                        EXPECT_TRUE(c.network.externalDomainTls());
                                        EXPECT_EQ(c.network.http_protocol, "Redirected");
                                      }},
                             GoodCase{"Acme",
                                      "knap:\n  acme-directory: https://acme.example/dir\n  acme-email: "
                                      "ops@example.com\n"
                                      "  acme-ca-file: /etc/knap/acme-ca.crt\n  acme-renew-before: 240h",
                                      [](const Config& c) {
                                        EXPECT_EQ(c.knap.acme_directory, "https://acme.example/dir");
                                        EXPECT_EQ(c.knap.acme_email, "ops@example.com");
                                        EXPECT_EQ(c.knap.acme_ca_file, "/etc/knap/acme-ca.crt");
                                        EXPECT_EQ(c.knap.acme_renew_before.count(), 240 * 3600);
                                      }},
                             GoodCase{"AcmeDefaults", "knap:\n  data-dir: /var/lib/knap",
                                      CHECK(c.knap.acme_directory.empty() &&
                                            c.knap
                                                    .acme_renew_before.count() == 30 * 24 * 3600)},
                             GoodCase{
                                 "ExternalDomainTlsDefaultOff", "network:\n  http-protocol: Enabled",
                                 CHECK(!c.network.externalDomainTls() && c.knap.router_tls_listen.empty())},
                             GoodCase{
                                 "KnapSection",
                                 "knap:\n  data-dir: /srv/knap\n  api-socket: /run/knap.sock\n  api-listen: "
                                 "\"0.0.0.0:0\"\n"
                                 "  router-listen: \"[::1]:80\"\n  router-internal-listen: 10.88.0.1:8081\n"
                                 "  kubeconfig-path: /root/.kube/config\n  containerd-socket: /run/c.sock\n"
                                 "  containerd-namespace: knap-test\n  pod-subnet: 10.99.0.0/24\n  "
                                 "bridge-name: knapbr0\n"
                                 "  max-request-body-bytes: 1048576\n  watch-history-events: \"50\"",
                                 [](const Config& c) {
                                   EXPECT_EQ(c.knap.data_dir, "/srv/knap");
                                   EXPECT_EQ(c.knap.api_socket, "/run/knap.sock");
                                   EXPECT_EQ(c.knap.api_listen, "0.0.0.0:0");
                                   EXPECT_EQ(c.knap.router_listen, "[::1]:80");
                                   EXPECT_EQ(c.knap.router_internal_listen, "10.88.0.1:8081");
                                   EXPECT_EQ(c.knap.kubeconfig_path, "/root/.kube/config");
                                   EXPECT_EQ(c.knap.containerd_socket, "/run/c.sock");
                                   EXPECT_EQ(c.knap.containerd_namespace, "knap-test");
                                   EXPECT_EQ(c.knap.pod_subnet, "10.99.0.0/24");
                                   EXPECT_EQ(c.knap.bridge_name, "knapbr0");
                                   EXPECT_EQ(c.knap.max_request_body_bytes, 1048576u);
                                   EXPECT_EQ(c.knap.watch_history_events, 50);
                                 }},
                             GoodCase{"ImagesAndWarmPool",
                                      "knap:\n  platform: linux/arm64/v8\n  registry-auth-file: "
                                      "/etc/knap/auth.json\n"
                                      "  registry-ca-file: /etc/knap/ca.pem\n  insecure-registries: "
                                      "[\"127.0.0.1:5000\", localhost:5001]\n"
                                      "  pull-parallelism: \"8\"\n  pull-retry-max: 1m\n  pre-pull-images: "
                                      "\"a.io/x:1, b.io/y@sha256:00\"\n"
                                      "  image-gc-interval: 30s\n  image-gc-min-age: 0s\n  "
                                      "image-gc-high-threshold-percent: 90\n"
                                      "  image-gc-low-threshold-percent: 70\n  warm-pool-size: 2\n  "
                                      "warm-pool-mode: created",
                                      [](const Config& c) {
                                        EXPECT_EQ(c.knap.platform, "linux/arm64/v8");
                                        EXPECT_EQ(c.knap.registry_auth_file, "/etc/knap/auth.json");
                                        EXPECT_EQ(c.knap.registry_ca_file, "/etc/knap/ca.pem");
                                        EXPECT_EQ(
                                            c.knap.insecure_registries,
                                            (std::vector<std::string>{"127.0.0.1:5000", "localhost:5001"}));
                                        EXPECT_EQ(c.knap.pull_parallelism, 8);
                                        EXPECT_EQ(c.knap.pull_retry_max, Seconds(60));
                                        EXPECT_EQ(c.knap.pre_pull_images,
                                                  (std::vector<std::string>{"a.io/x:1", "b.io/y@sha256:00"}));
                                        EXPECT_EQ(c.knap.image_gc_interval, Seconds(30));
                                        EXPECT_EQ(c.knap.image_gc_min_age, Seconds(0));
                                        EXPECT_EQ(c.knap.image_gc_high_percent, 90);
                                        EXPECT_EQ(c.knap.image_gc_low_percent, 70);
                                        EXPECT_EQ(c.knap.warm_pool_size, 2);
                                        EXPECT_EQ(c.knap.warm_pool_mode, "created");
                                      }},
                             GoodCase{"RouterLimits",
                                      "knap:\n  router-max-connections: 500\n  "
                                      "router-keepalive-idle-timeout: 15s\n"
                                      "  router-tunnel-idle-timeout: 0s\n  router-drain-timeout: 1m\n  "
                                      "router-startup-hold: 0s",
                                      [](const Config& c) {
                                        EXPECT_EQ(c.knap.router_max_connections, 500);
                                        EXPECT_EQ(c.knap.router_keepalive_idle_timeout, Seconds(15));
                                        EXPECT_EQ(c.knap.router_tunnel_idle_timeout, Seconds(0));
                                        EXPECT_EQ(c.knap.router_drain_timeout, Seconds(60));
                                        EXPECT_EQ(c.knap.router_startup_hold, Seconds(0));
                                      }},
                             GoodCase{"RouterLimitDefaults", "knap:\n  data-dir: /tmp/x",
                                      [](const Config& c) {
                                        EXPECT_EQ(c.knap.router_max_connections, 10000);
                                        EXPECT_EQ(c.knap.router_keepalive_idle_timeout, Seconds(60));
                                        EXPECT_EQ(c.knap.router_tunnel_idle_timeout, Seconds(300));
                                        EXPECT_EQ(c.knap.router_drain_timeout, Seconds(30));
                                        EXPECT_EQ(c.knap.router_startup_hold, Seconds(30));
                                      }},
                             GoodCase{"ExampleKeyIgnoredEverywhere",
                                      "autoscaler:\n  _example: |\n    stable-window: \"60s\"\n",
                                      CHECK(c.autoscaler.stable_window == Seconds(60))}),
                         [](const testing::TestParamInfo<GoodCase>& info) {
                           return std::string(info.param.name);
                         });

#undef CHECK

// --- refused values: the error names section.key and the reason --------------

struct BadCase {
  const char* name;
  std::string yaml;
  std::string want;  // must appear in the message
};

void PrintTo(const BadCase& c, std::ostream* os) {
  *os << c.name;
}

class ParseConfigRefuses : public testing::TestWithParam<BadCase> {};

TEST_P(ParseConfigRefuses, Value) {
  auto c = parseConfig(GetParam().yaml);
  ASSERT_FALSE(c.isOk()) << GetParam().yaml;
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_NE(c.status().message().find(GetParam().want), std::string::npos)
      << "message: " << c.status().message() << "\nwant: " << GetParam().want;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseConfigRefuses,
    testing::Values(
        // structure
        BadCase{"NotYaml", "autoscaler: [unclosed", "invalid YAML at line"},
        BadCase{"TopLevelList", "- a\n- b", "config must be a mapping"},
        BadCase{"UnknownSection", "autoscalr:\n  stable-window: 60s", "autoscalr: unknown section"},
        BadCase{"SectionNotMap", "autoscaler: 5", "autoscaler: must be a mapping"},
        BadCase{"UnknownKey", "autoscaler:\n  stable-windw: 60s", "autoscaler.stable-windw: unknown key"},
        BadCase{"ValueIsMap", "autoscaler:\n  stable-window: {a: 1}",
                "autoscaler.stable-window: must be a string or a scalar"},
        // autoscaler
        BadCase{"CcPercentageZero", "autoscaler:\n  container-concurrency-target-percentage: \"0\"",
                "autoscaler.container-concurrency-target-percentage: must be in (0, 100], got \"0\""},
        BadCase{"CcPercentageOver", "autoscaler:\n  container-concurrency-target-percentage: \"101\"",
                "autoscaler.container-concurrency-target-percentage: must be in (0, 100]"},
        BadCase{"CcPercentageNotNumber", "autoscaler:\n  container-concurrency-target-percentage: seventy",
                "autoscaler.container-concurrency-target-percentage: must be a number, got \"seventy\""},
        BadCase{"CcTargetTooSmall", "autoscaler:\n  container-concurrency-target-default: \"0.001\"",
                "autoscaler.container-concurrency-target-default: must be at least 0.01, got"},
        BadCase{"CcProductTooSmall",
                "autoscaler:\n  container-concurrency-target-default: \"0.01\"\n"
                "  container-concurrency-target-percentage: \"50\"",
                "autoscaler.container-concurrency-target-default: container-concurrency-target-percentage x"},
        BadCase{"RpsTooSmall", "autoscaler:\n  requests-per-second-target-default: \"0\"",
                "autoscaler.requests-per-second-target-default: must be at least 0.01, got"},
        BadCase{"TbcNegative", "autoscaler:\n  target-burst-capacity: \"-2\"",
                "autoscaler.target-burst-capacity: must be >= 0 or -1"},
        BadCase{"StableWindowShort", "autoscaler:\n  stable-window: \"2s\"",
                "autoscaler.stable-window: must be between 6s and 1h, got \"2s\""},
        BadCase{"StableWindowLong", "autoscaler:\n  stable-window: \"61m\"",
                "autoscaler.stable-window: must be between 6s and 1h, got \"61m\""},
        BadCase{"StableWindowBadUnit", "autoscaler:\n  stable-window: \"6x\"",
                "autoscaler.stable-window: invalid duration \"6x\": unknown unit \"x\""},
        BadCase{"StableWindowSubSecond", "autoscaler:\n  stable-window: \"6.5s\"",
                "autoscaler.stable-window: must be a whole number of seconds, got \"6.5s\""},
        BadCase{"StableWindowBareNumber", "autoscaler:\n  stable-window: 60",
                "autoscaler.stable-window: invalid duration \"60\": missing unit"},
        BadCase{"PanicWindowLow", "autoscaler:\n  panic-window-percentage: \"0.5\"",
                "autoscaler.panic-window-percentage: must be in [1, 100]"},
        BadCase{"PanicWindowHigh", "autoscaler:\n  panic-window-percentage: \"101\"",
                "autoscaler.panic-window-percentage: must be in [1, 100]"},
        BadCase{"PanicWindowUnderOneSecond",
                "autoscaler:\n  stable-window: 6s\n  panic-window-percentage: \"10\"",
                "autoscaler.panic-window-percentage: the panic window"},
        BadCase{"PanicThresholdLow", "autoscaler:\n  panic-threshold-percentage: \"100\"",
                "autoscaler.panic-threshold-percentage: must be in [110, 1000]"},
        BadCase{"PanicThresholdHigh", "autoscaler:\n  panic-threshold-percentage: \"1001\"",
                "autoscaler.panic-threshold-percentage: must be in [110, 1000]"},
        BadCase{"ScaleUpRateOne", "autoscaler:\n  max-scale-up-rate: \"1\"",
                "autoscaler.max-scale-up-rate: must be greater than 1, got \"1\""},
        BadCase{"ScaleDownRateLow", "autoscaler:\n  max-scale-down-rate: \"0.5\"",
                "autoscaler.max-scale-down-rate: must be greater than 1"},
        BadCase{"ScaleToZeroNotBool", "autoscaler:\n  enable-scale-to-zero: \"yes please\"",
                "autoscaler.enable-scale-to-zero: must be true or false, got \"yes please\""},
        BadCase{"GraceZero", "autoscaler:\n  scale-to-zero-grace-period: \"0s\"",
                "autoscaler.scale-to-zero-grace-period: must be greater than 0s"},
        BadCase{"RetentionNegative", "autoscaler:\n  scale-to-zero-pod-retention-period: \"-1s\"",
                "autoscaler.scale-to-zero-pod-retention-period: must be >= 0s"},
        BadCase{"ClassUnknownKnative", "autoscaler:\n  pod-autoscaler-class: foo.autoscaling.knative.dev",
                "autoscaler.pod-autoscaler-class: must be kpa.autoscaling.knative.dev or hpa"},
        BadCase{"ClassEmpty", "autoscaler:\n  pod-autoscaler-class: \"\"",
                "autoscaler.pod-autoscaler-class: must not be empty"},
        BadCase{"ActivatorCapacityLow", "autoscaler:\n  activator-capacity: \"0.5\"",
                "autoscaler.activator-capacity: must be at least 1, got \"0.5\""},
        BadCase{"InitialScaleZero", "autoscaler:\n  initial-scale: \"0\"",
                "autoscaler.initial-scale: must be at least 1 unless allow-zero-initial-scale is true"},
        BadCase{"InitialScaleNegative", "autoscaler:\n  initial-scale: \"-1\"",
                "autoscaler.initial-scale: must be >= 0"},
        BadCase{"InitialScaleFloat", "autoscaler:\n  initial-scale: \"1.5\"",
                "autoscaler.initial-scale: must be an integer, got \"1.5\""},
        BadCase{"AllowZeroNotBool", "autoscaler:\n  allow-zero-initial-scale: maybe",
                "autoscaler.allow-zero-initial-scale: must be true or false"},
        BadCase{"MinScaleNegative", "autoscaler:\n  min-scale: \"-1\"", "autoscaler.min-scale: must be >= 0"},
        BadCase{"MinAboveMax", "autoscaler:\n  min-scale: \"6\"\n  max-scale: \"5\"",
                "autoscaler.min-scale: must be <= max-scale (5), got \"6\""},
        BadCase{"MaxScaleNegative", "autoscaler:\n  max-scale: \"-3\"", "autoscaler.max-scale: must be >= 0"},
        BadCase{"MaxScaleHuge", "autoscaler:\n  max-scale: \"99999999999\"",
                "autoscaler.max-scale: must be a 32-bit integer"},
        BadCase{"MaxScaleAboveLimit", "autoscaler:\n  max-scale: \"11\"\n  max-scale-limit: \"10\"",
                "autoscaler.max-scale: must be in [1, max-scale-limit (10)]"},
        BadCase{"MaxScaleUnboundedWithLimit", "autoscaler:\n  max-scale-limit: \"10\"",
                "autoscaler.max-scale: must be in [1, max-scale-limit (10)] when max-scale-limit is set, got "
                "\"0\""},
        BadCase{"MaxScaleLimitNegative", "autoscaler:\n  max-scale-limit: \"-1\"",
                "autoscaler.max-scale-limit: must be >= 0"},
        BadCase{"ScaleDownDelayNegative", "autoscaler:\n  scale-down-delay: \"-5s\"",
                "autoscaler.scale-down-delay: must be >= 0s"},
        BadCase{"ScaleDownDelaySubSecond", "autoscaler:\n  scale-down-delay: \"1500ms\"",
                "autoscaler.scale-down-delay: must be a whole number of seconds"},
        // defaults
        BadCase{
            "TimeoutOverMax", "defaults:\n  revision-timeout-seconds: \"601\"",
            "defaults.revision-timeout-seconds: must be <= max-revision-timeout-seconds (600), got \"601\""},
        BadCase{"TimeoutZero", "defaults:\n  revision-timeout-seconds: \"0\"",
                "defaults.revision-timeout-seconds: must be >= 1"},
        BadCase{"TimeoutNotInt", "defaults:\n  revision-timeout-seconds: 5m",
                "defaults.revision-timeout-seconds: must be an integer, got \"5m\""},
        BadCase{"MaxTimeoutZero", "defaults:\n  max-revision-timeout-seconds: \"0\"",
                "defaults.max-revision-timeout-seconds: must be >= 1"},
        BadCase{
            "ResponseStartOverTimeout", "defaults:\n  revision-response-start-timeout-seconds: \"301\"",
            "defaults.revision-response-start-timeout-seconds: must be <= revision-timeout-seconds (300)"},
        BadCase{"ResponseStartNegative", "defaults:\n  revision-response-start-timeout-seconds: \"-1\"",
                "defaults.revision-response-start-timeout-seconds: must be >= 0"},
        BadCase{"IdleOverTimeout", "defaults:\n  revision-idle-timeout-seconds: \"400\"",
                "defaults.revision-idle-timeout-seconds: must be <= revision-timeout-seconds (300)"},
        BadCase{"IdleNegative", "defaults:\n  revision-idle-timeout-seconds: \"-1\"",
                "defaults.revision-idle-timeout-seconds: must be >= 0"},
        BadCase{"CcNegative", "defaults:\n  container-concurrency: \"-1\"",
                "defaults.container-concurrency: must be >= 0"},
        BadCase{"CcOverLimit", "defaults:\n  container-concurrency: \"1001\"",
                "defaults.container-concurrency: must be in [0, container-concurrency-max-limit (1000)], got "
                "\"1001\""},
        BadCase{
            "CcZeroNotAllowed", "defaults:\n  allow-container-concurrency-zero: \"false\"",
            "defaults.container-concurrency: must be in [1, container-concurrency-max-limit (1000)] because"},
        BadCase{"CcMaxLimitZero", "defaults:\n  container-concurrency-max-limit: \"0\"",
                "defaults.container-concurrency-max-limit: must be >= 1"},
        BadCase{"AllowCcZeroNotBool", "defaults:\n  allow-container-concurrency-zero: nope",
                "defaults.allow-container-concurrency-zero: must be true or false"},
        BadCase{"ServiceLinksNotBool", "defaults:\n  enable-service-links: sometimes",
                "defaults.enable-service-links: must be true or false"},
        BadCase{"ContainerNameTemplateBadAction", "defaults:\n  container-name-template: \"{{.Namespace}}\"",
                "defaults.container-name-template: unsupported template action \"{{.Namespace}}\""},
        BadCase{"ContainerNameTemplateInvalidName", "defaults:\n  container-name-template: User_Container",
                "defaults.container-name-template: renders an invalid container name"},
        BadCase{"InitContainerNameTemplateEmpty", "defaults:\n  init-container-name-template: \"\"",
                "defaults.init-container-name-template: renders an invalid container name"},
        BadCase{"BadQuantity", "defaults:\n  revision-memory-limit: 100MB",
                "defaults.revision-memory-limit: must be a Kubernetes quantity"},
        BadCase{"BadCpuQuantity", "defaults:\n  revision-cpu-request: lots",
                "defaults.revision-cpu-request: must be a Kubernetes quantity"},
        // network
        BadCase{"DomainTemplateNoName", "network:\n  domain-template: \"{{.Namespace}}.{{.Domain}}\"",
                "network.domain-template: must contain {{.Name}}"},
        BadCase{"DomainTemplateUnknownField", "network:\n  domain-template: \"{{.Name}}.{{.Cluster}}\"",
                "network.domain-template: unsupported template action \"{{.Cluster}}\""},
        BadCase{"DomainTemplateUnclosed", "network:\n  domain-template: \"{{.Name}.{{.Domain}}\"",
                "network.domain-template: unsupported template action"},
        BadCase{"DomainTemplateOpenEnd", "network:\n  domain-template: \"{{.Name}}.{{.Domain\"",
                "network.domain-template: unclosed action"},
        BadCase{"DomainTemplatePath", "network:\n  domain-template: \"{{.Name}}.{{.Domain}}/path\"",
                "network.domain-template: must render a host name without a path"},
        BadCase{"DomainTemplateBadHost", "network:\n  domain-template: \"{{.Name}}..{{.Domain}}\"",
                "network.domain-template: renders an invalid host name \"foo..baz.com\""},
        BadCase{"DomainTemplateTrimMarker", "network:\n  domain-template: \"{{- .Name}}.{{.Domain}}\"",
                "network.domain-template: unsupported template action \"{{- .Name}}\""},
        BadCase{"TagTemplateDot", "network:\n  tag-template: \"{{.Tag}}.{{.Name}}\"",
                "network.tag-template: renders an invalid host label \"v2.foo\""},
        BadCase{"TagTemplateNoTag", "network:\n  tag-template: \"{{.Name}}\"",
                "network.tag-template: must contain {{.Tag}} and {{.Name}}"},
        BadCase{"TagTemplateBadChars", "network:\n  tag-template: \"{{.Tag}}_{{.Name}}\"",
                "network.tag-template: renders an invalid host label \"v2_foo\""},
        BadCase{"SchemeFtp", "network:\n  default-external-scheme: ftp",
                "network.default-external-scheme: must be one of http, https, got \"ftp\""},
        BadCase{"HttpProtocolBad", "network:\n  http-protocol: Sometimes",
                "network.http-protocol: must be one of Enabled, Redirected, Disabled"},
        BadCase{"RolloutNegative", "network:\n  rollout-duration: \"-1s\"",
                "network.rollout-duration: must be >= 0s"},
        BadCase{"RolloutBad", "network:\n  rollout-duration: soon",
                "network.rollout-duration: invalid duration \"soon\""},
        BadCase{"IngressClassEmpty", "network:\n  ingress-class: \"\"",
                "network.ingress-class: must not be empty"},
        BadCase{"ExternalTlsBad", "network:\n  external-domain-tls: maybe",
                "network.external-domain-tls: must be one of Enabled, Disabled"},
        BadCase{"MeshModeBad", "network:\n  mesh-compatibility-mode: always",
                "network.mesh-compatibility-mode: must be one of enabled, disabled, auto"},
        BadCase{"ClaimsNotBool", "network:\n  autocreate-cluster-domain-claims: often",
                "network.autocreate-cluster-domain-claims: must be true or false"},
        BadCase{"NetworkUnknown", "network:\n  ingress-klass: x", "network.ingress-klass: unknown key"},
        // domain
        BadCase{"DomainBadName", "domain:\n  Example..com: \"\"",
                "domain.Example..com: is not a valid domain name"},
        BadCase{"DomainBadSelectorKey", "domain:\n  example.com: |\n    selectors:\n      app: x\n",
                "domain.example.com: unknown key \"selectors\""},
        BadCase{"DomainSelectorNotMap", "domain:\n  example.com: |\n    selector: app\n",
                "domain.example.com: selector must map label names to values"},
        BadCase{"DomainValueList", "domain:\n  example.com: [a]",
                "domain.example.com: must be empty or \"selector: {label: value}\""},
        BadCase{"DomainSelectorBadYaml", "domain:\n  example.com: \"selector: [\"",
                "domain.example.com: invalid selector YAML"},
        BadCase{"DomainSectionList", "domain: [a, b]", "domain: must be a mapping"},
        // gc
        BadCase{"GcCreateNegative", "gc:\n  retain-since-create-time: \"-1h\"",
                "gc.retain-since-create-time: must be >= 0s or \"disabled\""},
        BadCase{"GcCreateBad", "gc:\n  retain-since-create-time: forever",
                "gc.retain-since-create-time: invalid duration \"forever\""},
        BadCase{"GcActiveBad", "gc:\n  retain-since-last-active-time: 2d",
                "gc.retain-since-last-active-time: invalid duration \"2d\": unknown unit \"d\""},
        BadCase{"GcMinNegative", "gc:\n  min-non-active-revisions: \"-1\"",
                "gc.min-non-active-revisions: must be >= 0"},
        BadCase{"GcMinDisabled", "gc:\n  min-non-active-revisions: disabled",
                "gc.min-non-active-revisions: must be an integer, got \"disabled\""},
        BadCase{"GcMaxNegative", "gc:\n  max-non-active-revisions: \"-1\"",
                "gc.max-non-active-revisions: must be >= 0 or \"disabled\""},
        BadCase{"GcMaxBad", "gc:\n  max-non-active-revisions: lots",
                "gc.max-non-active-revisions: must be an integer >= 0 or \"disabled\""},
        BadCase{"GcMinOverMax", "gc:\n  min-non-active-revisions: \"10\"\n  max-non-active-revisions: \"5\"",
                "gc.min-non-active-revisions: must be <= max-non-active-revisions (5), got \"10\""},
        // deployment
        BadCase{"ProgressDeadlineZero", "deployment:\n  progress-deadline: 0s",
                "deployment.progress-deadline: must be greater than 0s"},
        BadCase{"ProgressDeadlineSubSecond", "deployment:\n  progress-deadline: 1.5s",
                "deployment.progress-deadline: must be a whole number of seconds"},
        BadCase{"DigestTimeoutZero", "deployment:\n  digest-resolution-timeout: \"0\"",
                "deployment.digest-resolution-timeout: must be greater than 0s"},
        BadCase{"DigestTimeoutBad", "deployment:\n  digest-resolution-timeout: ten",
                "deployment.digest-resolution-timeout: invalid duration"},
        BadCase{"RegistryWithSpace", "deployment:\n  registries-skipping-tag-resolving: \"a.local, b local\"",
                "deployment.registries-skipping-tag-resolving: invalid registry \"b local\""},
        BadCase{"DeploymentUnknown", "deployment:\n  progress-deadlin: 10s",
                "deployment.progress-deadlin: unknown key"},
        // knap
        BadCase{"DataDirRelative", "knap:\n  data-dir: var/lib/knap",
                "knap.data-dir: must be an absolute path"},
        BadCase{"DataDirEmpty", "knap:\n  data-dir: \"\"", "knap.data-dir: must be an absolute path"},
        BadCase{"ApiSocketRelative", "knap:\n  api-socket: knapd.sock",
                "knap.api-socket: must be an absolute path"},
        BadCase{"KubeconfigRelative", "knap:\n  kubeconfig-path: kubeconfig",
                "knap.kubeconfig-path: must be an absolute path"},
        BadCase{"ContainerdSocketEmpty", "knap:\n  containerd-socket: \"\"",
                "knap.containerd-socket: must be an absolute path"},
        BadCase{"RoleBindingBadRole", "knap:\n  api-role-bindings: [\"owner user:bob\"]",
                "knap.api-role-bindings: binding \"owner user:bob\": the role must be admin, edit or view"},
        BadCase{"RoleBindingBadSubject", "knap:\n  api-role-bindings: [\"view bob\"]",
                "the subject must be user:NAME or group:NAME"},
        BadCase{"RoleBindingBadNamespace", "knap:\n  api-role-bindings: [\"view user:bob Team_A\"]",
                "is not a namespace name"},
        BadCase{"ApiThreadsZero", "knap:\n  api-threads: 0", "knap.api-threads: must be in [1, 64]"},
        BadCase{"TokenFileRelative", "knap:\n  api-token-file: tokens.csv",
                "knap.api-token-file: must be an absolute path"},
        BadCase{"InsecureNotBool", "knap:\n  api-insecure-loopback: maybe", "knap.api-insecure-loopback"},
        BadCase{"ApiListenNoPort", "knap:\n  api-listen: localhost", "knap.api-listen: must be host:port"},
        BadCase{"ApiListenBadPort", "knap:\n  api-listen: \"127.0.0.1:70000\"",
                "knap.api-listen: port must be 0..65535"},
        BadCase{"RouterListenBareV6", "knap:\n  router-listen: \"::1:80\"",
                "knap.router-listen: must be host:port (IPv6 in brackets)"},
        BadCase{"RouterTlsListenBad", "knap:\n  router-tls-listen: \"443\"",
                "knap.router-tls-listen: must be host:port"},
        BadCase{"RouterTlsDirRelative", "knap:\n  router-tls-certificates-dir: tls",
                "knap.router-tls-certificates-dir: must be an absolute path"},
        BadCase{"AcmeDirectoryNotUrl", "knap:\n  acme-directory: acme.example/dir",
                "knap.acme-directory: must be an https:// URL"},
        BadCase{"AcmeEmailBad", "knap:\n  acme-email: \"ops at example\"",
                "knap.acme-email: must be an e-mail address"},
        BadCase{"AcmeRenewZero", "knap:\n  acme-renew-before: 0s",
                "knap.acme-renew-before: must be a positive duration"},
        BadCase{"AcmeCaRelative", "knap:\n  acme-ca-file: ca.crt",
                "knap.acme-ca-file: must be an absolute path"},
        BadCase{"RouterInternalBad", "knap:\n  router-internal-listen: \"10.0.0.1\"",
                "knap.router-internal-listen: must be host:port"},
        BadCase{"MetricsListenBad", "knap:\n  metrics-listen: \"9095\"",
                "knap.metrics-listen: must be host:port"},
        BadCase{"NamespaceBadChars", "knap:\n  containerd-namespace: \"knap/x\"",
                "knap.containerd-namespace: may contain only letters"},
        BadCase{"NamespaceEmpty", "knap:\n  containerd-namespace: \"\"",
                "knap.containerd-namespace: must be 1..76 characters"},
        BadCase{"PodSubnetBad", "knap:\n  pod-subnet: 10.88.0.0", "knap.pod-subnet: must be an IPv4 CIDR"},
        BadCase{"PodSubnetTooSmall", "knap:\n  pod-subnet: 10.88.0.0/31",
                "knap.pod-subnet: must be an IPv4 CIDR"},
        BadCase{"PodSubnetOctet", "knap:\n  pod-subnet: 10.288.0.0/16",
                "knap.pod-subnet: must be an IPv4 CIDR"},
        BadCase{"BridgeTooLong", "knap:\n  bridge-name: a-very-long-bridge",
                "knap.bridge-name: must be 1..15 characters"},
        BadCase{"BridgeBadChars", "knap:\n  bridge-name: \"br 0\"", "knap.bridge-name: may contain only"},
        BadCase{"BodyLimitZero", "knap:\n  max-request-body-bytes: 0",
                "knap.max-request-body-bytes: must be >= 1"},
        BadCase{"BodyLimitText", "knap:\n  max-request-body-bytes: 3Mi",
                "knap.max-request-body-bytes: must be an integer"},
        BadCase{"HistoryZero", "knap:\n  watch-history-events: \"0\"",
                "knap.watch-history-events: must be >= 1"},
        BadCase{"PlatformBad", "knap:\n  platform: amd64", "knap.platform: must be os/arch"},
        BadCase{"InsecureWithPath", "knap:\n  insecure-registries: host:5000/repo",
                "knap.insecure-registries: invalid registry"},
        BadCase{"PullParallelismZero", "knap:\n  pull-parallelism: 0",
                "knap.pull-parallelism: must be in [1, 64]"},
        BadCase{
            "GcThresholdsCrossed",
            "knap:\n  image-gc-high-threshold-percent: 50\n  image-gc-low-threshold-percent: 60",
            "knap.image-gc-low-threshold-percent: must be lower than image-gc-high-threshold-percent (50)"},
        BadCase{"WarmPoolNegative", "knap:\n  warm-pool-size: -1",
                "knap.warm-pool-size: must be in [0, 100]"},
        BadCase{"WarmPoolModeBad", "knap:\n  warm-pool-mode: hot",
                "knap.warm-pool-mode: must be \"frozen\" or \"created\""},
        BadCase{"RouterMaxConnectionsNegative", "knap:\n  router-max-connections: -1",
                "knap.router-max-connections: must be in [0, 1000000]"},
        BadCase{"RouterKeepAliveZero", "knap:\n  router-keepalive-idle-timeout: 0s",
                "knap.router-keepalive-idle-timeout: must be greater than 0s"},
        BadCase{"RouterTunnelIdleBad", "knap:\n  router-tunnel-idle-timeout: soon",
                "knap.router-tunnel-idle-timeout:"},
        BadCase{"RouterDrainTooLong", "knap:\n  router-drain-timeout: 2h",
                "knap.router-drain-timeout: must be between 0s and 1h"},
        BadCase{"RouterStartupHoldNegative", "knap:\n  router-startup-hold: -1s",
                "knap.router-startup-hold:"},
        BadCase{"RouterStartupHoldTooLong", "knap:\n  router-startup-hold: 11m",
                "knap.router-startup-hold: must be between 0s and 10m"},
        BadCase{"CaFileRelative", "knap:\n  registry-ca-file: ca.pem", "knap.registry-ca-file:"},
        BadCase{"KnapUnknown", "knap:\n  datadir: /x", "knap.datadir: unknown key"}),
    [](const testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

TEST(ParseConfig, ApiAccessKeys) {
  auto c = parseConfig(
      "knap:\n  api-threads: 8\n  api-max-connections: 50\n  api-insecure-loopback: \"true\"\n"
      "  api-token-file: /etc/knap/tokens.csv\n"
      "  api-role-bindings:\n  - admin user:alice\n  - edit group:system:devs default\n  - view user:bob "
      "*\n");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->knap.api_threads, 8);
  EXPECT_EQ(c->knap.api_max_connections, 50);
  EXPECT_TRUE(c->knap.api_insecure_loopback);
  EXPECT_EQ(c->knap.api_token_file, "/etc/knap/tokens.csv");
  ASSERT_EQ(c->knap.api_role_bindings.size(), 3u);
  EXPECT_EQ(c->knap.api_role_bindings[0].role, "admin");
  EXPECT_FALSE(c->knap.api_role_bindings[0].group);
  EXPECT_EQ(c->knap.api_role_bindings[0].subject, "alice");
  EXPECT_EQ(c->knap.api_role_bindings[0].ns, "");
  EXPECT_TRUE(c->knap.api_role_bindings[1].group);
  EXPECT_EQ(c->knap.api_role_bindings[1].subject, "system:devs");
  EXPECT_EQ(c->knap.api_role_bindings[1].ns, "default");
  EXPECT_EQ(c->knap.api_role_bindings[2].ns, "");
  Config d = defaultConfig();
  EXPECT_EQ(d.knap.api_threads, 4);
  EXPECT_FALSE(d.knap.api_insecure_loopback);
  EXPECT_TRUE(d.knap.api_role_bindings.empty());
}

TEST(ParseConfig, ReportsEveryBadKeyWithFieldErrors) {
  auto c = parseConfig(
      "autoscaler:\n  stable-window: 2s\n  max-scale-up-rate: \"1\"\n"
      "gc:\n  min-non-active-revisions: x\nbogus: {}\n");
  ASSERT_FALSE(c.isOk());
  const auto& fe = c.status().fieldErrors();
  ASSERT_EQ(fe.size(), 4u) << c.status().toString();
  EXPECT_EQ(fe[0].field, "autoscaler.stable-window");
  EXPECT_EQ(fe[0].message, "must be between 6s and 1h, got \"2s\"");
  EXPECT_EQ(fe[1].field, "autoscaler.max-scale-up-rate");
  EXPECT_EQ(fe[2].field, "gc.min-non-active-revisions");
  EXPECT_EQ(fe[3].field, "bogus");
  EXPECT_NE(c.status().message().find("autoscaler.stable-window: must be between 6s and 1h, got \"2s\"; "),
            std::string::npos);
}

TEST(ParseConfig, PastedKnativeConfigMapDataWorks) {
  // The data: part of Knative's config-autoscaler and config-gc, as kubectl shows them.
  auto c = parseConfig(R"(
autoscaler:
  _example: |
    # This block is not actually functional configuration.
    container-concurrency-target-percentage: "70"
  container-concurrency-target-percentage: "70"
  container-concurrency-target-default: "100"
  requests-per-second-target-default: "200"
  target-burst-capacity: "211"
  stable-window: "60s"
  panic-window-percentage: "10.0"
  panic-threshold-percentage: "200.0"
  max-scale-up-rate: "1000.0"
  max-scale-down-rate: "2.0"
  enable-scale-to-zero: "true"
  scale-to-zero-grace-period: "30s"
  scale-to-zero-pod-retention-period: "0s"
  pod-autoscaler-class: "kpa.autoscaling.knative.dev"
  activator-capacity: "100.0"
  initial-scale: "1"
  allow-zero-initial-scale: "false"
  min-scale: "0"
  max-scale: "0"
  scale-down-delay: "0s"
  max-scale-limit: "0"
gc:
  retain-since-create-time: "48h"
  retain-since-last-active-time: "15h"
  min-non-active-revisions: "20"
  max-non-active-revisions: "1000"
)");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  Config d = defaultConfig();
  EXPECT_EQ(c->autoscaler.stable_window, d.autoscaler.stable_window);
  EXPECT_EQ(c->autoscaler.target_burst_capacity, d.autoscaler.target_burst_capacity);
  EXPECT_EQ(c->autoscaler.scale_to_zero_grace_period, d.autoscaler.scale_to_zero_grace_period);
  EXPECT_EQ(c->gc.retain_since_last_active_time, d.gc.retain_since_last_active_time);
  EXPECT_EQ(c->gc.max_non_active_revisions, d.gc.max_non_active_revisions);
}

TEST(LoadConfigFile, ReadsFileAndNamesItInErrors) {
  char tmpl[] = "/tmp/knap-config-test-XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  std::string path = tmpl;
  { std::ofstream(path) << "autoscaler:\n  stable-window: 90s\n"; }
  auto ok = loadConfigFile(path);
  ASSERT_TRUE(ok.isOk()) << ok.status().toString();
  EXPECT_EQ(ok->autoscaler.stable_window, Seconds(90));
  { std::ofstream(path) << "autoscaler:\n  stable-window: 2s\n"; }
  auto bad = loadConfigFile(path);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().message(),
            "config file " + path + ": autoscaler.stable-window: must be between 6s and 1h, got \"2s\"");
  std::remove(path.c_str());
  auto missing = loadConfigFile(path);
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace knap
