// knap-mkimage: builds an OCI image layout tar from local files, for tests
// and for packaging small static apps without a container build tool.
//
//   knap-mkimage --out IMG.tar --name NAME:TAG --file SRC:DEST[:MODE]...
//       [--entrypoint a,b] [--cmd a,b] [--env K=V]... [--user U]
//       [--workdir D] [--expose 8080]... [--platform linux/amd64]
//       [--no-base-files] [--mtime SECONDS] [--gzip]
//   knap-mkimage --out IMG.tar --name NAME:TAG --index-of A.tar,B.tar
//       (one multi-platform image from single-platform archives)
//
// Output is deterministic: fixed timestamps (0 unless --mtime), sorted
// entries. The layer is a tar (gzip-compressed with --gzip) with parent directories,
// /etc/passwd and /etc/group (root, nobody, app=1000) and /tmp (1777).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "oci/oci_layout.h"
#include "oci/tar.h"

namespace kc = knap::oci;

namespace {

std::vector<std::string> splitList(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

int usage(const char* msg) {
  std::cerr
      << "knap-mkimage: " << msg << "\n"
      << "usage: knap-mkimage --out IMG.tar --name NAME:TAG --file SRC:DEST[:MODE]... [--entrypoint a,b]\n"
      << "         [--cmd a,b] [--env K=V]... [--user U] [--workdir D] [--expose PORT]...\n"
      << "         [--platform os/arch] [--no-base-files] [--mtime SECONDS] [--gzip]\n"
      << "       knap-mkimage --out IMG.tar --name NAME:TAG --index-of A.tar,B.tar\n";
  return 2;
}

bool readFile(const std::string& path, std::string* out, mode_t* mode) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return false;
  *mode = st.st_mode;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  kc::ImageSpec spec;
  std::string out, index_of;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "knap-mkimage: " << a << " needs a value\n";
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--out") {
      out = value();
    } else if (a == "--name") {
      spec.name = value();
    } else if (a == "--file") {
      std::vector<std::string> parts = splitList(value(), ':');
      if (parts.size() < 2 || parts.size() > 3) return usage("--file wants SRC:DEST[:MODE]");
      kc::LayerFileSpec f;
      f.dest = parts[1];
      mode_t st_mode = 0;
      if (!readFile(parts[0], &f.data, &st_mode)) {
        std::cerr << "knap-mkimage: cannot read " << parts[0] << ": " << strerror(errno) << "\n";
        return 1;
      }
      f.mode = (st_mode & 0111) ? 0755 : 0644;
      if (parts.size() == 3) f.mode = static_cast<uint32_t>(std::strtoul(parts[2].c_str(), nullptr, 8));
      spec.files.push_back(std::move(f));
    } else if (a == "--entrypoint") {
      spec.entrypoint = splitList(value());
    } else if (a == "--cmd") {
      spec.cmd = splitList(value());
    } else if (a == "--env") {
      std::string kv = value();
      if (kv.find('=') == std::string::npos) return usage("--env wants K=V");
      spec.env.push_back(kv);
    } else if (a == "--user") {
      spec.user = value();
    } else if (a == "--workdir") {
      spec.working_dir = value();
    } else if (a == "--expose") {
      spec.exposed_ports.push_back(value());
    } else if (a == "--platform") {
      knap::StatusOr<kc::Platform> p = kc::parsePlatform(value());
      if (!p.isOk()) return usage(p.status().message().c_str());
      spec.platform = *p;
    } else if (a == "--gzip") {
      spec.gzip_layer = true;
    } else if (a == "--no-base-files") {
      spec.add_base_files = false;
    } else if (a == "--mtime") {
      spec.mtime = std::strtoll(value().c_str(), nullptr, 10);
    } else if (a == "--index-of") {
      index_of = value();
    } else if (a == "--help" || a == "-h") {
      usage("help");
      return 0;
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  if (out.empty()) return usage("--out is required");
  if (spec.name.empty()) return usage("--name is required");

  std::vector<kc::BuiltImage> images;
  if (!index_of.empty()) {
    if (!spec.files.empty()) return usage("--index-of cannot be combined with --file");
    for (const std::string& path : splitList(index_of)) {
      knap::StatusOr<kc::TarReader> r = kc::TarReader::open(path);
      if (!r.isOk()) {
        std::cerr << "knap-mkimage: " << r.status().toString() << "\n";
        return 1;
      }
      knap::StatusOr<kc::BuiltImage> img = kc::loadLayoutImage(*r);
      if (!img.isOk()) {
        std::cerr << "knap-mkimage: " << path << ": " << img.status().toString() << "\n";
        return 1;
      }
      images.push_back(std::move(img).value());
    }
  } else {
    if (spec.files.empty()) return usage("at least one --file is required");
    knap::StatusOr<kc::BuiltImage> img = kc::buildImage(spec);
    if (!img.isOk()) {
      std::cerr << "knap-mkimage: " << img.status().toString() << "\n";
      return 1;
    }
    images.push_back(std::move(img).value());
  }
  std::string tar = kc::writeLayout(images, spec.name);
  std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(tar.data(), static_cast<std::streamsize>(tar.size()));
    if (!f) {
      std::cerr << "knap-mkimage: cannot write " << tmp << "\n";
      return 1;
    }
  }
  if (rename(tmp.c_str(), out.c_str()) != 0) {
    std::cerr << "knap-mkimage: rename " << tmp << ": " << strerror(errno) << "\n";
    return 1;
  }
  std::cout << out << " " << spec.name;
  for (const auto& img : images) std::cout << " " << img.platform.toString() << "=" << img.manifest.digest;
  std::cout << "\n";
  return 0;
}
