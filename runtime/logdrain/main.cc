// knap-logdrain: the log driver containerd's shim runs for each pod
// (Tasks.Create stdout = stderr = "binary:///path/knap-logdrain?dir=D&max=N").
// The shim starts it with the container's stdout on fd 3, stderr on fd 4 and
// a ready pipe on fd 5, and passes the URI query as arguments "dir D max N"
// (any order). It closes fd 5 once its files are open, then reads both pipes
// until EOF, appending to D/stdout.log and D/stderr.log through LogSink:
// rotated at N bytes, lines dropped and counted when the disk is full or
// read-only, so the pod never blocks on its own output. It is the shim's
// child, so it keeps draining while knapd is stopped or restarting.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/logdrain/log_sink.h"

int main(int argc, char** argv) {
  std::string dir;
  long long max_bytes = 10 * 1024 * 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "dir") {
      dir = v;
    } else if (k == "max") {
      max_bytes = std::atoll(v.c_str());
    }
  }
  if (dir.empty() || dir[0] != '/') {
    std::fprintf(stderr,
                 "usage: knap-logdrain dir /abs/pod/dir [max BYTES] (fds 3, 4: stdout, stderr; 5: ready)\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);  // the shim closes the pipes first; drain to EOF
  knap::logdrain::LogSink out(dir + "/stdout.log", max_bytes);
  knap::logdrain::LogSink err(dir + "/stderr.log", max_bytes);
  ::close(5);  // ready

  pollfd fds[2] = {{3, POLLIN, 0}, {4, POLLIN, 0}};
  knap::logdrain::LogSink* sinks[2] = {&out, &err};
  int open_fds = 2;
  static char buf[64 * 1024];
  while (open_fds > 0) {
    int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        sinks[i]->append(std::string_view(buf, static_cast<size_t>(r)));
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fds[i].fd);
        fds[i].fd = -1;  // poll ignores negative fds
        --open_fds;
      }
    }
  }
  return 0;
}
