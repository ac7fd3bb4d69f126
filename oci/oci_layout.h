// OCI image layout archives: reading (index.json -> manifest -> config, with
// platform selection) and building (the knap-mkimage tool and tests).
//
// Thread safety: plain values and pure functions; a TarReader passed in is
// used only for the duration of the call. Nothing here talks to containerd.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "oci/tar.h"

namespace knap::oci {

inline constexpr char kMediaTypeOciIndex[] = "application/vnd.oci.image.index.v1+json";
inline constexpr char kMediaTypeOciManifest[] = "application/vnd.oci.image.manifest.v1+json";
inline constexpr char kMediaTypeOciConfig[] = "application/vnd.oci.image.config.v1+json";
inline constexpr char kMediaTypeOciLayer[] = "application/vnd.oci.image.layer.v1.tar";
inline constexpr char kMediaTypeOciLayerGzip[] = "application/vnd.oci.image.layer.v1.tar+gzip";
inline constexpr char kMediaTypeDockerManifest[] = "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr char kMediaTypeDockerManifestList[] =
    "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr char kAnnotationRefName[] = "org.opencontainers.image.ref.name";
inline constexpr char kAnnotationContainerdName[] = "io.containerd.image.name";

// A content descriptor (OCI descriptor.md); domain type, not the proto.
struct Descriptor {
  std::string media_type;
  std::string digest;  // sha256:<hex>
  int64_t size = 0;
  std::map<std::string, std::string> annotations;
};

struct Platform {
  std::string os = "linux";
  std::string architecture = "amd64";
  std::string variant;           // e.g. "v8" for arm64; empty matches any
  std::string toString() const;  // "linux/amd64[/v8]"
};
// Parses "os/arch[/variant]"; kInvalidArgument otherwise.
StatusOr<Platform> parsePlatform(const std::string& s);

// The parts of an image config (config.config) that become the container's
// process; `json` keeps the whole config document.
struct ImageConfig {
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::vector<std::string> env;  // "K=V"
  std::string user;
  std::string working_dir;
  std::vector<std::string> exposed_ports;  // "8080/tcp"
  std::map<std::string, std::string> labels;
  std::string os;
  std::string architecture;
  std::vector<std::string> diff_ids;  // rootfs.diff_ids
  std::string json;                   // the config blob as stored
};
// Parses a config blob; kInvalidArgument on malformed JSON or missing rootfs.
StatusOr<ImageConfig> parseImageConfig(const std::string& json);

struct Manifest {
  Descriptor config;
  std::vector<Descriptor> layers;
};
// Parses an OCI or Docker v2 image manifest; kInvalidArgument otherwise.
StatusOr<Manifest> parseManifest(const std::string& json);

// An index's manifest entries with their platforms (absent platform = any).
struct IndexEntry {
  Descriptor descriptor;
  bool has_platform = false;
  Platform platform;
};
StatusOr<std::vector<IndexEntry>> parseIndex(const std::string& json);

// One image resolved out of a layout archive: everything needed to import it.
struct ResolvedImage {
  std::string name;     // from io.containerd.image.name or ...ref.name; may be ""
  Descriptor manifest;  // the image manifest (never an index)
  std::string manifest_json;
  std::vector<Descriptor> indexes;  // nested index blobs passed through on the way (outermost first)
  Descriptor config;
  ImageConfig image_config;
  std::vector<Descriptor> layers;  // manifest order, bottom first
};

// Walks index.json -> (nested indexes) -> manifest for `platform`. Checks the
// oci-layout version, that every blob exists with the descriptor's size, that
// manifest and config digests match, and that diff_ids match the layer count.
// Errors: kInvalidArgument (malformed or inconsistent archive), kNotFound (no
// manifest for the platform; the message lists the platforms present).
StatusOr<ResolvedImage> resolveLayout(const TarReader& archive, const Platform& platform);

// Deterministic gzip (no name, mtime 0) and its inverse; kInvalidArgument on
// corrupt input.
std::string gzipCompress(std::string_view data);
StatusOr<std::string> gzipDecompress(std::string_view data);

// "blobs/sha256/<hex>" for a digest.
std::string blobPath(const std::string& digest);

// ----------------------------------------------------------------- building

struct LayerFileSpec {
  std::string dest;  // absolute path in the image
  std::string data;
  uint32_t mode = 0644;
};

struct ImageSpec {
  std::string name;  // "repo:tag" (goes into both index annotations)
  Platform platform;
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::vector<std::string> env;
  std::string user;
  std::string working_dir;
  std::vector<std::string> exposed_ports;  // "8080" or "8080/tcp"
  std::vector<LayerFileSpec> files;
  // Adds /etc/passwd and /etc/group (root, nobody, and `app` uid/gid 1000),
  // and /tmp (1777), unless the files list brings its own.
  bool add_base_files = true;
  int64_t mtime = 0;        // every timestamp in the image, for reproducible output
  bool gzip_layer = false;  // store the layer as tar+gzip (diff_id stays the tar's digest)
};

// Blobs keyed by digest plus the descriptor that tops the image.
struct BuiltImage {
  std::string name;
  Descriptor manifest;  // carries the platform in `platform` below
  Platform platform;
  std::map<std::string, std::string> blobs;
};

// Builds a single-layer image (tar layer with parent directories, optionally
// gzip-compressed deterministically).
// kInvalidArgument for relative or duplicate destinations.
StatusOr<BuiltImage> buildImage(const ImageSpec& spec);

// Reads a layout archive's single image back into a BuiltImage (all blobs
// reachable from index.json), for combining images into an index.
StatusOr<BuiltImage> loadLayoutImage(const TarReader& archive);

// Writes an OCI layout archive. One image: index.json points straight at its
// manifest. Several: a nested image index blob lists every manifest with its
// platform, and index.json points at that index under `name`.
std::string writeLayout(const std::vector<BuiltImage>& images, const std::string& name);

}  // namespace knap::oci
