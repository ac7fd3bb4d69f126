#include "oci/oci_layout.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oci/digest.h"

namespace knap::oci {
namespace {

using nlohmann::json;

ImageSpec testSpec() {
  ImageSpec s;
  s.name = "knap.local/testapp:v1";
  s.entrypoint = {"/app/server"};
  s.cmd = {"--port-from-arg", "8080"};
  s.env = {"GREETING=hi"};
  s.user = "app";
  s.working_dir = "/app";
  s.exposed_ports = {"8080"};
  s.files.push_back({"/app/server", "#!binary", 0755});
  s.files.push_back({"/app/data/config.txt", "x=1", 0644});
  return s;
}

TEST(OciLayoutTest, BuildsAResolvableImage) {
  StatusOr<BuiltImage> img = buildImage(testSpec());
  ASSERT_TRUE(img.isOk()) << img.status().toString();
  EXPECT_EQ(img->blobs.size(), 3u);  // config, layer, manifest
  StatusOr<TarReader> archive = TarReader::fromString(writeLayout({*img}, "knap.local/testapp:v1"));
  ASSERT_TRUE(archive.isOk()) << archive.status().toString();
  ASSERT_NE(archive->find("oci-layout"), nullptr);

  json index = json::parse(*archive->readFile("index.json"));
  ASSERT_EQ(index["manifests"].size(), 1u);
  EXPECT_EQ(index["manifests"][0]["annotations"][kAnnotationContainerdName], "knap.local/testapp:v1");
  EXPECT_EQ(index["manifests"][0]["annotations"][kAnnotationRefName], "v1");
  EXPECT_EQ(index["manifests"][0]["platform"]["architecture"], "amd64");

  StatusOr<ResolvedImage> r = resolveLayout(*archive, Platform{});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->name, "knap.local/testapp:v1");
  EXPECT_EQ(r->manifest.digest, img->manifest.digest);
  EXPECT_EQ(r->manifest.media_type, kMediaTypeOciManifest);
  ASSERT_EQ(r->layers.size(), 1u);
  EXPECT_EQ(r->layers[0].media_type, kMediaTypeOciLayer);
  // Uncompressed layer: the diff_id is the layer's own digest.
  EXPECT_EQ(r->image_config.diff_ids, std::vector<std::string>{r->layers[0].digest});
  EXPECT_EQ(r->image_config.entrypoint, std::vector<std::string>{"/app/server"});
  EXPECT_EQ(r->image_config.cmd, (std::vector<std::string>{"--port-from-arg", "8080"}));
  EXPECT_EQ(r->image_config.user, "app");
  EXPECT_EQ(r->image_config.working_dir, "/app");
  EXPECT_EQ(r->image_config.exposed_ports, std::vector<std::string>{"8080/tcp"});
  EXPECT_EQ(r->image_config.os, "linux");
  ASSERT_EQ(r->image_config.env.size(), 2u);
  EXPECT_EQ(r->image_config.env[0].rfind("PATH=", 0), 0u);  // default PATH added
  EXPECT_EQ(r->image_config.env[1], "GREETING=hi");
}

TEST(OciLayoutTest, LayerHasParentsBaseFilesAndModes) {
  StatusOr<BuiltImage> img = buildImage(testSpec());
  ASSERT_TRUE(img.isOk());
  StatusOr<TarReader> archive = TarReader::fromString(writeLayout({*img}, "x:y"));
  ASSERT_TRUE(archive.isOk());
  StatusOr<ResolvedImage> r = resolveLayout(*archive, Platform{});
  ASSERT_TRUE(r.isOk());
  StatusOr<TarReader> layer = TarReader::fromString(img->blobs.at(r->layers[0].digest));
  ASSERT_TRUE(layer.isOk()) << layer.status().toString();
  std::vector<std::string> paths;
  for (const auto& e : layer->entries()) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"app", "app/data", "app/data/config.txt", "app/server", "etc",
                                             "etc/group", "etc/passwd", "home", "home/app", "tmp"}));
  EXPECT_EQ(layer->find("app")->type, TarType::kDirectory);
  EXPECT_EQ(layer->find("app/server")->mode, 0755u);
  EXPECT_EQ(layer->find("tmp")->mode, 01777u);
  EXPECT_EQ(layer->find("home/app")->uid, 1000u);
  std::string passwd = *layer->readFile("etc/passwd");
  EXPECT_NE(passwd.find("app:x:1000:1000:"), std::string::npos);
  EXPECT_NE(layer->readFile("etc/group")->find("app:x:1000:"), std::string::npos);
  for (const auto& e : layer->entries()) EXPECT_EQ(e.mtime, 0) << e.path;
}

TEST(OciLayoutTest, OutputIsDeterministic) {
  StatusOr<BuiltImage> a = buildImage(testSpec());
  StatusOr<BuiltImage> b = buildImage(testSpec());
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(writeLayout({*a}, "n:t"), writeLayout({*b}, "n:t"));
  ImageSpec changed = testSpec();
  changed.files[1].data = "x=2";
  StatusOr<BuiltImage> c = buildImage(changed);
  ASSERT_TRUE(c.isOk());
  EXPECT_NE(c->manifest.digest, a->manifest.digest);
}

TEST(OciLayoutTest, GzipLayerKeepsTheTarDigestAsDiffId) {
  ImageSpec plain = testSpec();
  ImageSpec gz = testSpec();
  gz.gzip_layer = true;
  StatusOr<BuiltImage> a = buildImage(plain), b = buildImage(gz), b2 = buildImage(gz);
  ASSERT_TRUE(a.isOk() && b.isOk() && b2.isOk());
  EXPECT_EQ(b->manifest.digest, b2->manifest.digest);  // still deterministic
  StatusOr<TarReader> archive = TarReader::fromString(writeLayout({*b}, "g:1"));
  ASSERT_TRUE(archive.isOk());
  StatusOr<ResolvedImage> r = resolveLayout(*archive, Platform{});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->layers[0].media_type, kMediaTypeOciLayerGzip);
  EXPECT_NE(r->layers[0].digest, r->image_config.diff_ids[0]);
  StatusOr<std::string> tar = gzipDecompress(b->blobs.at(r->layers[0].digest));
  ASSERT_TRUE(tar.isOk()) << tar.status().toString();
  EXPECT_EQ(sha256Digest(*tar), r->image_config.diff_ids[0]);
  // Same content as the uncompressed image's layer.
  StatusOr<ResolvedImage> ra = resolveLayout(*TarReader::fromString(writeLayout({*a}, "g:1")), Platform{});
  ASSERT_TRUE(ra.isOk());
  EXPECT_EQ(ra->image_config.diff_ids, r->image_config.diff_ids);
  EXPECT_EQ(gzipDecompress("not gzip").status().code(), Code::kInvalidArgument);
}

TEST(OciLayoutTest, RejectsBadDestinations) {
  ImageSpec s = testSpec();
  s.files.push_back({"relative/path", "", 0644});
  EXPECT_EQ(buildImage(s).status().code(), Code::kInvalidArgument);
  s = testSpec();
  s.files.push_back({"/app/server", "again", 0644});
  EXPECT_EQ(buildImage(s).status().code(), Code::kInvalidArgument);
}

TEST(OciLayoutTest, MultiPlatformIndexSelectsByPlatform) {
  ImageSpec amd = testSpec();
  ImageSpec arm = testSpec();
  arm.platform = *parsePlatform("linux/arm64/v8");
  arm.files[0].data = "#!arm-binary";
  StatusOr<BuiltImage> a = buildImage(amd), b = buildImage(arm);
  ASSERT_TRUE(a.isOk() && b.isOk());
  // Round-trip each through its own archive, the way `--index-of` does.
  StatusOr<TarReader> ta = TarReader::fromString(writeLayout({*a}, "m:1"));
  StatusOr<TarReader> tb = TarReader::fromString(writeLayout({*b}, "m:1"));
  ASSERT_TRUE(ta.isOk() && tb.isOk());
  StatusOr<BuiltImage> la = loadLayoutImage(*ta), lb = loadLayoutImage(*tb);
  ASSERT_TRUE(la.isOk()) << la.status().toString();
  ASSERT_TRUE(lb.isOk()) << lb.status().toString();
  EXPECT_EQ(la->manifest.digest, a->manifest.digest);
  EXPECT_EQ(lb->platform.toString(), "linux/arm64/v8");

  StatusOr<TarReader> multi = TarReader::fromString(writeLayout({*la, *lb}, "knap.local/multi:v1"));
  ASSERT_TRUE(multi.isOk());
  json index = json::parse(*multi->readFile("index.json"));
  ASSERT_EQ(index["manifests"].size(), 1u);
  EXPECT_EQ(index["manifests"][0]["mediaType"], kMediaTypeOciIndex);

  StatusOr<ResolvedImage> ra = resolveLayout(*multi, Platform{});
  ASSERT_TRUE(ra.isOk()) << ra.status().toString();
  EXPECT_EQ(ra->manifest.digest, a->manifest.digest);
  EXPECT_EQ(ra->name, "knap.local/multi:v1");
  ASSERT_EQ(ra->indexes.size(), 1u);
  StatusOr<ResolvedImage> rb = resolveLayout(*multi, *parsePlatform("linux/arm64"));
  ASSERT_TRUE(rb.isOk()) << rb.status().toString();
  EXPECT_EQ(rb->manifest.digest, b->manifest.digest);

  StatusOr<ResolvedImage> none = resolveLayout(*multi, *parsePlatform("linux/s390x"));
  EXPECT_EQ(none.status().code(), Code::kNotFound);
  EXPECT_NE(none.status().message().find("linux/arm64/v8"), std::string::npos) << none.status().message();
}

TEST(OciLayoutTest, DetectsTamperedBlobs) {
  StatusOr<BuiltImage> img = buildImage(testSpec());
  ASSERT_TRUE(img.isOk());
  BuiltImage bad = *img;
  // Corrupt the config blob but keep its size.
  std::string config_digest;
  for (auto& [d, data] : bad.blobs) {
    if (data.find("\"rootfs\"") != std::string::npos) {
      config_digest = d;
      data[data.size() - 2] = data[data.size() - 2] == 'x' ? 'y' : 'x';
    }
  }
  ASSERT_FALSE(config_digest.empty());
  StatusOr<TarReader> archive = TarReader::fromString(writeLayout({bad}, "x:y"));
  ASSERT_TRUE(archive.isOk());
  StatusOr<ResolvedImage> r = resolveLayout(*archive, Platform{});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

TEST(OciLayoutTest, RequiresLayoutFiles) {
  TarWriter w;
  w.addFile("index.json", R"({"schemaVersion":2,"manifests":[]})");
  StatusOr<TarReader> a = TarReader::fromString(w.finish());
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(resolveLayout(*a, Platform{}).status().code(), Code::kInvalidArgument);  // no oci-layout
}

TEST(OciLayoutTest, ParsesPlatforms) {
  EXPECT_EQ(parsePlatform("linux/amd64")->toString(), "linux/amd64");
  EXPECT_EQ(parsePlatform("linux/arm/v7")->variant, "v7");
  EXPECT_FALSE(parsePlatform("linux").isOk());
  EXPECT_FALSE(parsePlatform("linux/").isOk());
  EXPECT_EQ(blobPath("sha256:abc"), "blobs/sha256/abc");
}

}  // namespace
}  // namespace knap::oci
