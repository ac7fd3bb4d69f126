#include "tools/knap/image_pull_cmd.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>

#include "common/clock.h"
#include "common/config.h"
#include "common/log.h"
#include "images/puller.h"
#include "images/registry_puller.h"
#ifdef KNAP_CLI_HAVE_CONTAINERD
#include "runtime/containerd/containerd_client.h"
#include "runtime/containerd/containerd_image_store.h"
#endif

namespace knap::cli {

namespace {

const char* kPullUsage =
    "usage: knap image pull IMAGE [--config FILE] [--platform os/arch] [--containerd-socket PATH] "
    "[--namespace NS]\n";

std::string humanBytes(int64_t b) {
  char buf[32];
  if (b >= (1 << 30))
    std::snprintf(buf, sizeof buf, "%.2f GB", b / double(1 << 30));
  else if (b >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f MB", b / double(1 << 20));
  else if (b >= (1 << 10))
    std::snprintf(buf, sizeof buf, "%.1f kB", b / double(1 << 10));
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

// Draws progress on stderr: an in-place bar on a terminal, else a line per phase.
class ProgressDisplay {
 public:
  explicit ProgressDisplay(bool tty) : tty_(tty), start_(RealTimeSource::instance().monotonic()) {}

  void update(const images::PullProgress& p) {
    std::lock_guard<std::mutex> lock(mu_);
    const MonoTime now = RealTimeSource::instance().monotonic();
    if (!tty_) {
      if (p.phase == phase_) return;
      phase_ = p.phase;
      if (p.phase == "fetching") {
        std::cerr << "fetching " << p.blobs_total << " blobs (" << humanBytes(p.bytes_total) << ")"
                  << std::endl;
      } else if (p.phase == "done") {
        std::cerr << "done: " << p.blobs_done << "/" << p.blobs_total << " blobs, "
                  << humanBytes(p.bytes_done) << std::endl;
      } else {
        std::cerr << p.phase << " " << p.image << std::endl;
      }
      return;
    }
    const bool phase_changed = p.phase != phase_;
    phase_ = p.phase;
    if (!phase_changed && p.phase != "done" && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = 30;
    const double frac = p.bytes_total > 0 ? double(p.bytes_done) / double(p.bytes_total) : 0.0;
    const int filled = static_cast<int>(frac * width + 0.5);
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? double(p.bytes_done) / secs : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar += std::string(static_cast<size_t>(width - filled), '.');
    char line[256];
    std::snprintf(line, sizeof line, "\r%-10s [%s] %3d%%  %s / %s  %d/%d blobs  %s/s\033[K", p.phase.c_str(),
                  bar.c_str(), static_cast<int>(frac * 100), humanBytes(p.bytes_done).c_str(),
                  humanBytes(p.bytes_total).c_str(), p.blobs_done, p.blobs_total,
                  humanBytes(int64_t(rate)).c_str());
    std::cerr << line << std::flush;
    drawn_ = true;
  }

  void finish() {
    std::lock_guard<std::mutex> lock(mu_);
    if (tty_ && drawn_) std::cerr << "\n" << std::flush;
  }

 private:
  bool tty_;
  std::mutex mu_;
  std::string phase_;
  MonoTime start_;
  MonoTime last_draw_{};
  bool drawn_ = false;
};

}  // namespace

int cmdImagePull(const std::vector<std::string>& args) {
  std::string image, config_path, platform, socket, ns;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) {
        std::cerr << "Error: " << a << " needs a value\n" << kPullUsage;
        std::exit(2);
      }
      return args[++i];
    };
    if (a == "--config")
      config_path = value();
    else if (a == "--platform")
      platform = value();
    else if (a == "--containerd-socket")
      socket = value();
    else if (a == "--namespace" || a == "-n")
      ns = value();
    else if (a == "-h" || a == "--help") {
      std::cout << kPullUsage;
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "Error: unknown flag " << a << "\n" << kPullUsage;
      return 2;
    } else if (image.empty()) {
      image = a;
    } else {
      std::cerr << kPullUsage;
      return 2;
    }
  }
  if (image.empty()) {
    std::cerr << kPullUsage;
    return 2;
  }
  auto fail = [&](const Status& s) {
    std::string msg = s.message();
    const std::string prefix = "pull " + image + ": ";
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    std::cerr << "error: pull " << image << ": " << images::pullFailureReason(s) << ": " << msg << "\n";
    return 1;
  };
  if (config_path.empty() && std::filesystem::exists("/etc/knap/config.yaml"))
    config_path = "/etc/knap/config.yaml";
  Config config = defaultConfig();
  if (!config_path.empty()) {
    auto loaded = loadConfigFile(config_path);
    if (!loaded.isOk()) {
      std::cerr << "error: config " << config_path << ": " << loaded.status().message() << "\n";
      return 2;
    }
    config = std::move(loaded).value();
  }
  if (!platform.empty()) config.knap.platform = platform;
  if (!socket.empty()) config.knap.containerd_socket = socket;
  if (!ns.empty()) config.knap.containerd_namespace = ns;
#ifdef KNAP_CLI_HAVE_CONTAINERD
  log::setMinLevel(log::Level::kError);  // the error line says it all
  containerd::ContainerdClient::Options o;
  o.address = config.knap.containerd_socket.rfind("unix://", 0) == 0
                  ? config.knap.containerd_socket
                  : "unix://" + config.knap.containerd_socket;
  o.ns = config.knap.containerd_namespace;
  containerd::ContainerdClient client(o, RealTimeSource::instance());
  auto puller = images::makeRegistryPuller(config, std::make_unique<containerd::ContainerdImageStore>(client),
                                           RealTimeSource::instance());
  if (!puller.isOk()) return fail(puller.status());
  ProgressDisplay display(::isatty(STDERR_FILENO) != 0);
  auto r = (*puller)->pull(image, [&](const images::PullProgress& p) { display.update(p); });
  display.finish();
  if (!r.isOk()) return fail(r.status());
  std::cout << "pulled " << image << " -> " << r->digest_ref << " (" << r->bytes_fetched << " bytes fetched)"
            << std::endl;
  return 0;
#else
  return fail(Status(Code::kUnsupported, "this knap was built without the containerd client"));
#endif
}

}  // namespace knap::cli
