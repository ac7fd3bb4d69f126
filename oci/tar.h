// Minimal POSIX tar (ustar + PAX + GNU long names) reading and writing, enough
// for OCI image layout archives and uncompressed image layers.
//
// Thread safety: a TarReader or TarWriter is used by one thread at a time.
// TarReader owns its file descriptor (or in-memory copy); entries are indexed
// once at open() and their contents are read on demand, so large blobs are
// never held in memory unless the caller asks for them whole.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace knap::oci {

enum class TarType : char {
  kRegular = '0',
  kHardLink = '1',
  kSymlink = '2',
  kCharDevice = '3',
  kBlockDevice = '4',
  kDirectory = '5',
  kFifo = '6',
};

struct TarEntry {
  std::string path;  // normalised: no leading "./" or "/", no trailing "/"
  TarType type = TarType::kRegular;
  uint32_t mode = 0644;  // permission bits (incl. setuid/sticky), no type bits
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime = 0;         // seconds since the epoch
  std::string link_target;   // symlinks and hard links
  uint64_t size = 0;         // regular files: content size
  uint64_t data_offset = 0;  // reader only: where the content starts in the archive
};

// Strips "./", leading "/" and trailing "/"; "." becomes "".
std::string normalizeTarPath(std::string_view path);

class TarReader {
 public:
  // Indexes an archive file. Fails with kNotFound if the file cannot be
  // opened and kInvalidArgument if it is not a well-formed tar.
  static StatusOr<TarReader> open(const std::string& path);
  // Indexes an in-memory archive (tests, small layers).
  static StatusOr<TarReader> fromString(std::string data);

  TarReader(TarReader&& other) noexcept;
  TarReader& operator=(TarReader&& other) noexcept;
  ~TarReader();

  const std::vector<TarEntry>& entries() const { return entries_; }
  // The last entry with this (normalised) path, or nullptr.
  const TarEntry* find(std::string_view path) const;
  // The whole content of a regular file. kNotFound if absent,
  // kResourceExhausted if it is larger than `max_bytes`.
  StatusOr<std::string> readFile(std::string_view path, uint64_t max_bytes = 64 << 20) const;
  // Streams a regular file's content in chunks of at most `chunk` bytes; stops
  // at and returns the first error `sink` returns.
  // Up to `n` bytes of a regular file's content starting at `offset`.
  StatusOr<std::string> readRange(const TarEntry& entry, uint64_t offset, size_t n) const;
  Status readChunks(const TarEntry& entry, size_t chunk,
                    const std::function<Status(std::string_view)>& sink) const;

 private:
  TarReader() = default;
  Status index();
  Status readAt(uint64_t offset, size_t n, char* out) const;

  int fd_ = -1;
  std::optional<std::string> mem_;
  uint64_t total_size_ = 0;
  std::vector<TarEntry> entries_;
};

// Builds an archive in memory. Entries are written in call order; use a fixed
// mtime for reproducible output.
class TarWriter {
 public:
  void addDirectory(std::string_view path, uint32_t mode = 0755, int64_t mtime = 0, uint32_t uid = 0,
                    uint32_t gid = 0);
  void addFile(std::string_view path, std::string_view data, uint32_t mode = 0644, int64_t mtime = 0,
               uint32_t uid = 0, uint32_t gid = 0);
  void addSymlink(std::string_view path, std::string_view target, int64_t mtime = 0);
  // Appends the end-of-archive marker and returns the archive.
  std::string finish();

 private:
  void addEntry(const TarEntry& e, std::string_view data);
  std::string out_;
};

}  // namespace knap::oci
