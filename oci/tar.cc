#include "oci/tar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace knap::oci {

namespace {

constexpr size_t kBlock = 512;

// Octal (NUL/space padded) or base-256 (high bit set) numeric field.
bool parseNumber(const char* p, size_t n, uint64_t* out) {
  if (n > 0 && (static_cast<unsigned char>(p[0]) & 0x80)) {
    uint64_t v = static_cast<unsigned char>(p[0]) & 0x7f;
    for (size_t i = 1; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    *out = v;
    return true;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == '\0')) ++i;  // leading padding
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    v = v * 8 + static_cast<uint64_t>(p[i] - '0');
    any = true;
  }
  for (; i < n; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return false;
  }
  *out = any ? v : 0;
  return true;
}

std::string field(const char* p, size_t n) {
  return std::string(p, strnlen(p, n));
}

void putOctal(char* p, size_t n, uint64_t v) {
  // n-1 octal digits and a NUL terminator.
  std::string s(n - 1, '0');
  for (size_t i = n - 1; i-- > 0 && v;) {
    s[i] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
  memcpy(p, s.data(), n - 1);
  p[n - 1] = '\0';
}

void putString(char* p, size_t n, std::string_view s) {
  memcpy(p, s.data(), std::min(n, s.size()));
}

uint64_t padded(uint64_t n) {
  return (n + kBlock - 1) / kBlock * kBlock;
}

// PAX records: "<len> <key>=<value>\n".
std::map<std::string, std::string> parsePax(std::string_view data) {
  std::map<std::string, std::string> out;
  while (!data.empty()) {
    size_t sp = data.find(' ');
    if (sp == std::string_view::npos) break;
    size_t len = 0;
    for (char c : data.substr(0, sp)) {
      if (c < '0' || c > '9') return out;
      len = len * 10 + static_cast<size_t>(c - '0');
    }
    if (len <= sp + 1 || len > data.size()) break;
    std::string_view rec = data.substr(sp + 1, len - sp - 2);  // without trailing \n
    size_t eq = rec.find('=');
    if (eq != std::string_view::npos) out[std::string(rec.substr(0, eq))] = std::string(rec.substr(eq + 1));
    data.remove_prefix(len);
  }
  return out;
}

std::string paxRecord(std::string_view key, std::string_view value) {
  // The length prefix counts itself, so iterate to a fixed point.
  size_t body = key.size() + value.size() + 3;  // ' ' '=' '\n'
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  return std::to_string(len) + " " + std::string(key) + "=" + std::string(value) + "\n";
}

}  // namespace

std::string normalizeTarPath(std::string_view path) {
  std::string p(path);
  while (true) {
    if (p.rfind("./", 0) == 0) {
      p.erase(0, 2);
    } else if (!p.empty() && p[0] == '/') {
      p.erase(0, 1);
    } else {
      break;
    }
  }
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (p == ".") p.clear();
  return p;
}

// ---------------------------------------------------------------- TarReader

StatusOr<TarReader> TarReader::open(const std::string& path) {
  TarReader r;
  r.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r.fd_ < 0) return notFound("open " + path + ": " + strerror(errno));
  struct stat st {};
  if (fstat(r.fd_, &st) != 0) return internalError("stat " + path + ": " + strerror(errno));
  r.total_size_ = static_cast<uint64_t>(st.st_size);
  Status s = r.index();
  if (!s.isOk()) return s.annotate(path);
  return r;
}

StatusOr<TarReader> TarReader::fromString(std::string data) {
  TarReader r;
  r.total_size_ = data.size();
  r.mem_ = std::move(data);
  KNAP_RETURN_IF_ERROR(r.index());
  return r;
}

TarReader::TarReader(TarReader&& other) noexcept
    : fd_(other.fd_),
      mem_(std::move(other.mem_)),
      total_size_(other.total_size_),
      entries_(std::move(other.entries_)) {
  other.fd_ = -1;
}

TarReader& TarReader::operator=(TarReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
    mem_ = std::move(other.mem_);
    total_size_ = other.total_size_;
    entries_ = std::move(other.entries_);
  }
  return *this;
}

TarReader::~TarReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status TarReader::readAt(uint64_t offset, size_t n, char* out) const {
  if (offset + n > total_size_) return invalidArgument("tar: truncated archive");
  if (mem_) {
    memcpy(out, mem_->data() + offset, n);
    return Status::ok();
  }
  size_t done = 0;
  while (done < n) {
    ssize_t got = pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return internalError(std::string("tar: read: ") + (got < 0 ? strerror(errno) : "short read"));
    done += static_cast<size_t>(got);
  }
  return Status::ok();
}

Status TarReader::index() {
  uint64_t off = 0;
  std::optional<std::string> long_name, long_link;
  std::map<std::string, std::string> pax, global_pax;
  char h[kBlock];
  while (off + kBlock <= total_size_) {
    KNAP_RETURN_IF_ERROR(readAt(off, kBlock, h));
    bool zero = true;
    for (char c : h) {
      if (c != 0) {
        zero = false;
        break;
      }
    }
    if (zero) return Status::ok();  // end-of-archive marker
    uint64_t sum = 0, stored = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    }
    if (!parseNumber(h + 148, 8, &stored) || stored != sum) {
      return invalidArgument("tar: bad header checksum at offset " + std::to_string(off));
    }
    uint64_t size = 0, mode = 0, uid = 0, gid = 0, mtime = 0;
    if (!parseNumber(h + 124, 12, &size) || !parseNumber(h + 100, 8, &mode) ||
        !parseNumber(h + 108, 8, &uid) || !parseNumber(h + 116, 8, &gid) ||
        !parseNumber(h + 136, 12, &mtime)) {
      return invalidArgument("tar: bad numeric field at offset " + std::to_string(off));
    }
    char type = h[156];
    uint64_t data_off = off + kBlock;
    if (data_off + size > total_size_) return invalidArgument("tar: entry runs past the end of the archive");
    uint64_t next = data_off + padded(size);
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
      if (size > (1 << 20)) return invalidArgument("tar: oversized extended header");
      std::string data(size, '\0');
      KNAP_RETURN_IF_ERROR(readAt(data_off, size, data.data()));
      if (type == 'x') {
        pax = parsePax(data);
      } else if (type == 'g') {
        global_pax = parsePax(data);
      } else {
        data.resize(strnlen(data.data(), data.size()));
        (type == 'L' ? long_name : long_link) = data;
      }
      off = next;
      continue;
    }
    TarEntry e;
    std::string name = field(h, 100);
    std::string magic = field(h + 257, 6);
    if (magic.rfind("ustar", 0) == 0) {
      std::string prefix = field(h + 345, 155);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    std::string link = field(h + 157, 100);
    auto pick = [&](const char* key) -> const std::string* {
      if (auto it = pax.find(key); it != pax.end()) return &it->second;
      if (auto it = global_pax.find(key); it != global_pax.end()) return &it->second;
      return nullptr;
    };
    if (long_name) name = *long_name;
    if (long_link) link = *long_link;
    if (auto* p = pick("path")) name = *p;
    if (auto* p = pick("linkpath")) link = *p;
    if (auto* p = pick("size")) size = std::stoull(*p), next = data_off + padded(size);
    if (type == '\0' || type == '7') type = '0';
    e.path = normalizeTarPath(name);
    e.type = static_cast<TarType>(type);
    e.mode = static_cast<uint32_t>(mode & 07777);
    e.uid = static_cast<uint32_t>(uid);
    e.gid = static_cast<uint32_t>(gid);
    e.mtime = static_cast<int64_t>(mtime);
    e.link_target = link;
    e.size = (type == '0') ? size : 0;
    e.data_offset = data_off;
    entries_.push_back(std::move(e));
    long_name.reset();
    long_link.reset();
    pax.clear();
    off = next;
  }
  if (off != total_size_) return invalidArgument("tar: archive ends inside a header");
  return Status::ok();  // no end marker: accepted, like GNU tar does with a warning
}

const TarEntry* TarReader::find(std::string_view path) const {
  std::string p = normalizeTarPath(path);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->path == p) return &*it;
  }
  return nullptr;
}

StatusOr<std::string> TarReader::readFile(std::string_view path, uint64_t max_bytes) const {
  const TarEntry* e = find(path);
  if (e == nullptr || e->type != TarType::kRegular) return notFound("tar: no file " + std::string(path));
  if (e->size > max_bytes) {
    return Status(Code::kResourceExhausted,
                  "tar: " + std::string(path) + " is larger than " + std::to_string(max_bytes));
  }
  std::string out(e->size, '\0');
  KNAP_RETURN_IF_ERROR(readAt(e->data_offset, e->size, out.data()));
  return out;
}

StatusOr<std::string> TarReader::readRange(const TarEntry& entry, uint64_t offset, size_t n) const {
  if (offset > entry.size) return invalidArgument("tar: read past the end of " + entry.path);
  std::string out(static_cast<size_t>(std::min<uint64_t>(n, entry.size - offset)), '\0');
  KNAP_RETURN_IF_ERROR(readAt(entry.data_offset + offset, out.size(), out.data()));
  return out;
}

Status TarReader::readChunks(const TarEntry& entry, size_t chunk,
                             const std::function<Status(std::string_view)>& sink) const {
  std::string buf(std::min<uint64_t>(chunk, entry.size), '\0');
  for (uint64_t done = 0; done < entry.size;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, entry.size - done));
    KNAP_RETURN_IF_ERROR(readAt(entry.data_offset + done, n, buf.data()));
    KNAP_RETURN_IF_ERROR(sink(std::string_view(buf.data(), n)));
    done += n;
  }
  return Status::ok();
}

// ---------------------------------------------------------------- TarWriter

void TarWriter::addEntry(const TarEntry& e, std::string_view data) {
  std::string name = e.path;
  if (e.type == TarType::kDirectory) name += "/";
  std::string prefix;
  bool need_pax = false;
  if (name.size() > 100) {
    // ustar: split at a '/' so that prefix <= 155 and name <= 100.
    size_t cut = name.find('/', name.size() > 101 ? name.size() - 101 : 0);
    if (cut != std::string::npos && cut <= 155 && name.size() - cut - 1 <= 100 && cut > 0) {
      prefix = name.substr(0, cut);
      name = name.substr(cut + 1);
    } else {
      need_pax = true;
    }
  }
  if (need_pax || e.link_target.size() > 100) {
    std::string records;
    if (need_pax) records += paxRecord("path", e.path + (e.type == TarType::kDirectory ? "/" : ""));
    if (e.link_target.size() > 100) records += paxRecord("linkpath", e.link_target);
    TarEntry px;
    px.path = "PaxHeaders/" + e.path.substr(0, 80);
    px.type = static_cast<TarType>('x');
    px.mtime = e.mtime;
    px.size = records.size();
    addEntry(px, records);
    if (need_pax) name = name.substr(0, 99);
  }
  char h[kBlock];
  memset(h, 0, sizeof h);
  putString(h, 100, name);
  putOctal(h + 100, 8, e.mode);
  putOctal(h + 108, 8, e.uid);
  putOctal(h + 116, 8, e.gid);
  putOctal(h + 124, 12, data.size());
  putOctal(h + 136, 12, static_cast<uint64_t>(e.mtime));
  h[156] = static_cast<char>(e.type);
  putString(h + 157, 100, e.link_target);
  memcpy(h + 257,
         "ustar\0"
         "00",
         8);
  putString(h + 345, 155, prefix);
  memset(h + 148, ' ', 8);
  uint64_t sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  putOctal(h + 148, 7, sum);  // 6 digits, NUL, then the space already there
  out_.append(h, kBlock);
  out_.append(data);
  out_.append(padded(data.size()) - data.size(), '\0');
}

void TarWriter::addDirectory(std::string_view path, uint32_t mode, int64_t mtime, uint32_t uid,
                             uint32_t gid) {
  TarEntry e;
  e.path = normalizeTarPath(path);
  e.type = TarType::kDirectory;
  e.mode = mode;
  e.mtime = mtime;
  e.uid = uid;
  e.gid = gid;
  addEntry(e, {});
}

void TarWriter::addFile(std::string_view path, std::string_view data, uint32_t mode, int64_t mtime,
                        uint32_t uid, uint32_t gid) {
  TarEntry e;
  e.path = normalizeTarPath(path);
  e.type = TarType::kRegular;
  e.mode = mode;
  e.mtime = mtime;
  e.uid = uid;
  e.gid = gid;
  addEntry(e, data);
}

void TarWriter::addSymlink(std::string_view path, std::string_view target, int64_t mtime) {
  TarEntry e;
  e.path = normalizeTarPath(path);
  e.type = TarType::kSymlink;
  e.mode = 0777;
  e.mtime = mtime;
  e.link_target = std::string(target);
  addEntry(e, {});
}

std::string TarWriter::finish() {
  out_.append(2 * kBlock, '\0');
  return std::move(out_);
}

}  // namespace knap::oci
