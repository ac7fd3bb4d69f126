// knap_api_dev_server: the REST server alone on a SqliteStore, for trying
// kubectl by hand (no controllers run, so nothing creates Configurations,
// Routes or Revisions for a Service).
//
//   knap_api_dev_server [--port N] [--db PATH|:memory:] [--kubeconfig PATH] [--socket PATH]
//   kubectl --kubeconfig PATH get ksvc
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include "api/server/api_server.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/log.h"
#include "store/sqlite_store.h"

int main(int argc, char** argv) {
  std::string port = "0";
  std::string db = ":memory:";
  std::string kubeconfig = "/tmp/knap-dev.kubeconfig";
  std::string socket;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--port")
      port = argv[i + 1];
    else if (flag == "--db")
      db = argv[i + 1];
    else if (flag == "--kubeconfig")
      kubeconfig = argv[i + 1];
    else if (flag == "--socket")
      socket = argv[i + 1];
    else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  knap::Config config = knap::defaultConfig();
  auto store = knap::store::SqliteStore::open(db, knap::RealTimeSource::instance(), 10000);
  if (!store.isOk()) {
    std::cerr << "open store: " << store.status().toString() << "\n";
    return 1;
  }
  knap::api::ApiServerOptions options;
  options.tcp_listen = "127.0.0.1:" + port;
  options.unix_socket_path = socket;
  knap::api::ApiServer server(options, config, **store, knap::RealTimeSource::instance());
  knap::Status st = server.start();
  if (!st.isOk()) {
    std::cerr << "start: " << st.toString() << "\n";
    return 1;
  }
  st = knap::api::writeKubeconfig(kubeconfig, server.url());
  if (!st.isOk()) std::cerr << "kubeconfig: " << st.toString() << "\n";
  std::cout << "serving " << server.url() << " kubeconfig " << kubeconfig << std::endl;
  int sig = 0;
  sigwait(&set, &sig);
  server.stop();
  return 0;
}
