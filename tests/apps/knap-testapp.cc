// knap-testapp: a tiny static HTTP/1.1 server that reports what a container
// sees, for knap's runtime-contract and end-to-end tests (KNATIVE-CONTRACT.md
// §1). No dependencies beyond libc/libstdc++; linked statically so it runs in
// an image with nothing else in it.
//
// Threads: one accept loop, one thread per connection. Counters are atomics;
// the allocation list and health flag are guarded by a mutex/atomic.
//
// Flags: --port-from-arg N   listen on N (overrides $PORT; default 8080)
//        --listen-delay-ms N sleep N ms before listening (slow start)
//        --exit-after-ms N   exit with status 3 after N ms (crash tests)
//        --fail-start        log a line and exit 1 at once
//        --crash-after-ms N  log "Started...", after N ms "Crashed..." and
//                            exit 5 (Knative's "failing" test image)
// Env (Knative's "readiness" test image): READY_DELAY (Go-style "10s",
// "500ms": /healthz/readiness fails until then), LISTEN_DELAY (listen late).
// `knap-testapp probe`: exec-probe helper, exit 0 iff
// GET http://127.0.0.1:$PORT/healthz/readiness answers 2xx.
// SIGTERM/SIGINT: stop accepting, finish in-flight requests, exit 0.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

std::atomic<int> g_inflight{0};  // read .. response fully sent (drain waits on it)
// max_inflight counts a request from its read until its response is about to
// be completed, not after: once the last byte is sent the client (the router)
// may send the next request before this thread gets to count the old one out,
// and a strictly one-at-a-time client would otherwise be seen as 2 in flight.
std::atomic<int> g_handling{0};
std::atomic<int> g_max_inflight{0};
thread_local bool t_handling = false;
std::atomic<long> g_connections{0};  // connection serial numbers for /whoami
thread_local long t_conn = 0;        // this connection's serial number
thread_local long t_seq = 0;         // requests seen on this connection
std::atomic<long> g_requests{0};
std::atomic<bool> g_healthy{true};
std::atomic<bool> g_ready{true};           // /healthz/readiness, /start-failing
std::atomic<long> g_liveness_checks{0};    // /healthz/liveness calls while ready
std::atomic<bool> g_single_locked{false};  // /single
constexpr char kHelloWorld[] = "Hello World! How about some tasty noodles?";
std::atomic<bool> g_stopping{false};
int g_wake_pipe[2] = {-1, -1};
std::mutex g_mu;
std::condition_variable g_cv;
std::vector<std::unique_ptr<char[]>> g_allocs;
size_t g_alloc_mb = 0;
std::vector<std::string> g_argv;
std::chrono::steady_clock::time_point g_start;

// The current request's response is about to be completed: no longer counts
// towards max_inflight. Idempotent per request.
void doneHandling() {
  if (!t_handling) return;
  t_handling = false;
  --g_handling;
}

void logLine(const std::string& s) {
  std::string line = s + "\n";
  ssize_t ignored = write(1, line.data(), line.size());
  (void)ignored;
}

// ------------------------------------------------------------------ JSON

std::string jsonEscape(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

// Minimal ordered JSON object builder.
class Obj {
 public:
  Obj& str(const std::string& k, const std::string& v) { return raw(k, jsonEscape(v)); }
  Obj& num(const std::string& k, long long v) { return raw(k, std::to_string(v)); }
  Obj& boolean(const std::string& k, bool v) { return raw(k, v ? "true" : "false"); }
  Obj& null(const std::string& k) { return raw(k, "null"); }
  Obj& raw(const std::string& k, const std::string& v) {
    if (!body_.empty()) body_ += ",";
    body_ += jsonEscape(k) + ":" + v;
    return *this;
  }
  std::string done() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

std::string strArray(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + jsonEscape(v[i]);
  return out + "]";
}

// ------------------------------------------------------------------ HTTP

struct Request {
  std::string method, target, path, protocol;
  std::map<std::string, std::string> query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string header(const std::string& name) const {
    for (const auto& [k, v] : headers) {
      if (strcasecmp(k.c_str(), name.c_str()) == 0) return v;
    }
    return "";
  }
};

std::string urlDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() && isxdigit(s[i + 1]) && isxdigit(s[i + 2])) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool sendAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

const char* reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 413:
      return "Payload Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

bool respond(int fd, int code, const std::string& body, bool keep_alive,
             const std::string& content_type = "application/json") {
  std::string head = "HTTP/1.1 " + std::to_string(code) + " " + reason(code) + "\r\n" +
                     "Content-Type: " + content_type + "\r\n" +
                     "Content-Length: " + std::to_string(body.size()) + "\r\n" +
                     (keep_alive ? "" : "Connection: close\r\n") + "\r\n";
  doneHandling();  // the whole response goes in this one write
  return sendAll(fd, head + body);
}

// Buffered reader over a socket.
class Conn {
 public:
  explicit Conn(int fd) : fd_(fd) {}
  // Reads until "\r\n\r\n"; false on EOF/error/oversize.
  bool readHead(std::string* head) {
    while (true) {
      size_t pos = buf_.find("\r\n\r\n");
      if (pos != std::string::npos) {
        *head = buf_.substr(0, pos);
        buf_.erase(0, pos + 4);
        return true;
      }
      if (buf_.size() > 64 * 1024 || !fill()) return false;
    }
  }
  bool readExact(size_t n, std::string* out) {
    while (buf_.size() < n) {
      if (!fill()) return false;
    }
    out->append(buf_, 0, n);
    buf_.erase(0, n);
    return true;
  }
  bool readLine(std::string* line) {
    while (true) {
      size_t pos = buf_.find("\r\n");
      if (pos != std::string::npos) {
        *line = buf_.substr(0, pos);
        buf_.erase(0, pos + 2);
        return true;
      }
      if (buf_.size() > 8192 || !fill()) return false;
    }
  }

 private:
  bool fill() {
    char tmp[16384];
    while (true) {
      ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf_.append(tmp, static_cast<size_t>(n));
      return true;
    }
  }
  int fd_;
  std::string buf_;
};

// Parses one request; 0 = ok, -1 = connection closed, >0 = HTTP error code.
int readRequest(Conn& c, Request* r) {
  std::string head;
  if (!c.readHead(&head)) return -1;
  std::istringstream in(head);
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::istringstream rl(line);
  if (!(rl >> r->method >> r->target >> r->protocol)) return 400;
  size_t q = r->target.find('?');
  r->path = r->target.substr(0, q);
  if (q != std::string::npos) {
    std::string qs = r->target.substr(q + 1);
    size_t start = 0;
    while (start <= qs.size()) {
      size_t amp = qs.find('&', start);
      std::string kv = qs.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
      size_t eq = kv.find('=');
      if (!kv.empty())
        r->query[urlDecode(kv.substr(0, eq))] = eq == std::string::npos ? "" : urlDecode(kv.substr(eq + 1));
      if (amp == std::string::npos) break;
      start = amp + 1;
    }
  }
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
    r->headers.emplace_back(line.substr(0, colon), v);
  }
  const size_t kMaxBody = 64u << 20;
  std::string te = r->header("Transfer-Encoding");
  std::transform(te.begin(), te.end(), te.begin(), ::tolower);
  if (te.find("chunked") != std::string::npos) {
    while (true) {
      std::string size_line;
      if (!c.readLine(&size_line)) return -1;
      size_t n = std::strtoul(size_line.c_str(), nullptr, 16);
      if (r->body.size() + n > kMaxBody) return 413;
      if (n == 0) {
        std::string trailer;
        do {
          if (!c.readLine(&trailer)) return -1;
        } while (!trailer.empty());
        break;
      }
      if (!c.readExact(n, &r->body)) return -1;
      std::string crlf;
      if (!c.readLine(&crlf)) return -1;
    }
  } else if (!r->header("Content-Length").empty()) {
    size_t n = std::strtoul(r->header("Content-Length").c_str(), nullptr, 10);
    if (n > kMaxBody) return 413;
    if (!c.readExact(n, &r->body)) return -1;
  }
  return 0;
}

// ------------------------------------------------------------------ /info

std::string readSmallFile(const std::string& path, bool* ok) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *ok = false;
    return "";
  }
  std::string s(4096, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(f.gcount()));
  *ok = true;
  return s;
}

std::string fileOrNull(const std::string& path) {
  bool ok = false;
  std::string s = readSmallFile(path, &ok);
  if (!ok) return "null";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return jsonEscape(s);
}

std::string fileInfo(const std::string& path) {
  struct stat st {};
  Obj o;
  if (lstat(path.c_str(), &st) != 0) return o.boolean("exists", false).str("error", strerror(errno)).done();
  const char* type = S_ISDIR(st.st_mode)    ? "directory"
                     : S_ISREG(st.st_mode)  ? "file"
                     : S_ISLNK(st.st_mode)  ? "symlink"
                     : S_ISCHR(st.st_mode)  ? "char_device"
                     : S_ISBLK(st.st_mode)  ? "block_device"
                     : S_ISFIFO(st.st_mode) ? "fifo"
                     : S_ISSOCK(st.st_mode) ? "socket"
                                            : "unknown";
  char mode[8];
  snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
  std::string perm = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) {
    if (!(st.st_mode & (1 << (8 - i)))) perm[static_cast<size_t>(i)] = '-';
  }
  struct stat followed {};
  o.boolean("exists", true).str("type", type);
  if (stat(path.c_str(), &followed) == 0) o.boolean("is_dir", S_ISDIR(followed.st_mode));  // Knative's IsDir
  o.str("mode", mode).str("perm", perm).num("uid", st.st_uid).num("gid", st.st_gid);
  if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
    o.str("link_target", n >= 0 ? std::string(buf, static_cast<size_t>(n)) : "");
  }
  return o.done();
}

// Mount options of the mount point at exactly `mount_point` (last one wins).
std::string mountOptions(const std::string& mount_point) {
  std::ifstream f("/proc/self/mountinfo");
  std::string line, found;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string id, parent, dev, root, mp, opts;
    in >> id >> parent >> dev >> root >> mp >> opts;
    if (mp == mount_point) found = opts;
  }
  return found;
}

std::string writableProbe(const std::vector<std::string>& candidates, const std::string& mount_point) {
  Obj o;
  o.str("mount_options", mountOptions(mount_point));
  for (const auto& p : candidates) {
    if (access(p.c_str(), F_OK) != 0) continue;
    int fd = open(p.c_str(), O_WRONLY | O_CLOEXEC);  // opening writes nothing
    o.str("probe", p);
    if (fd >= 0) {
      close(fd);
      return o.boolean("writable", true).done();
    }
    return o.boolean("writable", false).str("error", strerror(errno)).done();
  }
  return o.null("writable").done();
}

std::string stdinProbe() {
  struct pollfd p {
    0, POLLIN, 0
  };
  int r = poll(&p, 1, 100);
  if (r == 0) return "\"blocked\"";
  if (r < 0) return jsonEscape(std::string("error: ") + strerror(errno));
  char c;
  ssize_t n = read(0, &c, 1);
  if (n == 0) return "\"eof\"";
  if (n < 0) return jsonEscape(std::string("error: ") + strerror(errno));
  return "\"data\"";
}

std::string info() {
  char cwd[4096] = "";
  if (getcwd(cwd, sizeof cwd) == nullptr) snprintf(cwd, sizeof cwd, "error: %s", strerror(errno));
  char host[256] = "";
  gethostname(host, sizeof host);
  std::vector<std::string> groups;
  gid_t gs[64];
  int ng = getgroups(64, gs);
  for (int i = 0; i < ng; ++i) groups.push_back(std::to_string(gs[i]));
  Obj files;
  for (const char* p : {"/tmp",          "/var/log",        "/dev/fd",          "/dev/full",
                        "/dev/null",     "/dev/ptmx",       "/dev/random",      "/dev/urandom",
                        "/dev/zero",     "/dev/tty",        "/dev/stdin",       "/dev/stdout",
                        "/dev/stderr",   "/proc/self/fd/0", "/proc/self/fd/1",  "/proc/self/fd/2",
                        "/dev/console",  "/dev/shm",        "/etc/resolv.conf", "/etc/hosts",
                        "/etc/hostname", "/proc/sys",       "/sys/fs/cgroup"}) {
    files.raw(p, fileInfo(p));
  }
  std::vector<std::string> dev;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) dev.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(dev.begin(), dev.end());
  Obj cg1, cg2;
  cg1.raw("memory.limit_in_bytes", fileOrNull("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
  for (const char* f : {"cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares"}) {
    std::string v = fileOrNull(std::string("/sys/fs/cgroup/cpu/") + f);
    if (v == "null") v = fileOrNull(std::string("/sys/fs/cgroup/cpu,cpuacct/") + f);
    cg1.raw(f, v);
  }
  cg2.raw("memory.max", fileOrNull("/sys/fs/cgroup/memory.max"))
      .raw("cpu.max", fileOrNull("/sys/fs/cgroup/cpu.max"))
      .raw("cpu.weight", fileOrNull("/sys/fs/cgroup/cpu.weight"));
  auto uptime =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - g_start);
  return Obj()
      .str("cwd", cwd)
      .raw("argv", strArray(g_argv))
      .num("pid", getpid())
      .num("ppid", getppid())
      .num("uid", getuid())
      .num("euid", geteuid())
      .num("gid", getgid())
      .num("egid", getegid())
      .raw("groups", strArray(groups))
      .str("hostname", host)
      .raw("stdin", stdinProbe())
      .raw("files", files.done())
      .raw("dev", strArray(dev))
      .raw("resolv_conf", fileOrNull("/etc/resolv.conf"))
      .raw("hosts", fileOrNull("/etc/hosts"))
      .raw("etc_hostname", fileOrNull("/etc/hostname"))
      .raw("cgroup_v1", cg1.done())
      .raw("cgroup_v2", cg2.done())
      .raw("cgroup_fs",
           writableProbe({"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/cpu/cpu.shares",
                          "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/memory.max"},
                         "/sys/fs/cgroup"))
      .raw("proc_sys",
           writableProbe({"/proc/sys/kernel/hostname", "/proc/sys/vm/overcommit_memory"}, "/proc/sys"))
      .num("uptime_ms", uptime.count())
      .done();
}

// ------------------------------------------------------------------ handlers

long queryNum(const Request& r, const char* key, long def) {
  auto it = r.query.find(key);
  if (it == r.query.end() || it->second.empty()) return def;
  return std::strtol(it->second.c_str(), nullptr, 10);
}

std::string envJson() {
  Obj o;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    o.str(kv.substr(0, eq), eq == std::string::npos ? "" : kv.substr(eq + 1));
  }
  return o.done();
}

std::string inflightJson() {
  return Obj()
      .num("inflight", g_inflight.load())
      .num("max_inflight", g_max_inflight.load())
      .num("requests", g_requests.load())
      .done();
}

// ------------------------------------------------------------------ Knative test images
// Endpoints that do what knative/serving's conformance test images do
// (readiness, timeout, singlethreaded, hellovolume, multicontainer).

// "10s", "500ms", "2m", or a plain number of seconds -> milliseconds; -1 if bad.
long parseDurationMs(const std::string& s) {
  if (s.empty()) return -1;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? end : "";
  if (end == s.c_str() || v < 0) return -1;
  if (unit == "ms") return static_cast<long>(v);
  if (unit == "s" || unit.empty()) return static_cast<long>(v * 1000);
  if (unit == "m") return static_cast<long>(v * 60000);
  return -1;
}

// GET http://127.0.0.1:port/path (HTTP/1.0, 10 s); status (0 = no answer) and body.
std::pair<int, std::string> localGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {0, strerror(errno)};
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string resp;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::string err = strerror(errno);
    close(fd);
    return {0, "connect 127.0.0.1:" + std::to_string(port) + ": " + err};
  }
  sendAll(fd, "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  char buf[8192];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  int code = 0;
  if (resp.rfind("HTTP/1.", 0) == 0 && resp.size() > 12) code = atoi(resp.c_str() + 9);
  size_t body = resp.find("\r\n\r\n");
  return {code, body == std::string::npos ? "" : resp.substr(body + 4)};
}

int servingPort() {
  const char* p = getenv("PORT");
  return p && *p ? atoi(p) : 8080;
}

// 1: handled, keep going; 0: handled, close; -1: not one of these paths.
int handleConformance(int fd, const Request& r, bool keep_alive) {
  const std::string& p = r.path;
  if (p == "/healthz/readiness") {
    bool ok = g_ready.load();
    return respond(fd, ok ? 200 : 500, ok ? kHelloWorld : "not healthy", keep_alive, "text/plain") ? 1 : 0;
  }
  if (p == "/healthz/liveness") {
    if (!g_ready.load()) return respond(fd, 500, "not healthy", keep_alive, "text/plain") ? 1 : 0;
    return respond(fd, 200, std::to_string(++g_liveness_checks), keep_alive, "text/plain") ? 1 : 0;
  }
  if (p == "/healthz/livenessCounter") {
    return respond(fd, 200, std::to_string(g_liveness_checks.load()), keep_alive, "text/plain") ? 1 : 0;
  }
  if (p == "/start-failing") {
    g_ready = false;
    logLine("knap-testapp: readiness and liveness fail from now on (/start-failing)");
    return respond(fd, 200, "will now fail readiness", keep_alive, "text/plain") ? 1 : 0;
  }
  if (p == "/sick") {
    // For exec liveness probes that test for the file.
    int f = open("/tmp/sick", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (f >= 0) close(f);
    return respond(fd, f >= 0 ? 200 : 500, f >= 0 ? "/tmp/sick created" : strerror(errno), keep_alive,
                   "text/plain")
               ? 1
               : 0;
  }
  if (p == "/hello") return respond(fd, 200, kHelloWorld, keep_alive, "text/plain") ? 1 : 0;
  if (p == "/text") {
    // One image, several "apps" (Knative's pizzaplanet v1/v2, helloworld):
    // images differ only in $TEXT.
    const char* t = getenv("TEXT");
    return respond(fd, 200, t && *t ? t : kHelloWorld, keep_alive, "text/plain") ? 1 : 0;
  }
  if (p == "/timeout") {
    // Knative's "timeout" image: sleep initialTimeout ms, send the status
    // line and headers, sleep timeout ms, then the body.
    long initial = queryNum(r, "initialTimeout", 0), later = queryNum(r, "timeout", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(initial));
    if (!sendAll(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n" +
                         std::string(keep_alive ? "" : "Connection: close\r\n") + "\r\n")) {
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(later));
    std::string body = "Slept for " + std::to_string(later) + " milliseconds";
    char len[16];
    snprintf(len, sizeof len, "%zx\r\n", body.size());
    doneHandling();
    return sendAll(fd, len + body + "\r\n0\r\n\r\n") && keep_alive ? 1 : 0;
  }
  if (p == "/single") {
    // Knative's "singlethreaded" image: 500 if another request is inside.
    bool expected = false;
    if (!g_single_locked.compare_exchange_strong(expected, true)) {
      return respond(fd, 500, "", keep_alive, "text/plain") ? 1 : 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(queryNum(r, "ms", 500)));
    g_single_locked = false;
    return respond(fd, 200, "One at a time", keep_alive, "text/plain") ? 1 : 0;
  }
  if (p == "/file") {
    // Knative's "hellovolume" image and the runtime image's file checks.
    auto it = r.query.find("path");
    std::string path = it == r.query.end() ? "" : it->second;
    bool ok = false;
    std::string content = readSmallFile(path, &ok);
    Obj o;
    o.str("path", path).raw("stat", fileInfo(path));
    if (ok) o.str("content", content);
    return respond(fd, ok ? 200 : 404, o.done(), keep_alive) ? 1 : 0;
  }
  if (p == "/write") {
    // Knative's "volumes" image: write a file (emptyDir), read it back with /file.
    auto it = r.query.find("path");
    auto text = r.query.find("text");
    std::string path = it == r.query.end() ? "" : it->second;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << (text == r.query.end() ? "" : text->second);
    f.close();
    bool ok = static_cast<bool>(f);
    return respond(fd, ok ? 200 : 500, ok ? "written" : std::string("cannot write ") + path, keep_alive,
                   "text/plain")
               ? 1
               : 0;
  }
  if (p == "/mounts") {
    // Mount points with their options (read-only checks of volumes).
    std::ifstream f("/proc/self/mountinfo");
    std::string line;
    Obj o;
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string id, parent, dev, root, mp, opts;
      in >> id >> parent >> dev >> root >> mp >> opts;
      std::string field, type, source, super_opts;
      while (in >> field && field != "-") {
      }  // optional fields end at "-"
      in >> type >> source >> super_opts;
      o.raw(mp, Obj()
                    .str("options", opts)
                    .str("type", type)
                    .str("source", source)
                    .str("super_options", super_opts)
                    .done());
    }
    return respond(fd, 200, o.done(), keep_alive) ? 1 : 0;
  }
  if (p == "/forward") {
    // Knative's "multicontainer" serving container: GET the sidecar on
    // localhost:$FORWARD_PORT (or ?port=) and return its body.
    const char* fp = getenv("FORWARD_PORT");
    long port = queryNum(r, "port", fp && *fp ? atol(fp) : 0);
    auto path_it = r.query.find("path");
    auto [code, body] = localGet(static_cast<int>(port), path_it == r.query.end() ? "/" : path_it->second);
    return respond(fd, code == 0 ? 502 : code, body, keep_alive, "text/plain") ? 1 : 0;
  }
  return -1;
}

// Which request this pod saw, so a client can check the response it got is
// the one for its own request: the X-Request-Id it sent, method, target,
// body length and FNV-1a-64 digest, and the connection's serial number and
// request count (keep-alive and pooling are visible).
std::string whoami(const Request& r) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : r.body) h = (h ^ c) * 1099511628211ull;
  char digest[17];
  snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(h));
  return Obj()
      .str("id", r.header("X-Request-Id"))
      .str("method", r.method)
      .str("target", r.target)
      .num("body_len", static_cast<long long>(r.body.size()))
      .str("body_fnv", digest)
      .num("conn", t_conn)
      .num("seq", t_seq)
      .done();
}

// Responses framed the way some real servers write them, for the router's
// upstream leniency: ?mode=lf (bare LF line endings, like busybox httpd CGI
// scripts), ?mode=connection-cl (Content-Length named in Connection).
bool rawHead(int fd, const Request& r, bool keep_alive) {
  const std::string mode = r.query.count("mode") ? r.query.at("mode") : "";
  const std::string body = "raw " + mode + "\n";
  const std::string len = std::to_string(body.size());
  std::string head;
  if (mode == "lf") {
    head = "HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: " + len + "\n" +
           (keep_alive ? "" : "Connection: close\n") + "\n";
  } else if (mode == "connection-cl") {
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: Content-Length" +
           std::string(keep_alive ? "" : ", close") + "\r\nContent-Length: " + len + "\r\n\r\n";
  } else {
    return respond(fd, 400, Obj().str("error", "mode must be lf or connection-cl").done(), keep_alive);
  }
  doneHandling();
  return sendAll(fd, head + body);
}

// Returns false when the connection must close.
bool handle(int fd, const Request& r, bool keep_alive) {
  const std::string& p = r.path;
  auto env = [](const char* k) {
    const char* v = getenv(k);
    return std::string(v ? v : "");
  };
  if (p == "/") {
    std::string rev = env("K_REVISION");
    return respond(fd, 200,
                   Obj()
                       .str("message", "Hello from knap-testapp! revision=" + rev)
                       .str("revision", rev)
                       .str("configuration", env("K_CONFIGURATION"))
                       .str("service", env("K_SERVICE"))
                       .num("pid", getpid())
                       .done(),
                   keep_alive);
  }
  if (p == "/env") return respond(fd, 200, envJson(), keep_alive);
  if (p == "/headers") {
    std::map<std::string, std::string> merged;
    std::vector<std::string> order;
    for (const auto& [k, v] : r.headers) {
      auto it = merged.find(k);
      if (it == merged.end()) {
        merged[k] = v;
        order.push_back(k);
      } else {
        it->second += ", " + v;
      }
    }
    Obj h;
    for (const auto& k : order) h.str(k, merged[k]);
    return respond(fd, 200,
                   Obj()
                       .str("method", r.method)
                       .str("path", r.path)
                       .str("target", r.target)
                       .str("protocol", r.protocol)
                       .str("host", r.header("Host"))
                       .raw("headers", h.done())
                       .done(),
                   keep_alive);
  }
  if (p == "/info") return respond(fd, 200, info(), keep_alive);
  if (p == "/sleep") {
    long ms = queryNum(r, "ms", 1000);
    int now = g_inflight.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return respond(fd, 200,
                   Obj()
                       .num("slept_ms", ms)
                       .num("inflight_at_start", now)
                       .num("max_inflight", g_max_inflight.load())
                       .done(),
                   keep_alive);
  }
  if (p == "/stream") {
    long chunks = queryNum(r, "chunks", 5), ms = queryNum(r, "ms", 100);
    if (!sendAll(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n" +
                         std::string(keep_alive ? "" : "Connection: close\r\n") + "\r\n")) {
      return false;
    }
    for (long i = 0; i < chunks; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      std::string data = "chunk " + std::to_string(i) + "\n";
      char len[16];
      snprintf(len, sizeof len, "%zx\r\n", data.size());
      if (!sendAll(fd, len + data + "\r\n")) return false;
    }
    doneHandling();  // the last chunk completes the response
    return sendAll(fd, "0\r\n\r\n");
  }
  if (p == "/alloc") {
    long mb = queryNum(r, "mb", 0);
    std::lock_guard<std::mutex> l(g_mu);
    if (r.query.count("free")) {
      g_allocs.clear();
      g_alloc_mb = 0;
    }
    for (long i = 0; i < mb; ++i) {
      std::unique_ptr<char[]> block(new char[1 << 20]);
      for (size_t off = 0; off < (1u << 20); off += 4096)
        block[off] = static_cast<char>(off);  // touch every page
      g_allocs.push_back(std::move(block));
      ++g_alloc_mb;
    }
    return respond(fd, 200, Obj().num("allocated_mb", static_cast<long long>(g_alloc_mb)).done(), keep_alive);
  }
  if (p == "/crash") {
    int code = static_cast<int>(queryNum(r, "code", 1));
    logLine("knap-testapp: crashing with exit code " + std::to_string(code));
    respond(fd, 200, Obj().num("exit_code", code).done(), false);
    _exit(code);
  }
  if (p == "/healthz") {
    bool ok = g_healthy.load();
    return respond(fd, ok ? 200 : 503, Obj().boolean("healthy", ok).done(), keep_alive);
  }
  if (p == "/health/off" || p == "/health/on") {
    g_healthy = p == "/health/on";
    return respond(fd, 200, Obj().boolean("healthy", g_healthy.load()).done(), keep_alive);
  }
  if (p == "/echo") {
    std::string ct = r.header("Content-Type");
    return respond(fd, 200, r.body, keep_alive, ct.empty() ? "application/octet-stream" : ct);
  }
  if (p == "/inflight") return respond(fd, 200, inflightJson(), keep_alive);
  if (p == "/whoami") return respond(fd, 200, whoami(r), keep_alive);
  if (p == "/rawhead") return rawHead(fd, r, keep_alive);
  if (const int rc = handleConformance(fd, r, keep_alive); rc >= 0) return rc == 1;
  return respond(fd, 404, Obj().str("error", "no such path: " + p).done(), keep_alive);
}

void serveConnection(int fd) {
  Conn c(fd);
  t_conn = ++g_connections;
  t_seq = 0;
  while (true) {
    Request r;
    int rc = readRequest(c, &r);
    if (rc < 0) break;
    if (rc > 0) {
      respond(fd, rc, Obj().str("error", reason(rc)).done(), false);
      break;
    }
    ++g_inflight;
    int now = ++g_handling;
    t_handling = true;
    int prev = g_max_inflight.load();
    while (now > prev && !g_max_inflight.compare_exchange_weak(prev, now)) {
    }
    ++g_requests;
    ++t_seq;
    logLine(r.method + " " + r.target + " " + r.protocol);
    std::string conn = r.header("Connection");
    std::transform(conn.begin(), conn.end(), conn.begin(), ::tolower);
    bool keep_alive = r.protocol == "HTTP/1.1" ? conn != "close" : conn == "keep-alive";
    if (g_stopping) keep_alive = false;
    bool ok = handle(fd, r, keep_alive);
    doneHandling();
    {
      std::lock_guard<std::mutex> l(g_mu);
      --g_inflight;
    }
    g_cv.notify_all();
    if (!ok || !keep_alive) break;
  }
  close(fd);
}

void onSignal(int) {
  g_stopping = true;
  char b = 1;
  ssize_t ignored = write(g_wake_pipe[1], &b, 1);
  (void)ignored;
}

}  // namespace

int main(int argc, char** argv) {
  g_start = std::chrono::steady_clock::now();
  for (int i = 0; i < argc; ++i) g_argv.push_back(argv[i]);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int port = 8080;
  if (const char* p = getenv("PORT"); p && *p) port = atoi(p);
  long listen_delay = 0, exit_after = -1, crash_after = -1;
  if (argc >= 2 && std::string(argv[1]) == "probe") {
    auto [code, body] = localGet(port, "/healthz/readiness");
    if (code == 0) fprintf(stderr, "knap-testapp probe: %s\n", body.c_str());
    return code >= 200 && code <= 299 ? 0 : 1;
  }
  if (const char* d = getenv("LISTEN_DELAY"); d && *d) listen_delay = std::max(0L, parseDurationMs(d));
  if (const char* d = getenv("READY_DELAY"); d && *d) {
    long ms = std::max(0L, parseDurationMs(d));
    g_ready = false;
    std::thread([ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      g_ready = true;
    }).detach();
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> long {
      if (i + 1 >= argc) {
        fprintf(stderr, "knap-testapp: %s needs a value\n", a.c_str());
        exit(2);
      }
      return std::strtol(argv[++i], nullptr, 10);
    };
    if (a == "--fail-start") {
      logLine("knap-testapp: failing at start as asked (--fail-start)");
      fprintf(stderr, "knap-testapp: --fail-start\n");
      return 1;
    } else if (a == "--port-from-arg") {
      port = static_cast<int>(next());
    } else if (a == "--listen-delay-ms") {
      listen_delay = next();
    } else if (a == "--exit-after-ms") {
      exit_after = next();
    } else if (a == "--crash-after-ms") {
      crash_after = next();
    } else if (a.rfind("--", 0) != 0) {
      continue;  // a plain argument (Knative's TestCmdArgs): only reported in /info argv
    } else {
      fprintf(stderr, "knap-testapp: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (pipe2(g_wake_pipe, O_CLOEXEC) != 0) return 1;
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (exit_after >= 0) {
    std::thread([exit_after] {
      std::this_thread::sleep_for(std::chrono::milliseconds(exit_after));
      logLine("knap-testapp: exiting after " + std::to_string(exit_after) + " ms (--exit-after-ms)");
      _exit(3);
    }).detach();
  }
  if (crash_after >= 0) {
    logLine("Started...");
    std::this_thread::sleep_for(std::chrono::milliseconds(crash_after));
    logLine("Crashed...");
    fprintf(stderr, "Crashed...\n");
    return 5;
  }
  logLine("knap-testapp: starting, pid " + std::to_string(getpid()) + ", port " + std::to_string(port));
  if (listen_delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(listen_delay));
  int lfd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = lfd >= 0;
  if (!v6) lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1, zero = 0;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0 || listen(lfd, 1024) != 0) {
    fprintf(stderr, "knap-testapp: cannot listen on port %d: %s\n", port, strerror(errno));
    logLine("knap-testapp: cannot listen on port " + std::to_string(port));
    return 1;
  }
  logLine("knap-testapp: listening on port " + std::to_string(port));
  while (!g_stopping) {
    pollfd fds[2] = {{lfd, POLLIN, 0}, {g_wake_pipe[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) continue;  // EINTR from the signal
    if (!(fds[0].revents & POLLIN)) continue;
    int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::thread(serveConnection, fd).detach();
  }
  close(lfd);
  logLine("knap-testapp: SIGTERM received, draining " + std::to_string(g_inflight.load()) +
          " in-flight request(s)");
  {
    std::unique_lock<std::mutex> l(g_mu);
    g_cv.wait(l, [] { return g_inflight.load() == 0; });
  }
  logLine("knap-testapp: drained, exiting 0");
  return 0;
}
