#include "runtime/pod/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace knap::runtime {
namespace {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int* out() { return &fd_; }

 private:
  int fd_ = -1;
};

std::string errnoText(int err) {
  return std::strerror(err);
}

std::string joinArgv(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

int waitChild(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

StatusOr<ProgramResult> runProgram(const std::vector<std::string>& argv, const ProgramOptions& options,
                                   const TimeSource& time) {
  if (argv.empty()) return invalidArgument("runProgram: empty argv");

  int in_pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in_pair) < 0) {
    return internalError("socketpair: " + errnoText(errno));
  }
  Fd in_parent(in_pair[0]), in_child(in_pair[1]);
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) < 0) return internalError("pipe: " + errnoText(errno));
  Fd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) return internalError("pipe: " + errnoText(errno));
  Fd err_read(err_pipe[0]), err_write(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_child.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_write.get(), 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The child starts with default signal dispositions and an empty mask, even
  // when knapd ignores SIGPIPE or blocks signals for its threads.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  char** envp = environ;
  if (!options.env.empty()) {
    for (const auto& e : options.env) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    envp = cenv.data();
  }

  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, cargv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    if (rc == ENOENT || rc == EACCES || rc == ENOEXEC) {
      return notFound("cannot run " + argv[0] + ": " + errnoText(rc));
    }
    return internalError("posix_spawn " + argv[0] + ": " + errnoText(rc));
  }
  in_child.reset();
  out_write.reset();
  err_write.reset();

  ProgramResult result;
  size_t written = 0;
  if (options.stdin_text.empty()) ::shutdown(in_parent.get(), SHUT_WR);
  const MonoTime deadline = time.monotonic() + options.timeout;
  bool timed_out = false;
  char buf[16384];
  while (out_read.get() >= 0 || err_read.get() >= 0) {
    pollfd fds[3];
    int n = 0;
    int out_idx = -1, err_idx = -1, in_idx = -1;
    if (out_read.get() >= 0) {
      out_idx = n;
      fds[n++] = {out_read.get(), POLLIN, 0};
    }
    if (err_read.get() >= 0) {
      err_idx = n;
      fds[n++] = {err_read.get(), POLLIN, 0};
    }
    if (in_parent.get() >= 0 && written < options.stdin_text.size()) {
      in_idx = n;
      fds[n++] = {in_parent.get(), POLLOUT, 0};
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - time.monotonic());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    int pr = ::poll(fds, n, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (in_idx >= 0 && (fds[in_idx].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = ::send(in_parent.get(), options.stdin_text.data() + written,
                         options.stdin_text.size() - written, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) written += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) written = options.stdin_text.size();
      if (written >= options.stdin_text.size()) ::shutdown(in_parent.get(), SHUT_WR);
    }
    auto drain = [&](int idx, Fd& fd, std::string& sink) {
      if (idx < 0 || !(fds[idx].revents & (POLLIN | POLLHUP | POLLERR))) return;
      ssize_t r = ::read(fd.get(), buf, sizeof buf);
      if (r > 0) {
        size_t room = options.max_output > sink.size() ? options.max_output - sink.size() : 0;
        sink.append(buf, std::min(room, static_cast<size_t>(r)));
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        fd.reset();
      }
    };
    drain(out_idx, out_read, result.stdout_text);
    drain(err_idx, err_read, result.stderr_text);
  }
  if (timed_out) ::kill(pid, SIGKILL);
  result.exit_code = waitChild(pid);
  if (timed_out) {
    return Status(
        Code::kDeadlineExceeded,
        joinArgv(argv) + ": still running after " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout).count()) +
            " ms; killed");
  }
  return result;
}

StatusOr<std::string> runChecked(const std::vector<std::string>& argv, const ProgramOptions& options,
                                 const TimeSource& time) {
  KNAP_ASSIGN_OR_RETURN(ProgramResult r, runProgram(argv, options, time));
  if (r.exit_code != 0) {
    std::string err = r.stderr_text;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    if (err.empty()) err = r.stdout_text;
    return internalError(joinArgv(argv) + " exited with " + std::to_string(r.exit_code) +
                         (err.empty() ? "" : ": " + err));
  }
  return std::move(r.stdout_text);
}

}  // namespace knap::runtime
