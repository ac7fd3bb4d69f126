// knapd's configuration: one YAML file whose sections mirror Knative's
// ConfigMaps (config-autoscaler, config-defaults, config-network, config-domain,
// config-gc, config-deployment) with Knative's key names and defaults, plus
// knap's own `knap` section (listeners, data dir, runtime settings).
//
// Values are plain data; loadConfig() validates every key and refuses a bad
// file with the section, key and reason. Durations are std::chrono::seconds
// (Knative's are whole seconds). Thread safety: immutable after load; share by
// const reference or shared_ptr<const Config>.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace knap {

using Seconds = std::chrono::seconds;

// config-autoscaler (KNATIVE-CONTRACT §4.1).
struct AutoscalerConfig {
  double container_concurrency_target_percentage = 70;  // stored as given; fraction = /100 if > 1
  double container_concurrency_target_default = 100;
  double requests_per_second_target_default = 200;
  double target_burst_capacity = 211;
  Seconds stable_window{60};
  double panic_window_percentage = 10.0;
  double panic_threshold_percentage = 200.0;
  double max_scale_up_rate = 1000.0;
  double max_scale_down_rate = 2.0;
  bool enable_scale_to_zero = true;
  Seconds scale_to_zero_grace_period{30};
  Seconds scale_to_zero_pod_retention_period{0};
  std::string pod_autoscaler_class = "kpa.autoscaling.knative.dev";
  double activator_capacity = 100.0;
  int initial_scale = 1;
  bool allow_zero_initial_scale = false;
  int min_scale = 0;
  int max_scale = 0;
  Seconds scale_down_delay{0};
  int max_scale_limit = 0;
  bool operator==(const AutoscalerConfig&) const = default;
  double targetUtilizationFraction() const {
    return container_concurrency_target_percentage > 1 ? container_concurrency_target_percentage / 100
                                                       : container_concurrency_target_percentage;
  }
};

// config-defaults (KNATIVE-CONTRACT §3.3).
struct DefaultsConfig {
  int64_t revision_timeout_seconds = 300;
  int64_t max_revision_timeout_seconds = 600;
  std::optional<int64_t> revision_response_start_timeout_seconds;  // unset = revision_timeout_seconds
  int64_t revision_idle_timeout_seconds = 0;
  int64_t container_concurrency = 0;
  int64_t container_concurrency_max_limit = 1000;
  bool allow_container_concurrency_zero = true;
  bool enable_service_links = false;
  std::string container_name_template = "user-container";
  std::string init_container_name_template = "init-container";
  // revision-{cpu,memory,ephemeral-storage}-{request,limit}: Kubernetes quantities, empty = unset.
  std::map<std::string, std::string> resource_defaults;
  bool operator==(const DefaultsConfig&) const = default;
};

// config-network (KNATIVE-CONTRACT §5.11); only the keys that mean something on one box are used,
// the others are accepted and kept so a Knative ConfigMap can be pasted in.
struct NetworkConfig {
  std::string domain_template = "{{.Name}}.{{.Namespace}}.{{.Domain}}";
  std::string tag_template = "{{.Tag}}-{{.Name}}";
  std::string default_external_scheme = "http";
  std::string http_protocol = "Enabled";
  Seconds rollout_duration{0};
  std::string ingress_class = "knap";
  // A DomainMapping creates its ClusterDomainClaim when none exists. knap's
  // default is true (one machine, one operator); Knative's is false.
  bool autocreate_cluster_domain_claims = true;
  std::map<std::string, std::string> other;  // accepted Knative keys, canonical spelling
  // external-domain-tls (former name auto-tls) is Enabled: external URLs are
  // https:// (the router's HTTPS listener serves them, knap.router-tls-listen).
  bool externalDomainTls() const {
    auto it = other.find("external-domain-tls");
    return it != other.end() && it->second == "Enabled";
  }
  bool operator==(const NetworkConfig&) const = default;
};

// config-domain: domain -> label selector. An entry with an empty selector is the default.
struct DomainEntry {
  std::string domain;
  std::map<std::string, std::string> selector;
  bool operator==(const DomainEntry&) const = default;
};
struct DomainConfig {
  std::vector<DomainEntry> domains;  // knap default: {"localhost", {}} (curl resolves *.localhost)
  bool operator==(const DomainConfig&) const = default;
};

// config-gc (KNATIVE-CONTRACT §6). nullopt = "disabled".
struct GcConfig {
  std::optional<Seconds> retain_since_create_time = Seconds(48 * 3600);
  std::optional<Seconds> retain_since_last_active_time = Seconds(15 * 3600);
  int64_t min_non_active_revisions = 20;
  std::optional<int64_t> max_non_active_revisions = 1000;
  bool operator==(const GcConfig&) const = default;
};

// config-deployment.
struct DeploymentConfig {
  Seconds progress_deadline{600};
  std::vector<std::string> registries_skipping_tag_resolving = {"kind.local", "ko.local", "dev.local"};
  std::string digest_resolution_timeout = "10s";
  std::string queue_sidecar_image;  // accepted, unused: knap has no sidecar
  bool operator==(const DeploymentConfig&) const = default;
};

// knap's own section.
// One role granted to a user or group (knap.api-role-bindings), in a namespace or
// cluster-wide. Written "ROLE user:NAME [NAMESPACE]" or "ROLE group:NAME [NAMESPACE]";
// ROLE is admin, edit or view; no NAMESPACE (or "*") = every namespace.
struct ApiRoleBinding {
  std::string role;
  bool group = false;  // the subject is a group (else a user)
  std::string subject;
  std::string ns;  // "" = cluster-wide
  bool operator==(const ApiRoleBinding&) const = default;
};

struct KnapConfig {
  std::string data_dir = "/var/lib/knap";
  std::string api_socket;                     // default <data_dir>/knapd.sock
  std::string api_listen = "127.0.0.1:6443";  // loopback only by default
  std::string router_listen = "127.0.0.1:8080";
  std::string router_internal_listen = "";        // the listener pods use for cluster-local routes
  std::string metrics_listen = "127.0.0.1:9095";  // Prometheus /metrics of the router; empty = off
  std::string router_tls_listen = "";             // the router's HTTPS listener; empty = off
  std::string router_tls_certificates_dir;        // <name>.crt + <name>.key pairs served by SNI; empty = none
  std::string acme_directory;  // ACME (RFC 8555) directory URL for HTTP-01 certificates; empty = off
  std::string acme_email;      // the ACME account's contact; empty = none
  std::string acme_ca_file;    // extra trust for the ACME server's own TLS; empty = system CAs
  Seconds acme_renew_before{30 * 24 * 3600};  // renew an ACME certificate this long before it expires
  std::string kubeconfig_path;                // default <data_dir>/kubeconfig
  std::string containerd_socket = "/run/containerd/containerd.sock";
  std::string containerd_namespace = "knap";
  std::string pod_subnet = "10.88.0.0/16";
  std::string bridge_name = "knap0";
  size_t max_request_body_bytes = 3 * 1024 * 1024;
  int64_t watch_history_events = 10000;  // events kept for watch replay before 410 Gone
  // --- router limits (router/, issue 8) ---
  int64_t router_max_connections =
      10000;  // per router listener, tunnels included; 0 = no limit; over it: 503
  Seconds router_keepalive_idle_timeout{60};  // a kept-alive client connection idle this long is closed
  Seconds router_tunnel_idle_timeout{
      300};  // an Upgrade tunnel with no byte either way this long is closed; 0 = never
  Seconds router_drain_timeout{30};  // SIGTERM: in-flight requests get this long to finish
  Seconds router_startup_hold{30};   // after start, a request for an unknown host waits this long for the
                                     // first route sync; 0 = 404 at once
  // --- API access (api/server, issue 9) ---
  int64_t api_threads = 4;                        // threads serving API requests (watches hold none)
  int64_t api_max_connections = 1024;             // open API connections; more wait in the listen backlog
  bool api_insecure_loopback = false;             // plain HTTP, no authentication, loopback only
  std::string api_token_file;                     // static bearer tokens: token,user,uid,"group1,group2"
  std::vector<ApiRoleBinding> api_role_bindings;  // who may do what (system:masters is always admin)

  // --- images (images/, issue 5) ---
  std::string platform;                          // "os/arch[/variant]" to pull; empty = this machine's
  std::string registry_auth_file;                // Docker-style config.json with "auths"; empty = anonymous
  std::string registry_ca_file;                  // extra PEM CA bundle trusted for registries
  std::vector<std::string> insecure_registries;  // host[:port] that may be reached over plain HTTP
  int64_t pull_parallelism = 4;                  // blobs fetched at once per pull
  Seconds pull_retry_max{300};                   // back-off cap between failed pulls of one image
  std::vector<std::string> pre_pull_images;      // kept pulled even before any Revision uses them
  Seconds image_gc_interval{300};                // how often image GC looks at the disk
  Seconds image_gc_min_age{3600};                // an unused image younger than this is kept
  int64_t image_gc_high_percent = 85;            // disk use (of the containerd root) that starts GC
  int64_t image_gc_low_percent = 80;             // GC frees unused images down to this
  // --- warm pool (runtime/runner, issue 5) ---
  int64_t warm_pool_size = 1;             // ready-to-serve pods kept for revisions at zero
  std::string warm_pool_mode = "frozen";  // "frozen" (started, paused) or "created" (not started)
  bool operator==(const KnapConfig&) const = default;
};

struct Config {
  AutoscalerConfig autoscaler;
  DefaultsConfig defaults;
  NetworkConfig network;
  DomainConfig domain;
  GcConfig gc;
  DeploymentConfig deployment;
  KnapConfig knap;
  bool operator==(const Config&) const = default;
};

// The embedded defaults knapd runs with when no file is given.
Config defaultConfig();

// Parses YAML text (sections as above, values as in Knative ConfigMaps: strings
// or scalars). Unknown sections or keys are refused. Errors name the key:
// `autoscaler.stable-window: invalid duration "6x": unknown unit "x"`.
StatusOr<Config> parseConfig(const std::string& yaml_text);
StatusOr<Config> loadConfigFile(const std::string& path);

// Every key parseConfig() accepts, as "section.key" (including former names and the
// Knative keys accepted with no effect), sorted. The packaged /etc/knap/config.yaml
// (systemd/config.yaml) is checked against this list and defaultConfig() so it cannot drift.
std::vector<std::string> configKeys();

}  // namespace knap
