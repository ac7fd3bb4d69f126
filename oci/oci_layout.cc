#include "oci/oci_layout.h"

#include <zlib.h>

#include <nlohmann/json.hpp>
#include <set>

#include "oci/digest.h"

namespace knap::oci {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxMetadataBlob = 4 << 20;  // manifests, indexes, configs

std::vector<std::string> stringList(const json& j, const char* key) {
  std::vector<std::string> out;
  if (j.contains(key) && j[key].is_array()) {
    for (const auto& v : j[key]) {
      if (v.is_string()) out.push_back(v.get<std::string>());
    }
  }
  return out;
}

std::string stringField(const json& j, const char* key) {
  if (j.contains(key) && j[key].is_string()) return j[key].get<std::string>();
  return "";
}

StatusOr<Descriptor> descriptorFromJson(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("digest") || !j["digest"].is_string() || !j.contains("size") ||
      !j["size"].is_number_integer()) {
    return invalidArgument(where + ": descriptor needs digest and size");
  }
  Descriptor d;
  d.media_type = stringField(j, "mediaType");
  d.digest = j["digest"].get<std::string>();
  d.size = j["size"].get<int64_t>();
  if (!isSha256Digest(d.digest)) return invalidArgument(where + ": unsupported digest " + d.digest);
  if (d.size < 0) return invalidArgument(where + ": negative size");
  if (j.contains("annotations") && j["annotations"].is_object()) {
    for (const auto& [k, v] : j["annotations"].items()) {
      if (v.is_string()) d.annotations[k] = v.get<std::string>();
    }
  }
  return d;
}

json descriptorToJson(const Descriptor& d) {
  json j = {{"mediaType", d.media_type}, {"digest", d.digest}, {"size", d.size}};
  if (!d.annotations.empty()) j["annotations"] = d.annotations;
  return j;
}

json platformToJson(const Platform& p) {
  json j = {{"architecture", p.architecture}, {"os", p.os}};
  if (!p.variant.empty()) j["variant"] = p.variant;
  return j;
}

bool platformMatches(const Platform& have, const Platform& want) {
  return have.os == want.os && have.architecture == want.architecture &&
         (want.variant.empty() || have.variant.empty() || have.variant == want.variant);
}

bool isIndexType(const std::string& mt) {
  return mt == kMediaTypeOciIndex || mt == kMediaTypeDockerManifestList;
}

// Reads a small blob and checks it against its descriptor.
StatusOr<std::string> readVerifiedBlob(const TarReader& archive, const Descriptor& d) {
  StatusOr<std::string> data = archive.readFile(blobPath(d.digest), kMaxMetadataBlob);
  if (!data.isOk()) return invalidArgument("layout: blob " + d.digest + ": " + data.status().message());
  if (static_cast<int64_t>(data->size()) != d.size) {
    return invalidArgument("layout: blob " + d.digest + " has size " + std::to_string(data->size()) +
                           ", descriptor says " + std::to_string(d.size));
  }
  if (sha256Digest(*data) != d.digest)
    return invalidArgument("layout: blob " + d.digest + " does not match its digest");
  return data;
}

std::string imageName(const Descriptor& d) {
  if (auto it = d.annotations.find(kAnnotationContainerdName); it != d.annotations.end()) return it->second;
  if (auto it = d.annotations.find(kAnnotationRefName); it != d.annotations.end()) return it->second;
  return "";
}

struct Candidate {
  Descriptor manifest;
  std::vector<Descriptor> indexes;
  std::string name;
};

// Collects every image manifest under `entries`, following nested indexes.
Status collectManifests(const TarReader& archive, const std::vector<IndexEntry>& entries,
                        const std::vector<Descriptor>& path, const std::string& name, const Platform& want,
                        int depth, std::vector<Candidate>* matches, std::set<std::string>* seen_platforms) {
  if (depth > 4) return invalidArgument("layout: indexes nested too deeply");
  for (const IndexEntry& e : entries) {
    std::string entry_name = name.empty() ? imageName(e.descriptor) : name;
    if (isIndexType(e.descriptor.media_type)) {
      KNAP_ASSIGN_OR_RETURN(std::string blob, readVerifiedBlob(archive, e.descriptor));
      KNAP_ASSIGN_OR_RETURN(std::vector<IndexEntry> nested, parseIndex(blob));
      std::vector<Descriptor> sub = path;
      sub.push_back(e.descriptor);
      KNAP_RETURN_IF_ERROR(
          collectManifests(archive, nested, sub, entry_name, want, depth + 1, matches, seen_platforms));
      continue;
    }
    if (e.descriptor.media_type != kMediaTypeOciManifest &&
        e.descriptor.media_type != kMediaTypeDockerManifest) {
      continue;  // attestations, signatures and other artefacts
    }
    Platform have = e.platform;
    if (!e.has_platform) {
      // No platform on the descriptor: ask the config.
      KNAP_ASSIGN_OR_RETURN(std::string mblob, readVerifiedBlob(archive, e.descriptor));
      KNAP_ASSIGN_OR_RETURN(Manifest m, parseManifest(mblob));
      KNAP_ASSIGN_OR_RETURN(std::string cblob, readVerifiedBlob(archive, m.config));
      KNAP_ASSIGN_OR_RETURN(ImageConfig c, parseImageConfig(cblob));
      have.os = c.os;
      have.architecture = c.architecture;
      have.variant.clear();
    }
    seen_platforms->insert(have.toString());
    if (platformMatches(have, want)) matches->push_back({e.descriptor, path, entry_name});
  }
  return Status::ok();
}

}  // namespace

std::string Platform::toString() const {
  return os + "/" + architecture + (variant.empty() ? "" : "/" + variant);
}

StatusOr<Platform> parsePlatform(const std::string& s) {
  Platform p;
  size_t a = s.find('/');
  if (a == std::string::npos || a == 0) return invalidArgument("platform must be os/arch[/variant]: " + s);
  size_t b = s.find('/', a + 1);
  p.os = s.substr(0, a);
  p.architecture = s.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  if (b != std::string::npos) p.variant = s.substr(b + 1);
  if (p.architecture.empty() || (b != std::string::npos && p.variant.empty())) {
    return invalidArgument("platform must be os/arch[/variant]: " + s);
  }
  return p;
}

std::string gzipCompress(std::string_view data) {
  z_stream z{};
  // windowBits 15 + 16: gzip wrapper; zlib writes mtime 0 and no file name.
  deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

StatusOr<std::string> gzipDecompress(std::string_view data) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return internalError("gzip: inflateInit failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[65536];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
    if (rc == Z_BUF_ERROR && z.avail_in == 0) break;
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) return invalidArgument("gzip: corrupt or truncated data");
  return out;
}

std::string blobPath(const std::string& digest) {
  std::string d = digest;
  size_t colon = d.find(':');
  if (colon != std::string::npos) d[colon] = '/';
  return "blobs/" + d;
}

StatusOr<ImageConfig> parseImageConfig(const std::string& text) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) return invalidArgument("image config is not a JSON object");
    ImageConfig c;
    c.os = stringField(j, "os");
    c.architecture = stringField(j, "architecture");
    if (j.contains("config") && j["config"].is_object()) {
      const json& cc = j["config"];
      c.entrypoint = stringList(cc, "Entrypoint");
      c.cmd = stringList(cc, "Cmd");
      c.env = stringList(cc, "Env");
      c.user = stringField(cc, "User");
      c.working_dir = stringField(cc, "WorkingDir");
      if (cc.contains("ExposedPorts") && cc["ExposedPorts"].is_object()) {
        for (const auto& [k, v] : cc["ExposedPorts"].items()) c.exposed_ports.push_back(k);
      }
      if (cc.contains("Labels") && cc["Labels"].is_object()) {
        for (const auto& [k, v] : cc["Labels"].items()) {
          if (v.is_string()) c.labels[k] = v.get<std::string>();
        }
      }
    }
    if (!j.contains("rootfs") || !j["rootfs"].is_object())
      return invalidArgument("image config has no rootfs");
    c.diff_ids = stringList(j["rootfs"], "diff_ids");
    for (const auto& d : c.diff_ids) {
      if (!isSha256Digest(d)) return invalidArgument("image config: bad diff_id " + d);
    }
    c.json = text;
    return c;
  } catch (const json::exception& e) {
    return invalidArgument(std::string("image config: ") + e.what());
  }
}

StatusOr<Manifest> parseManifest(const std::string& text) {
  try {
    json j = json::parse(text);
    if (!j.is_object() || !j.contains("config") || !j.contains("layers") || !j["layers"].is_array()) {
      return invalidArgument("manifest needs config and layers");
    }
    Manifest m;
    KNAP_ASSIGN_OR_RETURN(m.config, descriptorFromJson(j["config"], "manifest config"));
    for (size_t i = 0; i < j["layers"].size(); ++i) {
      KNAP_ASSIGN_OR_RETURN(Descriptor d,
                            descriptorFromJson(j["layers"][i], "manifest layers[" + std::to_string(i) + "]"));
      m.layers.push_back(std::move(d));
    }
    return m;
  } catch (const json::exception& e) {
    return invalidArgument(std::string("manifest: ") + e.what());
  }
}

StatusOr<std::vector<IndexEntry>> parseIndex(const std::string& text) {
  try {
    json j = json::parse(text);
    if (!j.is_object() || !j.contains("manifests") || !j["manifests"].is_array()) {
      return invalidArgument("index needs manifests[]");
    }
    std::vector<IndexEntry> out;
    for (size_t i = 0; i < j["manifests"].size(); ++i) {
      const json& m = j["manifests"][i];
      IndexEntry e;
      KNAP_ASSIGN_OR_RETURN(e.descriptor,
                            descriptorFromJson(m, "index manifests[" + std::to_string(i) + "]"));
      if (m.contains("platform") && m["platform"].is_object()) {
        e.has_platform = true;
        e.platform.os = stringField(m["platform"], "os");
        e.platform.architecture = stringField(m["platform"], "architecture");
        e.platform.variant = stringField(m["platform"], "variant");
      }
      out.push_back(std::move(e));
    }
    return out;
  } catch (const json::exception& e) {
    return invalidArgument(std::string("index: ") + e.what());
  }
}

StatusOr<ResolvedImage> resolveLayout(const TarReader& archive, const Platform& platform) {
  StatusOr<std::string> layout = archive.readFile("oci-layout", 4096);
  if (!layout.isOk()) return invalidArgument("not an OCI image layout: no oci-layout file");
  try {
    json j = json::parse(*layout);
    if (stringField(j, "imageLayoutVersion") != "1.0.0") {
      return invalidArgument("unsupported imageLayoutVersion in oci-layout: " + *layout);
    }
  } catch (const json::exception& e) {
    return invalidArgument(std::string("oci-layout: ") + e.what());
  }
  StatusOr<std::string> index_json = archive.readFile("index.json", kMaxMetadataBlob);
  if (!index_json.isOk()) return invalidArgument("not an OCI image layout: no index.json");
  KNAP_ASSIGN_OR_RETURN(std::vector<IndexEntry> top, parseIndex(*index_json));

  std::vector<Candidate> matches;
  std::set<std::string> seen;
  KNAP_RETURN_IF_ERROR(collectManifests(archive, top, {}, "", platform, 0, &matches, &seen));
  if (matches.empty()) {
    std::string have;
    for (const auto& p : seen) have += (have.empty() ? "" : ", ") + p;
    return notFound("no image for platform " + platform.toString() +
                    " in the archive (has: " + (have.empty() ? "none" : have) + ")");
  }
  const Candidate& c = matches.front();
  ResolvedImage r;
  r.name = c.name;
  r.manifest = c.manifest;
  r.manifest.annotations.clear();  // index annotations are not part of the manifest itself
  r.indexes = c.indexes;
  KNAP_ASSIGN_OR_RETURN(r.manifest_json, readVerifiedBlob(archive, c.manifest));
  KNAP_ASSIGN_OR_RETURN(Manifest m, parseManifest(r.manifest_json));
  r.config = m.config;
  r.layers = m.layers;
  KNAP_ASSIGN_OR_RETURN(std::string config_json, readVerifiedBlob(archive, m.config));
  KNAP_ASSIGN_OR_RETURN(r.image_config, parseImageConfig(config_json));
  if (r.image_config.diff_ids.size() != r.layers.size()) {
    return invalidArgument("image config has " + std::to_string(r.image_config.diff_ids.size()) +
                           " diff_ids but the manifest has " + std::to_string(r.layers.size()) + " layers");
  }
  for (const Descriptor& l : r.layers) {
    const TarEntry* e = archive.find(blobPath(l.digest));
    if (e == nullptr || e->type != TarType::kRegular)
      return invalidArgument("layout: layer blob " + l.digest + " missing");
    if (static_cast<int64_t>(e->size) != l.size) {
      return invalidArgument("layout: layer blob " + l.digest + " has the wrong size");
    }
  }
  return r;
}

// ----------------------------------------------------------------- building

namespace {

struct LayerEntry {
  TarType type = TarType::kDirectory;
  uint32_t mode = 0755;
  uint32_t uid = 0, gid = 0;
  std::string data;
};

const char kDefaultPath[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const char kPasswd[] =
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    "app:x:1000:1000:app:/home/app:/sbin/nologin\n";
const char kGroup[] =
    "root:x:0:\n"
    "nogroup:x:65534:\n"
    "app:x:1000:\n";

std::string rfc3339(int64_t t) {
  time_t tt = static_cast<time_t>(t);
  struct tm tm {};
  gmtime_r(&tt, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

StatusOr<BuiltImage> buildImage(const ImageSpec& spec) {
  std::map<std::string, LayerEntry> entries;  // sorted: parents before children
  auto addParents = [&](const std::string& path) {
    for (size_t pos = path.find('/'); pos != std::string::npos; pos = path.find('/', pos + 1)) {
      entries.try_emplace(path.substr(0, pos));
    }
  };
  for (const LayerFileSpec& f : spec.files) {
    if (f.dest.empty() || f.dest[0] != '/')
      return invalidArgument("image file destination must be absolute: " + f.dest);
    std::string p = normalizeTarPath(f.dest);
    if (p.empty() || p.find("..") != std::string::npos)
      return invalidArgument("bad image file destination: " + f.dest);
    if (entries.count(p)) return invalidArgument("duplicate image file destination: " + f.dest);
    addParents(p);
    entries[p] = LayerEntry{TarType::kRegular, f.mode, 0, 0, f.data};
  }
  if (spec.add_base_files) {
    auto addIfAbsent = [&](const std::string& p, LayerEntry e) {
      if (!entries.count(p)) {
        addParents(p);
        entries[p] = std::move(e);
      }
    };
    addIfAbsent("etc/passwd", {TarType::kRegular, 0644, 0, 0, kPasswd});
    addIfAbsent("etc/group", {TarType::kRegular, 0644, 0, 0, kGroup});
    addIfAbsent("tmp", {TarType::kDirectory, 01777, 0, 0, ""});
    addIfAbsent("home/app", {TarType::kDirectory, 0755, 1000, 1000, ""});
  }
  if (!spec.working_dir.empty()) {
    std::string wd = normalizeTarPath(spec.working_dir);
    if (!wd.empty() && !entries.count(wd)) {
      addParents(wd);
      entries[wd] = LayerEntry{};
    }
  }
  TarWriter tw;
  for (const auto& [path, e] : entries) {
    if (e.type == TarType::kDirectory) {
      tw.addDirectory(path, e.mode, spec.mtime, e.uid, e.gid);
    } else {
      tw.addFile(path, e.data, e.mode, spec.mtime, e.uid, e.gid);
    }
  }
  std::string layer = tw.finish();
  const std::string diff_id = sha256Digest(layer);
  if (spec.gzip_layer) layer = gzipCompress(layer);
  const std::string layer_digest = sha256Digest(layer);

  json cfg;
  cfg["created"] = rfc3339(spec.mtime);
  cfg["architecture"] = spec.platform.architecture;
  cfg["os"] = spec.platform.os;
  if (!spec.platform.variant.empty()) cfg["variant"] = spec.platform.variant;
  json c = json::object();
  std::vector<std::string> env = spec.env;
  bool has_path = false;
  for (const auto& e : env) has_path = has_path || e.rfind("PATH=", 0) == 0;
  if (!has_path) env.insert(env.begin(), kDefaultPath);
  c["Env"] = env;
  if (!spec.entrypoint.empty()) c["Entrypoint"] = spec.entrypoint;
  if (!spec.cmd.empty()) c["Cmd"] = spec.cmd;
  if (!spec.user.empty()) c["User"] = spec.user;
  if (!spec.working_dir.empty()) c["WorkingDir"] = spec.working_dir;
  if (!spec.exposed_ports.empty()) {
    json ports = json::object();
    for (std::string p : spec.exposed_ports) {
      if (p.find('/') == std::string::npos) p += "/tcp";
      ports[p] = json::object();
    }
    c["ExposedPorts"] = ports;
  }
  cfg["config"] = c;
  cfg["rootfs"] = {{"type", "layers"}, {"diff_ids", {diff_id}}};
  cfg["history"] = json::array({{{"created", rfc3339(spec.mtime)}, {"created_by", "knap-mkimage"}}});
  std::string config = cfg.dump();

  BuiltImage img;
  img.name = spec.name;
  img.platform = spec.platform;
  Descriptor config_desc{kMediaTypeOciConfig, sha256Digest(config), static_cast<int64_t>(config.size()), {}};
  Descriptor layer_desc{spec.gzip_layer ? kMediaTypeOciLayerGzip : kMediaTypeOciLayer,
                        layer_digest,
                        static_cast<int64_t>(layer.size()),
                        {}};
  json manifest = {{"schemaVersion", 2},
                   {"mediaType", kMediaTypeOciManifest},
                   {"config", descriptorToJson(config_desc)},
                   {"layers", json::array({descriptorToJson(layer_desc)})}};
  std::string manifest_text = manifest.dump();
  img.manifest = {
      kMediaTypeOciManifest, sha256Digest(manifest_text), static_cast<int64_t>(manifest_text.size()), {}};
  img.blobs[config_desc.digest] = std::move(config);
  img.blobs[layer_desc.digest] = std::move(layer);
  img.blobs[img.manifest.digest] = std::move(manifest_text);
  return img;
}

StatusOr<BuiltImage> loadLayoutImage(const TarReader& archive) {
  StatusOr<std::string> index_json = archive.readFile("index.json", kMaxMetadataBlob);
  if (!index_json.isOk()) return invalidArgument("not an OCI image layout: no index.json");
  KNAP_ASSIGN_OR_RETURN(std::vector<IndexEntry> top, parseIndex(*index_json));
  if (top.size() != 1 || (top[0].descriptor.media_type != kMediaTypeOciManifest &&
                          top[0].descriptor.media_type != kMediaTypeDockerManifest)) {
    return invalidArgument("expected an archive holding exactly one image manifest");
  }
  BuiltImage img;
  img.name = imageName(top[0].descriptor);
  img.manifest = top[0].descriptor;
  img.manifest.annotations.clear();
  KNAP_ASSIGN_OR_RETURN(std::string mblob, readVerifiedBlob(archive, img.manifest));
  KNAP_ASSIGN_OR_RETURN(Manifest m, parseManifest(mblob));
  KNAP_ASSIGN_OR_RETURN(std::string cblob, readVerifiedBlob(archive, m.config));
  KNAP_ASSIGN_OR_RETURN(ImageConfig c, parseImageConfig(cblob));
  img.platform.os = c.os;
  img.platform.architecture = c.architecture;
  if (top[0].has_platform) img.platform = top[0].platform;
  img.blobs[img.manifest.digest] = std::move(mblob);
  img.blobs[m.config.digest] = std::move(cblob);
  for (const Descriptor& l : m.layers) {
    KNAP_ASSIGN_OR_RETURN(std::string data, archive.readFile(blobPath(l.digest), uint64_t{1} << 32));
    if (sha256Digest(data) != l.digest)
      return invalidArgument("layer blob " + l.digest + " does not match its digest");
    img.blobs[l.digest] = std::move(data);
  }
  return img;
}

std::string writeLayout(const std::vector<BuiltImage>& images, const std::string& name) {
  std::map<std::string, std::string> blobs;
  for (const BuiltImage& img : images) blobs.insert(img.blobs.begin(), img.blobs.end());
  std::map<std::string, std::string> annotations;
  if (!name.empty()) {
    annotations[kAnnotationContainerdName] = name;
    // OCI convention: ref.name carries the tag.
    size_t slash = name.rfind('/');
    size_t colon = name.rfind(':');
    annotations[kAnnotationRefName] =
        (colon != std::string::npos && (slash == std::string::npos || colon > slash)) ? name.substr(colon + 1)
                                                                                      : "latest";
  }
  json index = {{"schemaVersion", 2}, {"mediaType", kMediaTypeOciIndex}};
  if (images.size() == 1) {
    json d = descriptorToJson(images[0].manifest);
    d["platform"] = platformToJson(images[0].platform);
    if (!annotations.empty()) d["annotations"] = annotations;
    index["manifests"] = json::array({d});
  } else {
    json nested = {{"schemaVersion", 2}, {"mediaType", kMediaTypeOciIndex}, {"manifests", json::array()}};
    for (const BuiltImage& img : images) {
      json d = descriptorToJson(img.manifest);
      d["platform"] = platformToJson(img.platform);
      nested["manifests"].push_back(d);
    }
    std::string nested_text = nested.dump();
    Descriptor nd{kMediaTypeOciIndex, sha256Digest(nested_text), static_cast<int64_t>(nested_text.size()),
                  annotations};
    blobs[nd.digest] = std::move(nested_text);
    index["manifests"] = json::array({descriptorToJson(nd)});
  }
  TarWriter tw;
  tw.addFile("oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  tw.addFile("index.json", index.dump());
  tw.addDirectory("blobs");
  tw.addDirectory("blobs/sha256");
  for (const auto& [digest, data] : blobs) tw.addFile(blobPath(digest), data);
  return tw.finish();
}

}  // namespace knap::oci
