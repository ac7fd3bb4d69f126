// ContainerdImageStore against the machine's containerd: pulls an image from
// the in-process test registry and checks getImage(...).unpacked, as the pod
// driver needs it. Needs root and a running containerd; skips loudly otherwise.
#include "runtime/containerd/containerd_image_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "images/registry_puller.h"
#include "images/test_registry.h"
#include "runtime/containerd/image_import.h"

namespace knap::containerd {

using images::makeRegistryPuller;
using images::pullFailureReason;
namespace {

TEST(ContainerdImageStoreTest, ContainerdDownIsNotARegistryError) {
  ContainerdClient::Options o;
  o.address = "unix:///nonexistent/knap-images-test.sock";
  o.call_timeout = std::chrono::seconds(5);
  ContainerdImageStore store{ContainerdClient(o, RealTimeSource::instance())};
  auto session = store.begin("app:v1");
  ASSERT_FALSE(session.isOk());
  EXPECT_EQ(session.status().code(), Code::kFailedPrecondition) << session.status().toString();
  EXPECT_EQ(pullFailureReason(session.status()), "ImagePullFailed");
  EXPECT_NE(session.status().message().find("containerd"), std::string::npos);
}

TEST(ContainerdImageStoreTest, PullsIntoContainerdAndUnpacks) {
  if (::geteuid() != 0) GTEST_SKIP() << "\n*** SKIPPED: needs root (containerd) ***";
  ContainerdClient::Options o;
  o.ns = "knap-images-test-" + std::to_string(::getpid());
  ContainerdClient cd(o, RealTimeSource::instance());
  if (!cd.version(std::chrono::seconds(3)).isOk()) {
    GTEST_SKIP() << "\n*** SKIPPED: containerd does not answer on " << o.address << " ***";
  }
  oci::ImageSpec spec;
  spec.name = "app:v1";
  spec.platform = images::hostPlatform();
  spec.entrypoint = {"/bin/app"};
  spec.files = {{"/bin/app", "#!/bin/sh\necho hi\n", 0755}, {"/etc/motd", "pulled by knap\n"}};
  spec.gzip_layer = true;
  auto built = oci::buildImage(spec);
  ASSERT_TRUE(built.isOk()) << built.status().toString();

  images::testing::TestRegistry reg(images::testing::TestRegistry::Auth::kBearer);
  for (const auto& [digest, data] : built->blobs) {
    if (digest != built->manifest.digest) reg.addBlob(data);
  }
  reg.addManifest("team/app", "v1", built->manifest.media_type, built->blobs.at(built->manifest.digest));

  Config config = defaultConfig();
  config.knap.insecure_registries = {reg.host()};
  config.knap.data_dir = ::testing::TempDir() + "/knap-images-cd-" + std::to_string(::getpid());
  auto puller =
      makeRegistryPuller(config, std::make_unique<ContainerdImageStore>(cd), RealTimeSource::instance());
  ASSERT_TRUE(puller.isOk()) << puller.status().toString();
  const std::string image = reg.host() + "/team/app:v1";
  auto r = (*puller)->pull(image);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->manifest_digest, built->manifest.digest);
  EXPECT_GT(r->bytes_fetched, 0);

  for (const std::string& name : {image, r->digest_ref}) {
    auto info = getImage(cd, name);
    ASSERT_TRUE(info.isOk()) << name << ": " << info.status().toString();
    EXPECT_TRUE(info->unpacked) << name;
    EXPECT_EQ(info->manifest_digest, built->manifest.digest);
    EXPECT_EQ(info->config.entrypoint, std::vector<std::string>{"/bin/app"});
  }
  // The pull's lease is gone; the image record keeps everything alive.
  auto again = (*puller)->pull(image);
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_EQ(again->bytes_fetched, 0) << "present blobs are not fetched again";

  // Cleanup: records (sync GC removes blobs and snapshots), scratch dir.
  for (const std::string& name : {image, r->digest_ref}) (void)cd.deleteImage(name, true);
  auto snaps = cd.listSnapshots();
  if (snaps.isOk()) {
    for (auto it = snaps->rbegin(); it != snaps->rend(); ++it) (void)cd.removeSnapshot(it->name);
  }
  std::filesystem::remove_all(config.knap.data_dir);
  // Empty now (GC took blobs and snapshots with the records): drop the namespace.
  EXPECT_EQ(std::system(("ctr namespaces rm " + o.ns + " >/dev/null 2>&1").c_str()), 0)
      << "namespace not empty";
}

}  // namespace
}  // namespace knap::containerd
